//! Tenants (`GPUTenant`): which namespaces share a quota, and what each
//! tenant holds and waits for.
//!
//! A namespace belongs to the first tenant by name whose globs match its
//! name or whose `namespaceSelector` selects its labels (the index keeps
//! every Namespace's labels for that); a
//! tenant whose spec is unusable (an object stored before the CRD's rules)
//! matches no namespace and is reported as invalid. Holdings count every
//! live holding of a tenant's namespaces — bound pods, bindings in flight,
//! reserved gang members, nominated preemptors — one per device (a MIG
//! instance or a share is one), across every policy: a limit is the
//! tenant's, whichever policies place its pods. Pods on their way out
//! (deleting, or named victims of a preemption) are not counted.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Namespace;
use wasmgpu_api::GPUTenant;
use wasmgpu_contract::types::{Ask, Tenant};

use crate::facts::tenant::TenantFacts;
use crate::holdings::Holdings;
use crate::index::Index;

/// Most namespaces a tenant's status lists.
const MAX_NAMESPACES_SEEN: usize = 100;

/// What the controller writes on a tenant's status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantView {
    /// The tenant's name.
    pub name: String,
    /// `metadata.generation` of the spec seen.
    pub generation: Option<i64>,
    /// Why the spec is unusable, if it is.
    pub error: Option<String>,
    /// `spec.quota`.
    pub quota: u32,
    /// `spec.limit`.
    pub limit: Option<u32>,
    /// GPUs its pods hold.
    pub holding: u32,
    /// GPUs its pending pods ask for.
    pub waiting: u32,
    /// Its pods holding GPUs.
    pub pods_holding: u32,
    /// Its pods waiting for GPUs.
    pub pods_waiting: u32,
    /// Namespaces of those pods, sorted, at most 100.
    pub namespaces_seen: Vec<String>,
}

/// Every tenant of one round with what it holds and waits for, and which
/// namespace belongs to which.
#[derive(Debug, Default)]
pub(crate) struct TenantTable {
    /// Tenants sorted by name, as the snapshot lists them.
    pub tenants: Vec<Tenant>,
    /// The views behind them, same order.
    views: Vec<TenantView>,
    /// Namespace → position in `tenants` (None: no tenant).
    namespace_to_tenant: HashMap<String, Option<u32>>,
    /// Each tenant's `minRuntimeSeconds` in ms, same order.
    min_runtime_ms: Vec<Option<u64>>,
}

impl TenantTable {
    /// The tenant of `namespace`, as a position in `tenants`.
    pub fn of(&self, namespace: &str) -> Option<u32> {
        self.namespace_to_tenant.get(namespace).copied().flatten()
    }

    /// The minimum runtime a tenant sets for its pods, in ms.
    pub fn min_runtime_ms(&self, tenant: Option<u32>) -> Option<u64> {
        self.min_runtime_ms.get(tenant? as usize).copied().flatten()
    }
}

/// GPUs (devices) a pending request asks for: a MIG instance or a share is
/// one.
pub(crate) fn asked(ask: &Ask) -> u32 {
    match ask {
        Ask::Gpus(shape) => shape.count,
        Ask::Claims(claims) => claims
            .iter()
            .flat_map(|c| &c.requests)
            .map(|r| r.alternatives.first().map_or(0, |a| a.count))
            .sum(),
    }
}

// === impl Index ===

impl Index {
    /// Records a GPUTenant (added or changed).
    pub fn apply_gputenant(&mut self, tenant: &GPUTenant) {
        let Some(name) = &tenant.metadata.name else {
            return;
        };
        let error = tenant.spec.check().err();
        if let Some(error) = &error {
            tracing::warn!(tenant = %name, %error, "GPUTenant is invalid; it matches no namespace until fixed");
        }
        self.name_to_tenant.insert(
            name.clone(),
            TenantFacts {
                spec: tenant.spec.clone(),
                error,
                generation: tenant.metadata.generation,
            },
        );
    }

    /// Forgets a GPUTenant.
    pub fn delete_gputenant(&mut self, name: &str) {
        self.name_to_tenant.remove(name);
    }

    /// Replaces every GPUTenant (after a relist).
    pub fn reset_gputenants(&mut self, tenants: &[GPUTenant]) {
        self.name_to_tenant.clear();
        for tenant in tenants {
            self.apply_gputenant(tenant);
        }
    }

    /// Records a Namespace's labels (added or changed).
    pub fn apply_namespace(&mut self, namespace: &Namespace) {
        if let Some(name) = &namespace.metadata.name {
            let labels = namespace.metadata.labels.clone().unwrap_or_default();
            self.namespace_to_labels.insert(name.clone(), labels);
        }
    }

    /// Forgets a Namespace.
    pub fn delete_namespace(&mut self, name: &str) {
        self.namespace_to_labels.remove(name);
    }

    /// Replaces every Namespace (after a relist).
    pub fn reset_namespaces(&mut self, namespaces: &[Namespace]) {
        self.namespace_to_labels.clear();
        for namespace in namespaces {
            self.apply_namespace(namespace);
        }
    }

    /// The tenant `namespace` belongs to: the first valid one by name whose
    /// globs match it or whose `namespaceSelector` selects its labels.
    pub fn tenant_of(&self, namespace: &str) -> Option<&str> {
        let labels = self.namespace_to_labels.get(namespace);
        self.name_to_tenant
            .iter()
            .find(|(_, t)| t.error.is_none() && t.spec.matches(namespace, labels))
            .map(|(name, _)| name.as_str())
    }

    /// Every tenant with what it holds and waits for now (for its status).
    pub fn tenant_views(&self) -> Vec<TenantView> {
        self.tenant_views_in(&self.holdings())
    }

    pub(crate) fn tenant_views_in(&self, holdings: &Holdings) -> Vec<TenantView> {
        if self.name_to_tenant.is_empty() {
            return Vec::new();
        }
        self.tenant_views_of(holdings, self.survey(holdings).asks())
    }

    /// [`Index::tenant_views_in`] from the asks of a survey already made.
    pub(crate) fn tenant_views_of<'w>(
        &self,
        holdings: &Holdings,
        waiting: impl Iterator<Item = (&'w str, &'w Ask)>,
    ) -> Vec<TenantView> {
        if self.name_to_tenant.is_empty() {
            return Vec::new();
        }
        self.tenant_table(holdings, waiting).views
    }

    /// The round's tenant table: `waiting` is every pod that waits, of
    /// every policy, as its namespace and what it asks for.
    pub(crate) fn tenant_table<'w>(
        &self,
        holdings: &Holdings,
        waiting: impl Iterator<Item = (&'w str, &'w Ask)>,
    ) -> TenantTable {
        let mut table = TenantTable::default();
        if self.name_to_tenant.is_empty() {
            return table;
        }
        let position: BTreeMap<&str, usize> = self
            .name_to_tenant
            .keys()
            .enumerate()
            .map(|(i, name)| (name.as_str(), i))
            .collect();
        table.views = self
            .name_to_tenant
            .iter()
            .map(|(name, t)| TenantView {
                name: name.clone(),
                generation: t.generation,
                error: t.error.as_ref().map(ToString::to_string),
                quota: t.spec.quota,
                limit: t.spec.limit,
                ..TenantView::default()
            })
            .collect();
        table.min_runtime_ms = self
            .name_to_tenant
            .values()
            .map(|t| t.spec.min_runtime_seconds.map(|s| u64::from(s) * 1000))
            .collect();
        let mut seen: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); table.views.len()];
        let mut tenant_of = |namespace: &str| -> Option<usize> {
            if let Some(&t) = table.namespace_to_tenant.get(namespace) {
                return t.map(|t| t as usize);
            }
            let t = self.tenant_of(namespace).map(|name| position[name]);
            table
                .namespace_to_tenant
                .insert(namespace.to_string(), t.map(|t| t as u32));
            t
        };
        // Pods on their way out (deleting, or victims of a nomination) do
        // not count: their GPUs are promised to others, and reclaiming
        // must not take a tenant below its quota by counting them twice.
        let victims = self.nominated_victims();
        for holding in holdings.live() {
            let leaving = holding
                .facts
                .is_some_and(|p| p.deleting || victims.contains(p.uid.as_str()));
            if leaving {
                continue;
            }
            let namespace = holding.pod.namespace.as_str();
            if let Some(t) = tenant_of(namespace) {
                let view = &mut table.views[t];
                view.holding += holding.allocation.devices.len() as u32;
                view.pods_holding += 1;
                seen[t].insert(namespace);
            }
        }
        // Devices ResourceClaims hold count for the claim's namespace,
        // whoever allocated them (a claim shared by pods counts once).
        for (claim, device) in self.dra.allocated() {
            if self.dra.locate(device).is_none() {
                continue;
            }
            let namespace = claim.namespace.as_str();
            if let Some(t) = tenant_of(namespace) {
                table.views[t].holding += 1;
                seen[t].insert(namespace);
            }
        }
        for (namespace, ask) in waiting {
            if let Some(t) = tenant_of(namespace) {
                let view = &mut table.views[t];
                view.waiting += asked(ask);
                view.pods_waiting += 1;
                seen[t].insert(namespace);
            }
        }
        for (view, seen) in table.views.iter_mut().zip(seen) {
            view.namespaces_seen = seen
                .into_iter()
                .take(MAX_NAMESPACES_SEEN)
                .map(str::to_string)
                .collect();
        }
        table.tenants = table
            .views
            .iter()
            .zip(self.name_to_tenant.values())
            .map(|(view, facts)| Tenant {
                name: view.name.clone(),
                weight: facts.spec.weight,
                quota: facts.spec.quota,
                limit: facts.spec.limit,
                holding: view.holding,
                waiting: view.waiting,
            })
            .collect();
        table
    }
}
