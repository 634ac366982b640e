//! Fair-share accounting: what each tenant holds, its dominant share, and the
//! order tenants are served in.
//!
//! ```text
//!  usage(snapshot)─┐                                  ┌─▶ below quota?  (GPU-equivalents < quota)
//!                  ├─▶ Holding per tenant ─▶ Capacity ┤
//!  round's placements ┘  (gpus, shared MiB)           └─▶ dominant share ─▶ weighted share beyond quota
//! ```

use std::cmp::Ordering;
use std::collections::BTreeMap;

use wasmgpu_policy_sdk::{Decision, Request, Sharing, Snapshot};

use crate::config::Config;

/// A MIG instance counts as this fraction of a GPU: the finest MIG slice of
/// an A100 or H100 is a seventh of it.
pub const MIG_SLICES: f64 = 7.0;

/// Differences below this are rounding, not GPUs.
const EPSILON: f64 = 1e-9;

/// What a tenant holds (or a request asks for), in the two resources the
/// shares are taken over.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Holding {
    /// Whole GPUs held exclusively, plus MIG instances at `1 / MIG_SLICES` each.
    pub gpus: f64,
    /// Memory held on shared GPUs, in MiB.
    pub shared_mib: f64,
}

impl Holding {
    /// What a namespace holds now, from [`wasmgpu_policy_sdk::usage`].
    pub fn of_usage(usage: &wasmgpu_policy_sdk::Usage) -> Holding {
        Holding {
            gpus: f64::from(usage.exclusive_gpus) + f64::from(usage.mig_instances) / MIG_SLICES,
            shared_mib: usage.shared_mib as f64,
        }
    }

    /// What `request` takes once placed. A DRA request counts the devices
    /// of its first alternatives as whole GPUs ([`wasmgpu_policy_sdk::devices_of`]):
    /// what it is given is counted by [`Holding::of_placed`].
    pub fn of_request(request: &Request) -> Holding {
        let Some(request) = wasmgpu_policy_sdk::shape_of(request) else {
            return Holding {
                gpus: f64::from(wasmgpu_policy_sdk::devices_of(request)),
                shared_mib: 0.0,
            };
        };
        let count = f64::from(request.count);
        match (request.sharing, &request.mig_profile) {
            (_, Some(_)) => Holding {
                gpus: count / MIG_SLICES,
                shared_mib: 0.0,
            },
            (Sharing::Exclusive, None) => Holding {
                gpus: count,
                shared_mib: 0.0,
            },
            (Sharing::Shared, None) => Holding {
                gpus: 0.0,
                shared_mib: count * request.memory_mib as f64,
            },
        }
    }

    /// What `request` took by `decision`: for a DRA pod's assignment, its
    /// claim choices' devices (a whole GPU as one, a MIG instance as
    /// `1 / MIG_SLICES`); otherwise [`Holding::of_request`].
    pub fn of_placed(snapshot: &Snapshot, request: &Request, decision: &Decision) -> Holding {
        let Decision::Assign(a) = decision else {
            return Holding::of_request(request);
        };
        if wasmgpu_policy_sdk::shape_of(request).is_some() {
            return Holding::of_request(request);
        }
        let node = snapshot.nodes.get(a.node as usize);
        let gpus = a.claims.iter().flat_map(|c| &c.gpus).map(|&g| {
            let gpu = node.and_then(|n| n.gpus.get(g as usize));
            if gpu.is_some_and(|g| g.mig.is_some()) {
                1.0 / MIG_SLICES
            } else {
                1.0
            }
        });
        Holding {
            gpus: gpus.sum(),
            shared_mib: 0.0,
        }
    }

    /// Adds `other` to this holding.
    pub fn add(&mut self, other: Holding) {
        self.gpus += other.gpus;
        self.shared_mib += other.shared_mib;
    }
}

/// The cluster's capacity in both resources: the healthy whole GPUs of the
/// snapshot's nodes, and their memory (any whole GPU can be shared).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    /// Healthy whole GPUs.
    pub gpus: f64,
    /// Their memory, in MiB.
    pub shared_mib: f64,
}

impl Capacity {
    /// The capacity of the snapshot's nodes.
    pub fn of(snapshot: &Snapshot) -> Capacity {
        let whole = snapshot
            .nodes
            .iter()
            .flat_map(|n| &n.gpus)
            .filter(|g| g.healthy && g.mig.is_none());
        let (gpus, shared_mib) = whole.fold((0.0, 0.0), |(n, mib), g| {
            (n + 1.0, mib + g.memory_mib as f64)
        });
        Capacity { gpus, shared_mib }
    }

    /// `max(gpus / capacity gpus, shared MiB / capacity MiB)`; 0 for a
    /// resource the cluster has none of.
    pub fn dominant_share(&self, held: Holding) -> f64 {
        let share = |held: f64, capacity: f64| if capacity > 0.0 { held / capacity } else { 0.0 };
        share(held.gpus, self.gpus).max(share(held.shared_mib, self.shared_mib))
    }

    /// `gpus + shared MiB / (mean memory of a GPU)`: what quotas and limits
    /// count.
    pub fn gpu_equivalents(&self, held: Holding) -> f64 {
        if self.shared_mib > 0.0 {
            held.gpus + held.shared_mib * self.gpus / self.shared_mib
        } else {
            held.gpus
        }
    }
}

/// A tenant: a GPUTenant object, a tenant of `config.json`, or a namespace
/// no tenant matches.
#[derive(Clone, Debug)]
pub struct Tenant {
    /// The tenant's name, or the namespace.
    pub name: String,
    /// Where it is defined, for messages.
    pub source: Source,
    /// GPUs guaranteed.
    pub quota: Option<u32>,
    /// The most GPUs it may hold.
    pub limit: Option<u32>,
    /// Its weight.
    pub weight: f64,
    /// What it holds: what its running pods hold plus the round's placements.
    pub held: Holding,
}

/// Where a tenant is defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A `GPUTenant` object, at this position in `snapshot.tenants`.
    Object(u32),
    /// `config.json`'s `tenants`, at this position.
    Config(usize),
    /// A namespace no tenant matches: a tenant of its own.
    Namespace,
}

/// Where a tenant stands in the order of service; lower is served first.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Standing {
    /// Below its quota, by how much of the quota it holds (0 to 1).
    BelowQuota(f64),
    /// At or above its quota (or without one), by its weighted dominant share
    /// beyond the quota.
    Share(f64),
}

impl Standing {
    /// Below-quota tenants first, each tier by its value.
    pub fn compare(&self, other: &Standing) -> Ordering {
        match (self, other) {
            (Standing::BelowQuota(a), Standing::BelowQuota(b))
            | (Standing::Share(a), Standing::Share(b)) => a.total_cmp(b),
            (Standing::BelowQuota(_), Standing::Share(_)) => Ordering::Less,
            (Standing::Share(_), Standing::BelowQuota(_)) => Ordering::Greater,
        }
    }
}

impl Tenant {
    /// Its standing: below quota, or `max(0, dominant share - quota / capacity
    /// GPUs) / weight`.
    pub fn standing(&self, capacity: &Capacity) -> Standing {
        let quota = f64::from(self.quota.unwrap_or(0));
        let held = capacity.gpu_equivalents(self.held);
        if held + EPSILON < quota {
            return Standing::BelowQuota(held / quota);
        }
        let quota_share = if capacity.gpus > 0.0 {
            quota / capacity.gpus
        } else {
            0.0
        };
        let beyond = (capacity.dominant_share(self.held) - quota_share).max(0.0);
        Standing::Share(beyond / self.weight)
    }

    /// Why taking `more` would break the tenant's limit, or `None` when it
    /// stays within it. `what` names the taker ("pod", "gang").
    pub fn over_limit(&self, capacity: &Capacity, more: Holding, what: &str) -> Option<String> {
        let limit = self.limit?;
        let held = capacity.gpu_equivalents(self.held);
        let wanted = capacity.gpu_equivalents(more);
        if held + wanted <= f64::from(limit) + EPSILON {
            return None;
        }
        let field = match self.source {
            Source::Object(_) => format!(" (GPUTenant {}: spec.limit)", self.name),
            Source::Config(i) => format!(" (fairshare config tenants[{i}].limit)"),
            Source::Namespace => String::new(),
        };
        Some(format!(
            "tenant {} holds {} of its limit {limit} GPUs{field}; this {what} needs {} more",
            self.name,
            gpus(held),
            gpus(wanted)
        ))
    }
}

/// A GPU count in words: whole numbers without decimals.
pub fn gpus(value: f64) -> String {
    if (value - value.round()).abs() < 1e-6 {
        format!("{}", value.round())
    } else {
        format!("{value:.2}")
    }
}

/// Every tenant a round deals with, and which one each namespace belongs to.
///
/// The GPUTenant objects (`snapshot.tenants`) win: when there are any, the
/// tenants of `config.json` are ignored (and a log line says so), and each
/// pod's tenant is the one the host names. Without objects, `config.json`'s
/// tenants apply as before.
#[derive(Clone, Debug)]
pub struct Tenants<'c> {
    config: &'c Config,
    /// Whether the tenants are the snapshot's objects.
    objects: bool,
    /// The tenants: objects or configured ones first (in their order), then
    /// namespaces of their own in the order met.
    pub all: Vec<Tenant>,
    namespace_to_tenant: BTreeMap<String, usize>,
}

impl<'c> Tenants<'c> {
    /// The tenants, holding what the snapshot's running pods of their
    /// namespaces hold.
    pub fn new(config: &'c Config, snapshot: &Snapshot) -> Self {
        let objects = !snapshot.tenants.is_empty();
        let all = if objects {
            snapshot
                .tenants
                .iter()
                .enumerate()
                .map(|(i, t)| Tenant {
                    name: t.name.clone(),
                    source: Source::Object(i as u32),
                    quota: Some(t.quota),
                    limit: t.limit,
                    weight: f64::from(t.weight.max(1)),
                    held: Holding::default(),
                })
                .collect()
        } else {
            config
                .tenants
                .iter()
                .enumerate()
                .map(|(i, t)| Tenant {
                    name: t.name.clone(),
                    source: Source::Config(i),
                    quota: t.quota,
                    limit: t.limit,
                    weight: t.weight,
                    held: Holding::default(),
                })
                .collect()
        };
        let mut namespace_to_tenant = BTreeMap::new();
        if objects {
            let tenant_of = snapshot
                .pending
                .iter()
                .map(|r| (r.namespace, r.tenant))
                .chain(snapshot.running.iter().map(|r| (r.namespace, r.tenant)));
            for (namespace, tenant) in tenant_of {
                if let Some(t) = tenant.filter(|&t| (t as usize) < snapshot.tenants.len()) {
                    namespace_to_tenant
                        .insert(snapshot.namespace(namespace).to_owned(), t as usize);
                }
            }
            if !config.tenants.is_empty() {
                wasmgpu_policy_sdk::log(&format!(
                    "fairshare: config.json lists {} tenant(s), ignored: {} GPUTenant object(s) \
                     define the tenants; remove `tenants` from config.json \
                     (`wasmgpu tenant migrate config.json` prints them as GPUTenants)",
                    config.tenants.len(),
                    snapshot.tenants.len()
                ));
            }
        }
        let mut tenants = Tenants {
            config,
            objects,
            all,
            namespace_to_tenant,
        };
        for usage in wasmgpu_policy_sdk::usage(snapshot) {
            let t = tenants.of_namespace(&usage.namespace);
            tenants.all[t].held.add(Holding::of_usage(&usage));
        }
        tenants
    }

    /// The tenant of `namespace` (created with the default weight when no
    /// tenant matches it), as a position in `all`.
    pub fn of_namespace(&mut self, namespace: &str) -> usize {
        if let Some(&t) = self.namespace_to_tenant.get(namespace) {
            return t;
        }
        let configured = if self.objects {
            None
        } else {
            self.config.tenant_of(namespace)
        };
        let t = match configured {
            Some(t) => t,
            None => {
                self.all.push(Tenant {
                    name: namespace.to_owned(),
                    source: Source::Namespace,
                    quota: None,
                    limit: None,
                    weight: self.config.default_weight,
                    held: Holding::default(),
                });
                self.all.len() - 1
            }
        };
        self.namespace_to_tenant.insert(namespace.to_owned(), t);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(quota: Option<u32>, weight: f64, gpus: f64, shared_mib: f64) -> Tenant {
        Tenant {
            name: "t".into(),
            source: Source::Config(0),
            quota,
            limit: Some(8),
            weight,
            held: Holding { gpus, shared_mib },
        }
    }

    #[test]
    fn dominant_share_takes_the_larger_resource_and_weight_divides_it() {
        // 8 GPUs of 80,000 MiB: 640,000 MiB to share.
        let capacity = Capacity {
            gpus: 8.0,
            shared_mib: 640_000.0,
        };
        // 2 GPUs (1/4) and 240,000 MiB (3/8): memory dominates.
        let t = tenant(None, 1.0, 2.0, 240_000.0);
        assert_eq!(capacity.dominant_share(t.held), 0.375);
        assert_eq!(t.standing(&capacity), Standing::Share(0.375));
        let t = tenant(None, 3.0, 2.0, 240_000.0);
        assert_eq!(t.standing(&capacity), Standing::Share(0.125));
        // GPU-equivalents: 2 GPUs plus 3 GPUs' worth of memory.
        assert_eq!(capacity.gpu_equivalents(t.held), 5.0);
        // Quota 4 of 8 GPUs: half the cluster is subtracted first.
        let t = tenant(Some(4), 1.0, 6.0, 0.0);
        assert_eq!(t.standing(&capacity), Standing::Share(0.25));
        let t = tenant(Some(4), 1.0, 1.0, 0.0);
        assert_eq!(t.standing(&capacity), Standing::BelowQuota(0.25));
        assert_eq!(
            Standing::BelowQuota(0.9).compare(&Standing::Share(0.0)),
            Ordering::Less
        );
    }

    #[test]
    fn mig_instances_count_as_sevenths() {
        let usage = wasmgpu_policy_sdk::Usage {
            namespace: "a".into(),
            exclusive_gpus: 2,
            shared_mib: 100,
            mig_instances: 7,
        };
        assert_eq!(
            Holding::of_usage(&usage),
            Holding {
                gpus: 3.0,
                shared_mib: 100.0
            }
        );
    }

    #[test]
    fn the_limit_counts_what_is_held_and_what_is_asked() {
        let capacity = Capacity {
            gpus: 8.0,
            shared_mib: 640_000.0,
        };
        let t = tenant(None, 1.0, 7.0, 0.0);
        let one = Holding {
            gpus: 1.0,
            shared_mib: 0.0,
        };
        assert_eq!(t.over_limit(&capacity, one, "pod"), None);
        let two = Holding {
            gpus: 2.0,
            shared_mib: 0.0,
        };
        assert_eq!(
            t.over_limit(&capacity, two, "pod").unwrap(),
            "tenant t holds 7 of its limit 8 GPUs (fairshare config tenants[0].limit); this pod needs 2 more"
        );
        assert_eq!(gpus(0.5), "0.50");
    }
}
