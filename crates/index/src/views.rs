//! What the controller reads back from the index: GPUResources as it
//! reports on them, pods' state, and, from one reading of the holdings,
//! everything a round starts with and reports.

use std::collections::{BTreeMap, HashMap};

use wasmgpu_api::{Allocation, InvalidSpec};

use crate::drift::{OutdatedHoldings, UnhealthyHolding};
use crate::facts::binding::PendingBinding;
use crate::facts::pod::PodFacts;
use crate::facts::resource::ResourceState;
use crate::holdings::{self, GpuState, Release};
use crate::index::Index;
use crate::key::ObjectKey;
use crate::nominations::Eviction;
use crate::problem::Problem;
use crate::tenants::TenantView;

/// What the controller needs to know of a GPUResource to report on it.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceView {
    /// The GPUResource.
    pub key: ObjectKey,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.resourceVersion` of the copy the index holds.
    pub resource_version: Option<String>,
    /// The policy that places its pods.
    pub policy: String,
    /// Why the spec is unusable, if it is.
    pub spec_error: Option<InvalidSpec>,
    /// Being deleted.
    pub deleting: bool,
    /// `metadata.finalizers`.
    pub finalizers: Vec<String>,
    /// The ledger earlier versions kept (emptied as it is moved onto pods).
    pub allocations: Vec<Allocation>,
}

pub use crate::tally::PodCounts;

impl Index {
    /// Pools of ResourceSlices whose devices are not used, and why.
    pub fn resourceslice_problems(&self) -> Vec<Problem> {
        self.dra
            .problems()
            .into_iter()
            .map(|(key, problem, slice)| Problem::UnusableResourcePool {
                slice: slice.to_string(),
                pool: key.to_string(),
                problem: problem.clone(),
            })
            .collect()
    }

    /// Every GPUResource, as the controller reports on it.
    pub fn resources(&self) -> Vec<ResourceView> {
        self.key_to_resource
            .iter()
            .map(|(key, state)| self.view(key, state))
            .collect()
    }

    /// One GPUResource, as the controller reports on it.
    pub fn resource(&self, key: &ObjectKey) -> Option<ResourceView> {
        self.key_to_resource
            .get(key)
            .map(|state| self.view(key, state))
    }

    fn view(&self, key: &ObjectKey, state: &ResourceState) -> ResourceView {
        ResourceView {
            key: key.clone(),
            uid: state.uid.clone(),
            generation: state.generation,
            resource_version: state.resource_version.clone(),
            policy: self.policy_of(&state.spec).to_string(),
            spec_error: state.spec_error.clone(),
            deleting: state.deleting,
            finalizers: state.finalizers.clone(),
            allocations: state.allocations.clone(),
        }
    }

    /// Ledger entries of earlier versions to remove: their pod is gone,
    /// finished or recreated (the GPUs are free), or carries the allocation
    /// itself now. Stale entries wait until the pods have been listed once
    /// ([`Index::reset_pods`]).
    pub fn releases(&self) -> Vec<Release> {
        self.holdings().releases
    }

    /// The UID of a pod the index knows.
    pub fn pod_uid(&self, pod: &ObjectKey) -> Option<&str> {
        self.key_to_pod.get(pod).map(|facts| facts.uid.as_str())
    }

    /// The priority of a pod the index knows (`spec.priority`, 0 unset).
    pub fn pod_priority(&self, pod: &ObjectKey) -> Option<i32> {
        self.key_to_pod.get(pod).map(|facts| facts.priority)
    }

    /// Whether a pod still needs a node: known, not bound, not finished,
    /// not being deleted, no binding in flight.
    pub fn pod_unplaced(&self, pod: &ObjectKey) -> bool {
        self.key_to_pod.get(pod).is_some_and(PodFacts::unplaced)
            && !self.key_to_in_flight.contains_key(pod)
    }

    /// Pods of a GPUResource that still need a node, with their UIDs.
    pub fn unplaced_pods_of(&self, resource: &ObjectKey) -> Vec<(ObjectKey, String)> {
        self.key_to_pod
            .iter()
            .filter(|(key, pod)| {
                key.namespace == resource.namespace
                    && pod.resource.as_deref() == Some(resource.name.as_str())
                    && pod.unplaced()
                    && !self.key_to_in_flight.contains_key(key)
            })
            .map(|(key, pod)| (key.clone(), pod.uid.clone()))
            .collect()
    }

    /// Per GPUResource: pods holding GPUs of its shape and pods referencing
    /// it, for its status (`2/3`). Read once per round.
    pub fn pod_counts(&self) -> HashMap<ObjectKey, PodCounts> {
        self.pod_counts_in(&self.holdings())
    }

    pub(crate) fn pod_counts_in(
        &self,
        holdings: &holdings::Holdings,
    ) -> HashMap<ObjectKey, PodCounts> {
        // Bound pods' own holdings and references are kept (`tally`); the
        // other sources' holdings, a few, are counted here.
        let mut counts: crate::fast_map::FastMap<(&str, &str), PodCounts> =
            self.pod_tally.counts().collect();
        for holding in holdings.others() {
            let name = (holding.pod.namespace.as_str(), holding.resource_name);
            counts.entry(name).or_default().holding += 1;
        }
        counts
            .into_iter()
            .map(|((namespace, name), counts)| (ObjectKey::new(namespace, name), counts))
            .collect()
    }
}

/// What a round starts with, read from one view of the holdings.
#[derive(Debug)]
pub struct RoundStart {
    /// Ledger entries of earlier versions to remove.
    pub releases: Vec<Release>,
    /// Earlier versions' allocations to record on their bound pods.
    pub moves: Vec<PendingBinding>,
    /// Bindings to send (again).
    pub unfinished: Vec<PendingBinding>,
    /// Policies with pods waiting for them.
    pub policies: Vec<String>,
    /// Every GPUResource.
    pub resources: Vec<ResourceView>,
    /// PodGroups whose gang reservation is fully applied (or moot).
    pub reservations_done: Vec<ObjectKey>,
    /// Victims of nominations still to evict.
    pub evictions: Vec<Eviction>,
    /// Nominations that can no longer be carried out, and why.
    pub stale_nominations: Vec<(ObjectKey, String)>,
    /// Claims to make for pods' extended resources.
    pub extended_claims: Vec<crate::extended::ExtendedClaim>,
}

/// What a round reports, read from one view of the holdings.
#[derive(Debug)]
pub struct RoundReport {
    /// Every GPUResource.
    pub resources: Vec<ResourceView>,
    /// Per GPUResource, pods holding and asking.
    pub counts: HashMap<ObjectKey, PodCounts>,
    /// Problems users can fix.
    pub problems: Vec<Problem>,
    /// Pods holding unhealthy GPUs.
    pub unhealthy: Vec<UnhealthyHolding>,
    /// Per GPUResource, pods holding an earlier shape.
    pub outdated: BTreeMap<ObjectKey, OutdatedHoldings>,
    /// GPUs by node, model and state, for metrics.
    pub gpus: Vec<GpuState>,
    /// Every GPUTenant with what it holds and waits for.
    pub tenants: Vec<TenantView>,
}

impl Index {
    /// Everything a round starts with, from one reading of the holdings.
    pub fn round_start(&self) -> RoundStart {
        let holdings = self.holdings();
        RoundStart {
            moves: self.allocations_to_move_in(&holdings),
            unfinished: self.bindings_to_finish_in(&holdings),
            policies: self.policies_with_pending_in(&holdings),
            resources: self.resources(),
            releases: holdings.releases,
            reservations_done: self.reservations_to_clear(),
            evictions: self.evictions(),
            stale_nominations: self.stale_nominations(),
            extended_claims: self.extended_claims(),
        }
    }

    /// Everything a round reports, from one reading of the holdings, at
    /// `now_ms` (milliseconds since the Unix epoch: gang timeouts).
    pub fn round_report(&self, now_ms: u64) -> RoundReport {
        let holdings = self.holdings();
        // One survey for the tenants' views and the problems.
        let survey = self.survey(&holdings);
        let tenants = self.tenant_views_of(&holdings, survey.asks());
        RoundReport {
            resources: self.resources(),
            counts: self.pod_counts_in(&holdings),
            problems: self.problems_of(survey, &holdings, now_ms),
            unhealthy: self.unhealthy_holdings_in(&holdings),
            outdated: self.outdated_holdings_in(&holdings),
            gpus: self.gpu_states_in(&holdings),
            tenants,
        }
    }
}
