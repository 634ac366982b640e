//! Who holds which GPU.
//!
//! ```text
//!  bound pods, not finished, with wasmgpu.io/allocation ─▶ BoundUse (kept
//!                                                          between rounds)
//!  devices of allocated ResourceClaims ───────────────┐          │
//!  preemptors' nominations ───────────────────────────┤          ▼
//!  bindings this controller sent, not echoed yet ─────┼─▶ Holdings: GPU use,
//!  gang members reserved, not bound yet ──────────────┤   the holders
//!  ledger entries of earlier versions (status.allocations)┘
//! ```
//!
//! A GPU is free only when no pod holds it: the pod is gone, finished, or
//! recreated under another UID. What the pod's GPUResource does (changed,
//! deleted) never frees a GPU.
//!
//! What bound pods hold by their own allocation is kept in the index and
//! updated as the pod watch reports each pod ([`crate::bound`]); reading the
//! holdings lays the other sources, read afresh, over it. So a reading
//! costs what the claims, nominations, bindings in flight, reservations and
//! ledgers hold, not what the cluster's bound pods do.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::fmt;

use crate::bound::{BoundGpu, BoundUse, NodeBound, held_by_itself};
use crate::facts::binding::{InFlight, PendingBinding};
use crate::facts::pod::PodFacts;
use crate::fast_map::FastMap;
use crate::index::Index;
use crate::key::ObjectKey;
use wasmgpu_api::{Allocation, Device, PodAllocation, Sharing};

/// A ledger entry, written by an earlier version, that the controller
/// should remove from its GPUResource's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// The GPUResource whose `status.allocations` holds the entry.
    pub resource: ObjectKey,
    /// The entry's `pod` (a name in the GPUResource's namespace).
    pub pod: String,
    /// The entry's `podUID`.
    pub pod_uid: String,
    /// Why the entry goes.
    pub reason: ReleaseReason,
}

/// Why a ledger entry goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseReason {
    /// No pod of that name exists any more: its GPUs are free.
    PodDeleted,
    /// The pod finished (`Succeeded` or `Failed`): its GPUs are free.
    PodFinished,
    /// A pod of that name exists, but with another UID: it was recreated.
    PodReplaced,
    /// The pod carries the allocation itself now; it keeps its GPUs.
    Moved,
}

impl fmt::Display for ReleaseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::PodDeleted => "pod deleted",
            Self::PodFinished => "pod finished",
            Self::PodReplaced => "pod recreated with another UID",
            Self::Moved => "moved onto the pod",
        })
    }
}

/// Where a holding was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The pod's own annotation.
    Pod,
    /// A binding in flight.
    InFlight,
    /// A ledger entry of an earlier version.
    Ledger,
    /// A gang member reserved on its PodGroup, not bound yet.
    Reservation,
    /// A preemptor's nomination: its GPUs wait for it while its victims go.
    Nomination,
}

/// What holders keep on one GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct GpuUse {
    /// A pod (or a claim) holds the GPU exclusively.
    pub exclusive: bool,
    /// Memory promised to shared holders, MiB.
    pub shared_mib: u64,
    /// Number of shared holders.
    pub shared_owners: u32,
}

/// What the sources other than bound pods' own allocations keep on one
/// GPU.
#[derive(Clone, Debug, Default)]
struct OtherUse<'a> {
    exclusive_owner: Option<Cow<'a, ObjectKey>>,
    shared_mib: u64,
    shared_owners: u32,
}

/// One pod holding GPUs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Holding<'h> {
    pub pod: &'h ObjectKey,
    pub uid: &'h str,
    /// The name of the GPUResource (in the pod's namespace) whose shape it
    /// holds.
    pub resource_name: &'h str,
    pub allocation: &'h PodAllocation,
    pub source: Source,
    /// What the index knows of the pod; `None` when it does not know it.
    pub facts: Option<&'h PodFacts>,
}

/// A holding of a source other than a bound pod's own allocation, as
/// read: a reservation names its pod, and a ledger entry its allocation,
/// only as parts.
#[derive(Debug)]
struct Other<'a> {
    pod: Cow<'a, ObjectKey>,
    uid: &'a str,
    resource_name: &'a str,
    allocation: Cow<'a, PodAllocation>,
    source: Source,
    facts: Option<&'a PodFacts>,
}

impl Other<'_> {
    fn as_holding(&self) -> Holding<'_> {
        Holding {
            pod: &self.pod,
            uid: self.uid,
            resource_name: self.resource_name,
            allocation: &self.allocation,
            source: self.source,
            facts: self.facts,
        }
    }
}

/// Every holding, read together: what bound pods hold, kept by the index
/// ([`BoundUse`]), and over it what the other sources hold, read afresh.
/// Borrows from the index: reading the holdings copies no names.
#[derive(Debug)]
pub(crate) struct Holdings<'a> {
    pods: &'a BTreeMap<ObjectKey, PodFacts>,
    bound: &'a BoundUse,
    /// Node → GPU uuid → what the other sources keep on it.
    gpu_to_use: FastMap<&'a str, FastMap<&'a str, OtherUse<'a>>>,
    /// Pods holding GPUs through another source.
    holders: HashSet<Cow<'a, ObjectKey>, ahash::RandomState>,
    /// Their holdings, in the order read.
    others: Vec<Other<'a>>,
    /// Ledger entries of earlier versions to remove.
    pub releases: Vec<Release>,
}

impl Holding<'_> {
    /// The GPUResource whose shape it holds.
    pub fn resource(&self) -> ObjectKey {
        ObjectKey::new(&self.pod.namespace, self.resource_name)
    }
}

// === impl Index ===

impl Index {
    /// Reads every holding. Until the pods have been listed once
    /// (`reset_pods`) every ledger entry counts as live: GPUs are never
    /// handed out twice because the index had not seen a pod yet.
    pub(crate) fn holdings(&self) -> Holdings<'_> {
        let mut holdings = Holdings {
            pods: &self.key_to_pod,
            bound: &self.bound_use,
            gpu_to_use: FastMap::default(),
            holders: HashSet::default(),
            others: Vec::new(),
            releases: Vec::new(),
        };
        // Bound pods' own allocations are in `bound_use` already.
        // Devices a ResourceClaim's allocation holds, whoever allocated
        // them: no one else takes them while the claim keeps them.
        for (claim, device) in self.dra.allocated() {
            if let Some((node, uuid)) = self.dra.locate(device) {
                holdings
                    .gpu_to_use
                    .entry(node)
                    .or_default()
                    .entry(uuid)
                    .or_default()
                    .exclusive_owner
                    .get_or_insert(Cow::Borrowed(claim));
            }
        }
        for key in self.bound_use.nominated() {
            if let Some(pod) = self.key_to_pod.get(key)
                && let Some(nomination) = pod.nomination()
                && !holdings.holds(key, pod)
            {
                holdings.hold_allocation(
                    Cow::Borrowed(key),
                    &pod.uid,
                    &nomination.allocation,
                    Source::Nomination,
                    Some(pod),
                );
            }
        }
        for (key, in_flight) in &self.key_to_in_flight {
            let facts = self
                .key_to_pod
                .get(key)
                .filter(|pod| pod.uid == in_flight.uid && !pod.terminal);
            if let Some(pod) = facts
                && !holdings.holds(key, pod)
            {
                holdings.hold_allocation(
                    Cow::Borrowed(key),
                    &in_flight.uid,
                    &in_flight.allocation,
                    Source::InFlight,
                    Some(pod),
                );
            }
        }
        for (group, gang) in &self.key_to_gang {
            let Some(reservation) = &gang.reservation else {
                continue;
            };
            for (name, member) in &reservation.members {
                let pod = ObjectKey::new(&group.namespace, name);
                let facts = self.key_to_pod.get(&pod);
                // Until the pods are listed, a reserved member counts as
                // waiting: its GPUs are never handed to anyone else.
                let waiting = match facts {
                    Some(facts) => facts.uid == member.uid && facts.unplaced(),
                    None => !self.pods_listed,
                };
                if waiting && !holdings.is_holder(&pod) {
                    holdings.hold_allocation(
                        Cow::Owned(pod),
                        &member.uid,
                        &member.allocation,
                        Source::Reservation,
                        facts,
                    );
                }
            }
        }
        for (resource, state) in &self.key_to_resource {
            for entry in &state.allocations {
                let pod = ObjectKey::new(&resource.namespace, &entry.pod);
                let facts = self.key_to_pod.get(&pod);
                let reason = self.staleness(facts, entry).or_else(|| {
                    facts
                        .filter(|facts| facts.node_name.is_some())
                        .and_then(|facts| facts.allocation.as_ref())
                        .is_some_and(|allocation| allocation.is_ok())
                        .then_some(ReleaseReason::Moved)
                });
                match reason {
                    Some(reason) => holdings.releases.push(Release {
                        resource: resource.clone(),
                        pod: entry.pod.clone(),
                        pod_uid: entry.pod_uid.clone(),
                        reason,
                    }),
                    None if holdings.is_holder(&pod) => {}
                    None => holdings.hold(
                        Cow::Owned(pod),
                        &entry.pod_uid,
                        Held {
                            node: &entry.node,
                            devices: &entry.devices,
                            sharing: entry.sharing,
                            resource_name: &resource.name,
                        },
                        Cow::Owned(from_ledger(&resource.name, entry)),
                        Source::Ledger,
                        facts,
                    ),
                }
            }
        }
        holdings
    }

    /// Why a ledger entry is stale, or `None` while its pod (`facts`, when
    /// the index knows it) still holds the GPUs.
    fn staleness(&self, facts: Option<&PodFacts>, entry: &Allocation) -> Option<ReleaseReason> {
        if !self.pods_listed {
            return None;
        }
        match facts {
            None => Some(ReleaseReason::PodDeleted),
            Some(facts) if facts.uid != entry.pod_uid => Some(ReleaseReason::PodReplaced),
            Some(facts) if facts.terminal => Some(ReleaseReason::PodFinished),
            Some(_) => None,
        }
    }

    /// Records a binding about to be sent: its GPUs are held from now on,
    /// until the pod watch shows the pod bound (it then holds them itself),
    /// gone, or finished, or [`Index::end_binding`].
    pub fn begin_binding(&mut self, binding: &PendingBinding) {
        self.key_to_in_flight.insert(
            binding.pod.clone(),
            InFlight {
                uid: binding.uid.clone(),
                allocation: binding.allocation.clone(),
                claims: binding.claims.clone(),
                retry: false,
            },
        );
    }

    /// The binding for `pod` certainly did not happen (the pod is gone, or
    /// read back unbound): its GPUs are free again.
    pub fn end_binding(&mut self, pod: &ObjectKey, uid: &str) {
        if self
            .key_to_in_flight
            .get(pod)
            .is_some_and(|in_flight| in_flight.uid == uid)
        {
            self.key_to_in_flight.remove(pod);
        }
    }

    /// The binding for `pod` may or may not have happened: its GPUs stay
    /// held and the binding is sent again (see [`Index::bindings_to_finish`]).
    pub fn retry_binding(&mut self, pod: &ObjectKey, uid: &str) {
        if let Some(in_flight) = self.key_to_in_flight.get_mut(pod)
            && in_flight.uid == uid
        {
            in_flight.retry = true;
        }
    }

    /// Every binding in flight has an unknown outcome now (its task was
    /// stopped): each is sent again when this replica leads next, unless
    /// the pod watch tells first.
    pub fn retry_all_bindings(&mut self) {
        for in_flight in self.key_to_in_flight.values_mut() {
            in_flight.retry = true;
        }
    }

    /// Bindings to send again: those whose outcome is unknown, and pods an
    /// earlier version recorded in a ledger but did not bind.
    pub fn bindings_to_finish(&self) -> Vec<PendingBinding> {
        self.bindings_to_finish_in(&self.holdings())
    }

    pub(super) fn bindings_to_finish_in(&self, holdings: &Holdings) -> Vec<PendingBinding> {
        let unplaced = |pod: &ObjectKey| self.key_to_pod.get(pod).is_some_and(|p| p.unplaced());
        let mut bindings: Vec<PendingBinding> = self
            .key_to_in_flight
            .iter()
            .filter(|(pod, in_flight)| in_flight.retry && unplaced(pod))
            .map(|(pod, in_flight)| PendingBinding {
                pod: pod.clone(),
                uid: in_flight.uid.clone(),
                allocation: in_flight.allocation.clone(),
                claims: in_flight.claims.clone(),
            })
            .collect();
        // A bound pod's own allocation needs no binding: only the other
        // sources are read.
        bindings.extend(
            holdings
                .others()
                .filter(|h| h.facts.is_some_and(PodFacts::unplaced))
                .filter_map(|h| {
                    let claims = match h.source {
                        Source::Ledger | Source::Reservation => Vec::new(),
                        Source::Nomination => self.nomination_ready(h.pod)?,
                        Source::Pod | Source::InFlight => return None,
                    };
                    Some(PendingBinding {
                        pod: h.pod.clone(),
                        uid: h.uid.to_string(),
                        allocation: h.allocation.clone(),
                        claims,
                    })
                }),
        );
        bindings
    }

    /// Bound pods that hold GPUs through a ledger entry of an earlier
    /// version only: the controller records the allocation on each pod
    /// (the pod stays where it is), then removes the entry.
    pub fn allocations_to_move(&self) -> Vec<PendingBinding> {
        self.allocations_to_move_in(&self.holdings())
    }

    pub(super) fn allocations_to_move_in(&self, holdings: &Holdings) -> Vec<PendingBinding> {
        holdings
            .others()
            .filter(|h| {
                h.source == Source::Ledger && h.facts.is_some_and(|p| p.node_name.is_some())
            })
            .map(|h| PendingBinding {
                pod: h.pod.clone(),
                uid: h.uid.to_string(),
                allocation: h.allocation.clone(),
                claims: Vec::new(),
            })
            .collect()
    }

    /// Forgets in-flight bindings the pod watch has resolved.
    pub(super) fn resolve_in_flight(&mut self, pod: &ObjectKey) {
        let resolved = match (self.key_to_in_flight.get(pod), self.key_to_pod.get(pod)) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(in_flight), Some(facts)) => {
                facts.uid != in_flight.uid || facts.terminal || facts.node_name.is_some()
            }
        };
        if resolved {
            self.key_to_in_flight.remove(pod);
        }
    }
}

/// A ledger entry of an earlier version as the pod's allocation.
fn from_ledger(resource: &str, entry: &Allocation) -> PodAllocation {
    PodAllocation {
        resource: resource.to_string(),
        node: entry.node.clone(),
        sharing: entry.sharing,
        devices: entry.devices.clone(),
        policy: entry.policy.clone(),
    }
}

/// What a holding keeps, borrowed from where it was read.
struct Held<'a> {
    node: &'a str,
    devices: &'a [Device],
    sharing: Sharing,
    resource_name: &'a str,
}

impl<'a> Held<'a> {
    fn of(allocation: &'a PodAllocation) -> Self {
        Self {
            node: &allocation.node,
            devices: &allocation.devices,
            sharing: allocation.sharing,
            resource_name: &allocation.resource,
        }
    }
}

// === impl Holdings ===

impl<'a> Holdings<'a> {
    /// Holds what `allocation`, kept by the index, gives `pod`.
    fn hold_allocation(
        &mut self,
        pod: Cow<'a, ObjectKey>,
        uid: &'a str,
        allocation: &'a PodAllocation,
        source: Source,
        facts: Option<&'a PodFacts>,
    ) {
        let held = Held::of(allocation);
        self.hold(pod, uid, held, Cow::Borrowed(allocation), source, facts);
    }

    /// Holds `held` for `pod`, as read from `allocation`.
    fn hold(
        &mut self,
        pod: Cow<'a, ObjectKey>,
        uid: &'a str,
        held: Held<'a>,
        allocation: Cow<'a, PodAllocation>,
        source: Source,
        facts: Option<&'a PodFacts>,
    ) {
        let gpus = self.gpu_to_use.entry(held.node).or_default();
        for device in held.devices {
            let gpu = gpus.entry(device.uuid.as_str()).or_default();
            match held.sharing {
                Sharing::Exclusive => {
                    gpu.exclusive_owner.get_or_insert_with(|| pod.clone());
                }
                Sharing::Shared => {
                    gpu.shared_mib = gpu.shared_mib.saturating_add(device.memory_mib);
                    gpu.shared_owners += 1;
                }
            }
        }
        self.holders.insert(pod.clone());
        self.others.push(Other {
            pod,
            uid,
            resource_name: held.resource_name,
            allocation,
            source,
            facts,
        });
    }
}

impl Holdings<'_> {
    /// What holders keep on GPU `uuid` of `node`; `None` when nothing holds
    /// it.
    #[cfg(test)]
    pub fn gpu(&self, node: &str, uuid: &str) -> Option<GpuUse> {
        self.on_node(node).gpu(uuid)
    }

    /// What holders keep on the GPUs of `node`, to look up GPU by GPU.
    pub fn on_node(&self, node: &str) -> NodeHoldings<'_> {
        NodeHoldings {
            bound: self.bound.on_node(node),
            others: self.gpu_to_use.get(node),
        }
    }

    /// Whether `pod` holds GPUs, through any source.
    pub fn is_holder(&self, pod: &ObjectKey) -> bool {
        self.pods.get(pod).and_then(held_by_itself).is_some() || self.holders.contains(pod)
    }

    /// Whether `pod`, whose facts are `facts`, holds GPUs.
    pub fn holds(&self, pod: &ObjectKey, facts: &PodFacts) -> bool {
        held_by_itself(facts).is_some() || self.holders.contains(pod)
    }

    /// Every holding: bound pods' own allocations by pod, then the other
    /// sources in the order they were read (claims hold devices, not pods:
    /// they are not holdings). A pod holds through one source at most.
    pub fn live(&self) -> impl Iterator<Item = Holding<'_>> {
        let bound = self.pods.iter().filter_map(|(key, pod)| {
            held_by_itself(pod).map(|allocation| Holding {
                pod: key,
                uid: &pod.uid,
                resource_name: &allocation.resource,
                allocation,
                source: Source::Pod,
                facts: Some(pod),
            })
        });
        bound.chain(self.others())
    }

    /// The holdings of every source but bound pods' own allocations.
    pub fn others(&self) -> impl Iterator<Item = Holding<'_>> {
        self.others.iter().map(Other::as_holding)
    }

    /// What holders keep on every GPU something holds, by `(node, uuid)`.
    #[cfg(test)]
    pub fn gpus(&self) -> BTreeMap<(&str, &str), GpuUse> {
        let bound = self.bound.gpus().map(|(gpu, _)| gpu);
        let others = self
            .gpu_to_use
            .iter()
            .flat_map(|(node, gpus)| gpus.keys().map(|uuid| (*node, *uuid)));
        bound
            .chain(others)
            .filter_map(|(node, uuid)| Some(((node, uuid), self.gpu(node, uuid)?)))
            .collect()
    }

    /// Who holds GPU `uuid` of `node` exclusively: the first bound pod by
    /// key whose own allocation names it, else the first other holder as
    /// they were read (a claim, then a nomination, a binding in flight, a
    /// reservation, a ledger entry).
    #[cfg(test)]
    pub fn exclusive_owner(&self, node: &str, uuid: &str) -> Option<&ObjectKey> {
        let bound = self.pods.iter().find(|(_, pod)| {
            held_by_itself(pod).is_some_and(|a| {
                a.node == node
                    && a.sharing == Sharing::Exclusive
                    && a.devices.iter().any(|d| d.uuid == uuid)
            })
        });
        bound.map(|(key, _)| key).or_else(|| {
            let other = self.gpu_to_use.get(node)?.get(uuid)?;
            other.exclusive_owner.as_deref()
        })
    }

    /// The pods holding GPUs.
    #[cfg(test)]
    pub fn holders(&self) -> impl Iterator<Item = &ObjectKey> {
        self.live().map(|h| h.pod)
    }
}

/// What holders keep on one node's GPUs: bound pods' use of the node found
/// once, the other sources' looked up by GPU.
pub(crate) struct NodeHoldings<'n> {
    bound: Option<NodeBound<'n>>,
    others: Option<&'n FastMap<&'n str, OtherUse<'n>>>,
}

impl<'n> NodeHoldings<'n> {
    /// What holders keep on GPU `uuid`; `None` when nothing holds it.
    pub fn gpu(&self, uuid: &str) -> Option<GpuUse> {
        let bound = self.bound.and_then(|gpus| gpus.gpu(uuid));
        let other = self.others.and_then(|gpus| gpus.get(uuid));
        if bound.is_none() && other.is_none() {
            return None;
        }
        let (bound_mib, bound_owners) =
            bound.map_or((0, 0), |b| (b.shared_mib(), b.shared_owners()));
        let (other_mib, other_owners) = other.map_or((0, 0), |o| (o.shared_mib, o.shared_owners));
        Some(GpuUse {
            exclusive: bound.is_some_and(BoundGpu::held_exclusively)
                || other.is_some_and(|o| o.exclusive_owner.is_some()),
            shared_mib: bound_mib.saturating_add(other_mib),
            shared_owners: bound_owners + other_owners,
        })
    }

    /// Whether anything holds GPU `uuid`.
    pub fn holds(&self, uuid: &str) -> bool {
        self.bound.is_some_and(|gpus| gpus.gpu(uuid).is_some())
            || self.others.is_some_and(|gpus| gpus.contains_key(uuid))
    }
}

/// The states a GPU is counted in, by position in a node's counts.
const STATES: [&str; 3] = ["free", "allocated", "unhealthy"];
const FREE: usize = 0;
const ALLOCATED: usize = 1;
const UNHEALTHY: usize = 2;

/// How many GPUs of one model on one node are in one state, for metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuState {
    /// The node.
    pub node: String,
    /// The GPUs' model.
    pub model: String,
    /// `allocated` (a pod holds it, exclusively, a share, or one of its MIG
    /// instances), `free`, or `unhealthy`.
    pub state: &'static str,
    /// How many.
    pub count: u32,
}

impl Index {
    /// Every inventory's GPUs counted by model and state, per node (by
    /// node name, then model as the node lists them, then free, allocated,
    /// unhealthy), read from the nodes' layouts.
    pub fn gpu_states(&self) -> Vec<GpuState> {
        self.gpu_states_in(&self.holdings())
    }

    pub(super) fn gpu_states_in(&self, holdings: &Holdings) -> Vec<GpuState> {
        let mut states = Vec::with_capacity(self.node_to_inventory.len());
        for (node, inventory) in &self.node_to_inventory {
            let layout = &inventory.layout;
            let on_node = holdings.on_node(node);
            // By the layout's model, then state: free, allocated, unhealthy.
            let mut counts = vec![[0u32; 3]; layout.models.len()];
            let mut whole: Option<(usize, usize)> = None;
            let mut settle = |whole: Option<(usize, usize)>| {
                if let Some((model, state)) = whole {
                    counts[model][state] += 1;
                }
            };
            for ((gpu, uuid), &unpublished) in layout
                .gpus
                .iter()
                .zip(layout.uuids.iter())
                .zip(&layout.unpublished)
            {
                match gpu.mig {
                    // A GPU one of whose MIG instances is held cannot be
                    // given whole: it is allocated, in part.
                    Some(_) => {
                        if let Some((_, state)) = &mut whole
                            && *state == FREE
                            && on_node.holds(uuid)
                        {
                            *state = ALLOCATED;
                        }
                    }
                    None => {
                        settle(whole.take());
                        let state = if !gpu.healthy {
                            UNHEALTHY
                        } else if on_node.holds(uuid) {
                            ALLOCATED
                        } else {
                            FREE
                        };
                        whole = (!unpublished).then_some((gpu.model as usize, state));
                    }
                }
            }
            settle(whole);
            for (model, counts) in counts.iter().enumerate() {
                for (state, &count) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
                    states.push(GpuState {
                        node: node.clone(),
                        model: layout.models[model].clone(),
                        state: STATES[state],
                        count,
                    });
                }
            }
        }
        states
    }
}
