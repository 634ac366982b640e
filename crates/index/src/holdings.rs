//! Who holds which GPU.
//!
//! ```text
//!  bound pods, not finished, with wasmgpu.io/allocation ──┐
//!  bindings this controller sent, not echoed yet ─────────┼─▶ Holdings: GPU use,
//!  ledger entries of earlier versions (status.allocations)┘   the holders
//! ```
//!
//! A GPU is free only when no pod holds it: the pod is gone, finished, or
//! recreated under another UID. What the pod's GPUResource does (changed,
//! deleted) never frees a GPU.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::facts::binding::{InFlight, PendingBinding};
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct GpuUse<'a> {
    /// The pod holding the GPU exclusively.
    pub exclusive_owner: Option<Cow<'a, ObjectKey>>,
    /// Memory promised to shared holders, MiB.
    pub shared_mib: u64,
    /// Number of shared holders.
    pub shared_owners: u32,
}

/// One pod holding GPUs.
#[derive(Clone, Debug)]
pub(crate) struct Holding<'a> {
    pub pod: Cow<'a, ObjectKey>,
    pub uid: &'a str,
    /// The name of the GPUResource (in the pod's namespace) whose shape it
    /// holds.
    pub resource_name: &'a str,
    pub allocation: Cow<'a, PodAllocation>,
    pub source: Source,
}

/// A hash map with aHash's randomly seeded hasher: keys are names users
/// choose, and the holdings are read several times a round.
pub(crate) type FastMap<K, V> = HashMap<K, V, ahash::RandomState>;

/// Every holding, read together. Borrows from the index: reading the
/// holdings of a cluster with thousands of bound pods copies no names.
#[derive(Debug, Default)]
pub(crate) struct Holdings<'a> {
    /// `(node, GPU uuid)` → what holders keep on it.
    pub gpu_to_use: FastMap<(&'a str, &'a str), GpuUse<'a>>,
    /// Pods holding GPUs.
    pub holders: HashSet<Cow<'a, ObjectKey>, ahash::RandomState>,
    pub live: Vec<Holding<'a>>,
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
        let mut holdings = Holdings::default();
        for (key, pod) in &self.key_to_pod {
            if pod.terminal || pod.node_name.is_none() {
                continue;
            }
            if let Some(Ok(allocation)) = &pod.allocation {
                holdings.hold_allocation(
                    Cow::Borrowed(key),
                    &key.namespace,
                    &pod.uid,
                    allocation,
                    Source::Pod,
                );
            }
        }
        // Devices a ResourceClaim's allocation holds, whoever allocated
        // them: no one else takes them while the claim keeps them.
        for (claim, device) in self.dra.allocated() {
            if let Some((node, uuid)) = self.dra.locate(device) {
                holdings
                    .gpu_to_use
                    .entry((node, uuid))
                    .or_default()
                    .exclusive_owner
                    .get_or_insert(Cow::Borrowed(claim));
            }
        }
        for (key, pod) in &self.key_to_pod {
            if let Some(nomination) = pod.nomination()
                && !holdings.holders.contains(key)
            {
                holdings.hold_allocation(
                    Cow::Borrowed(key),
                    &key.namespace,
                    &pod.uid,
                    &nomination.allocation,
                    Source::Nomination,
                );
            }
        }
        for (key, in_flight) in &self.key_to_in_flight {
            let live = self
                .key_to_pod
                .get(key)
                .is_some_and(|pod| pod.uid == in_flight.uid && !pod.terminal);
            if live && !holdings.holders.contains(key) {
                holdings.hold_allocation(
                    Cow::Borrowed(key),
                    &key.namespace,
                    &in_flight.uid,
                    &in_flight.allocation,
                    Source::InFlight,
                );
            }
        }
        for (group, gang) in &self.key_to_gang {
            let Some(reservation) = &gang.reservation else {
                continue;
            };
            for (name, member) in &reservation.members {
                let pod = ObjectKey::new(&group.namespace, name);
                // Until the pods are listed, a reserved member counts as
                // waiting: its GPUs are never handed to anyone else.
                let waiting = match self.key_to_pod.get(&pod) {
                    Some(facts) => facts.uid == member.uid && facts.unplaced(),
                    None => !self.pods_listed,
                };
                if waiting && !holdings.holders.contains(&pod) {
                    holdings.hold_allocation(
                        Cow::Owned(pod),
                        &group.namespace,
                        &member.uid,
                        &member.allocation,
                        Source::Reservation,
                    );
                }
            }
        }
        for (resource, state) in &self.key_to_resource {
            for entry in &state.allocations {
                let pod = ObjectKey::new(&resource.namespace, &entry.pod);
                let reason = self.staleness(&pod, entry).or_else(|| {
                    self.key_to_pod
                        .get(&pod)
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
                    None if holdings.holders.contains(&pod) => {}
                    None => holdings.hold(
                        Cow::Owned(pod),
                        &resource.namespace,
                        &entry.pod_uid,
                        Held {
                            node: &entry.node,
                            devices: &entry.devices,
                            sharing: entry.sharing,
                            resource_name: &resource.name,
                        },
                        Cow::Owned(from_ledger(&resource.name, entry)),
                        Source::Ledger,
                    ),
                }
            }
        }
        holdings
    }

    /// Why a ledger entry is stale, or `None` while its pod still holds the
    /// GPUs.
    fn staleness(&self, pod: &ObjectKey, entry: &Allocation) -> Option<ReleaseReason> {
        if !self.pods_listed {
            return None;
        }
        match self.key_to_pod.get(pod) {
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
        bindings.extend(
            holdings
                .live
                .iter()
                .filter(|h| unplaced(&h.pod))
                .filter_map(|h| {
                    let claims = match h.source {
                        Source::Ledger | Source::Reservation => Vec::new(),
                        Source::Nomination => self.nomination_ready(&h.pod)?,
                        Source::Pod | Source::InFlight => return None,
                    };
                    Some(PendingBinding {
                        pod: h.pod.clone().into_owned(),
                        uid: h.uid.to_string(),
                        allocation: h.allocation.clone().into_owned(),
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
            .live
            .iter()
            .filter(|h| {
                h.source == Source::Ledger
                    && self
                        .key_to_pod
                        .get(&h.pod)
                        .is_some_and(|p| p.node_name.is_some())
            })
            .map(|h| PendingBinding {
                pod: h.pod.clone().into_owned(),
                uid: h.uid.to_string(),
                allocation: h.allocation.clone().into_owned(),
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
        namespace: &'a str,
        uid: &'a str,
        allocation: &'a PodAllocation,
        source: Source,
    ) {
        let held = Held::of(allocation);
        self.hold(pod, namespace, uid, held, Cow::Borrowed(allocation), source);
    }

    /// Holds `held` for `pod` (in `namespace`), as read from `allocation`.
    fn hold(
        &mut self,
        pod: Cow<'a, ObjectKey>,
        namespace: &'a str,
        uid: &'a str,
        held: Held<'a>,
        allocation: Cow<'a, PodAllocation>,
        source: Source,
    ) {
        let _ = namespace;
        for device in held.devices {
            let gpu = self
                .gpu_to_use
                .entry((held.node, device.uuid.as_str()))
                .or_default();
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
        self.live.push(Holding {
            pod,
            uid,
            resource_name: held.resource_name,
            allocation,
            source,
        });
    }
}

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
    /// Every inventory's GPUs counted by model and state, per node.
    pub fn gpu_states(&self) -> Vec<GpuState> {
        self.gpu_states_in(&self.holdings())
    }

    pub(super) fn gpu_states_in(&self, holdings: &Holdings) -> Vec<GpuState> {
        let mut states = Vec::with_capacity(self.node_to_inventory.len());
        for (node, inventory) in &self.node_to_inventory {
            let first = states.len();
            for gpu in &inventory.gpus {
                if inventory.unpublished.contains(&gpu.uuid) {
                    continue;
                }
                let held = |uuid: &str| holdings.gpu_to_use.contains_key(&(node.as_str(), uuid));
                // A GPU one of whose MIG instances is held cannot be given
                // whole: it is allocated, in part.
                let state = if !gpu.healthy {
                    "unhealthy"
                } else if held(&gpu.uuid) || gpu.mig_instances.iter().any(|m| held(&m.uuid)) {
                    "allocated"
                } else {
                    "free"
                };
                let counted = states[first..]
                    .iter_mut()
                    .find(|s: &&mut GpuState| s.state == state && s.model == gpu.model);
                match counted {
                    Some(counted) => counted.count += 1,
                    None => states.push(GpuState {
                        node: node.clone(),
                        model: gpu.model.clone(),
                        state,
                        count: 1,
                    }),
                }
            }
        }
        states
    }
}
