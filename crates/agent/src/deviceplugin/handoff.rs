//! Which pod the kubelet is starting, and which devices it gets (pure).
//!
//! `GetPreferredAllocation` and `Allocate` do not name the pod. The kubelet
//! admits one pod at a time, in the order it receives them (as they are
//! bound; those received together oldest first), and asks for each of its
//! containers in turn: preferred allocation, then allocation. So the plugin
//! keeps one **claim** per node (this struct lives in the node's only
//! plugin):
//!
//! ```text
//!  GetPreferredAllocation(size, available)
//!     no claim ─▶ first waiting pod on this node whose first container asks
//!                 for `size` and whose GPUs are all available ─▶ claim it:
//!                 pod + UID, its device IDs, expires after the TTL
//!     claim    ─▶ its next container's IDs
//!  Allocate(offered)
//!     offered == the IDs just preferred ─▶ grant; the last container
//!                                          releases the claim, the pod is
//!                                          handed over (never chosen again)
//!     otherwise ─▶ refuse, naming pod, expected and offered devices
//! ```
//!
//! A waiting pod is bound to this node, carries its allocation
//! (`wasmgpu.io/allocation`, written with the binding), has not started and
//! has not been handed over. A claim the kubelet abandons (it admits another
//! pod, or the TTL passes) is dropped.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use super::devices::{exclusive_id, parse_id, replica_id};
use wasmgpu_api::{self as api, ContainerGpus, PodAllocation, Sharing};

/// A pod as the hand-off sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct WaitingPod {
    /// Namespace, name and UID.
    pub pod: PodRef,
    /// When it was bound (its `PodScheduled` condition, which the binding
    /// sets; whole seconds), milliseconds since the epoch: the kubelet
    /// receives pods in this order.
    pub bound_ms: i64,
    /// `metadata.creationTimestamp`, milliseconds since the epoch: the
    /// kubelet admits pods it receives together oldest first.
    pub created_ms: i64,
    /// What the controller gave it.
    pub allocation: PodAllocation,
    /// The `wasmgpu.io/gpu` limit of each container that asks for GPUs, in
    /// the kubelet's order (init containers first); a pod without limits
    /// asks for all its GPUs in one container.
    pub requests: Vec<ContainerGpus>,
}

/// A pod, by namespace, name and UID.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} (uid {})", self.namespace, self.name, self.uid)
    }
}

/// One container's part of `GetPreferredAllocation`.
#[derive(Clone, Debug, Default)]
pub struct PreferenceRequest {
    /// The devices the kubelet may still give.
    pub available: Vec<String>,
    /// The devices it must give (reused from an init container).
    pub must_include: Vec<String>,
    /// How many.
    pub size: usize,
}

/// Devices granted to one container of a pod.
#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    /// The pod.
    pub pod: PodRef,
    /// The device IDs the kubelet gives, as offered.
    pub ids: Vec<String>,
    /// The GPUs behind them, in the allocation's order, with the memory the
    /// pod was given on each (MiB).
    pub gpus: Vec<(String, u64)>,
    /// How the GPUs are held.
    pub sharing: Sharing,
}

/// Why the plugin cannot hand devices over.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandoffError {
    /// No pod on this node waits for devices of this size.
    #[error(
        "no pod bound to node {node} waits for {size} wasmgpu.io/gpu device(s){}: the pod \
         being started was not bound by the wasmgpu controller, or its allocation \
         (annotation wasmgpu.io/allocation) is missing",
        waiting_note(.waiting)
    )]
    NoPodWaiting {
        /// The node.
        node: String,
        /// Devices asked for.
        size: usize,
        /// The pods that wait, each with why it does not fit.
        waiting: Vec<String>,
    },
    /// The kubelet offered other devices than the pod was given.
    #[error(
        "pod {pod} was given {expected} by the wasmgpu controller (annotation \
         wasmgpu.io/allocation), but the kubelet offered {offered}: refusing to hand over \
         devices the pod was not given"
    )]
    Mismatch {
        /// The pod being started.
        pod: PodRef,
        /// The device IDs it was given.
        expected: String,
        /// The device IDs the kubelet offered.
        offered: String,
    },
}

impl HandoffError {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            HandoffError::NoPodWaiting { .. } => "no-pod-waiting",
            HandoffError::Mismatch { .. } => "mismatch",
        }
    }
}

fn waiting_note(waiting: &[String]) -> String {
    if waiting.is_empty() {
        String::new()
    } else {
        format!(" (waiting: {})", waiting.join("; "))
    }
}

/// The hand-off state of one node: the claim, and the pods handed over.
#[derive(Debug)]
pub struct Handoff {
    node: String,
    ttl: Duration,
    claim: Option<Claim>,
    handed_over: HashSet<String>,
}

/// The pod being started: who, which device IDs, how far.
///
/// The kubelet asks for each container in turn and reuses what a regular
/// init container had for the containers after it (its device manager's
/// `devicesToReuse`): it takes those first, and asks for the rest among the
/// devices nobody holds. The claim follows the same bookkeeping, so every
/// container is given only GPUs of its pod.
#[derive(Clone, Debug)]
struct Claim {
    pod: PodRef,
    allocation: PodAllocation,
    /// The device IDs of all the pod's GPUs, in the allocation's order.
    ids: Vec<String>,
    requests: Vec<ContainerGpus>,
    /// Containers granted so far.
    container: usize,
    /// IDs given to the containers granted so far.
    given: BTreeSet<String>,
    /// IDs of regular init containers not taken over by a later sidecar or
    /// app container: the kubelet gives these first.
    reusable: BTreeSet<String>,
    expires: Instant,
}

impl Claim {
    fn next_size(&self) -> Option<usize> {
        self.requests.get(self.container).map(|r| r.count as usize)
    }

    /// The IDs for the next container: those the kubelet must include, the
    /// reusable ones, then IDs of the pod no container was given yet.
    fn next_ids(&self, must_include: &[String]) -> Vec<String> {
        let size = self.next_size().unwrap_or(0);
        let fresh = self.ids.iter().filter(|id| !self.given.contains(*id));
        let mut ids: Vec<String> = Vec::with_capacity(size);
        for id in must_include
            .iter()
            .filter(|id| self.ids.contains(id))
            .chain(&self.reusable)
            .chain(fresh)
        {
            if ids.len() == size {
                break;
            }
            if !ids.contains(id) {
                ids.push(id.clone());
            }
        }
        ids
    }

    /// Whether the kubelet may give `offered` to the next container: as
    /// many IDs as it asks for, all of this pod, the reusable ones first,
    /// none given to another container of the pod and still held.
    fn may_give(&self, offered: &[String]) -> bool {
        let Some(size) = self.next_size() else {
            return false;
        };
        let distinct: BTreeSet<&String> = offered.iter().collect();
        let reused = offered
            .iter()
            .filter(|id| self.reusable.contains(*id))
            .count();
        distinct.len() == size
            && offered.len() == size
            && offered.iter().all(|id| self.ids.contains(id))
            && reused == size.min(self.reusable.len())
            && offered
                .iter()
                .all(|id| self.reusable.contains(id) || !self.given.contains(id))
    }

    /// Records that the next container was given `offered`.
    fn give(&mut self, offered: &[String]) {
        let gives_back = self.requests[self.container].gives_back;
        for id in offered {
            self.given.insert(id.clone());
            if gives_back {
                self.reusable.insert(id.clone());
            } else {
                self.reusable.remove(id);
            }
        }
        self.container += 1;
    }
}

// === impl Handoff ===

impl Handoff {
    /// The hand-off of `node`; a claim not completed within `ttl` lapses.
    pub fn new(node: &str, ttl: Duration) -> Self {
        Self {
            node: node.to_owned(),
            ttl,
            claim: None,
            handed_over: HashSet::new(),
        }
    }

    /// The pod claimed now, if any.
    pub fn claimed(&self) -> Option<&PodRef> {
        self.claim.as_ref().map(|c| &c.pod)
    }

    /// Forgets handed-over pods that no longer wait (their hand-over is on
    /// the pod, or they are gone).
    pub fn retain_handed_over(&mut self, present: impl Fn(&str) -> bool) {
        self.handed_over.retain(|uid| present(uid));
    }

    /// Whether the pod with `uid` was handed over by this process.
    pub fn is_handed_over(&self, uid: &str) -> bool {
        self.handed_over.contains(uid)
    }

    /// `GetPreferredAllocation` for one container: the device IDs of the
    /// pod being started.
    pub fn prefer(
        &mut self,
        now: Instant,
        waiting: &[WaitingPod],
        request: &PreferenceRequest,
    ) -> Result<Vec<String>, HandoffError> {
        self.lapse(now, waiting);
        if let Some(claim) = &mut self.claim {
            if claim.next_size() == Some(request.size) {
                claim.expires = now + self.ttl;
                return Ok(claim.next_ids(&request.must_include));
            }
            tracing::info!(pod = %claim.pod, "Kubelet moved on; dropping the claim");
            self.claim = None;
        }
        let available: BTreeSet<&str> = request
            .available
            .iter()
            .chain(&request.must_include)
            .map(String::as_str)
            .collect();
        let mut reasons = Vec::new();
        for pod in self.in_order(waiting) {
            match self.fits(pod, request.size, &available) {
                Ok(ids) => {
                    let claim = Claim {
                        pod: pod.pod.clone(),
                        allocation: pod.allocation.clone(),
                        ids,
                        requests: pod.requests.clone(),
                        container: 0,
                        given: BTreeSet::new(),
                        reusable: BTreeSet::new(),
                        expires: now + self.ttl,
                    };
                    let next = claim.next_ids(&[]);
                    tracing::info!(pod = %claim.pod, ids = ?claim.ids, "Claimed");
                    self.claim = Some(claim);
                    return Ok(next);
                }
                Err(reason) => {
                    reasons.push(format!("{}/{}: {reason}", pod.pod.namespace, pod.pod.name))
                }
            }
        }
        Err(HandoffError::NoPodWaiting {
            node: self.node.clone(),
            size: request.size,
            waiting: reasons,
        })
    }

    /// `Allocate` for one container: grants `offered` when they are the
    /// devices of the pod being started, and refuses otherwise.
    pub fn allocate(
        &mut self,
        now: Instant,
        waiting: &[WaitingPod],
        offered: &[String],
    ) -> Result<Grant, HandoffError> {
        self.lapse(now, waiting);
        if let Some(claim) = &self.claim
            && claim.next_size() != Some(offered.len())
        {
            tracing::info!(pod = %claim.pod, "Kubelet moved on; dropping the claim");
            self.claim = None;
        }
        if self.claim.is_none() {
            // No preference asked (or it lapsed): claim the oldest pod the
            // offer can be for, as `prefer` would have.
            let request = PreferenceRequest {
                available: offered.to_vec(),
                must_include: Vec::new(),
                size: offered.len(),
            };
            if let Err(error) = self.prefer(now, waiting, &request) {
                // Name the pod the kubelet is most likely starting.
                let size = offered.len();
                let oldest = self
                    .in_order(waiting)
                    .find(|p| p.requests.first().map(|r| r.count as usize) == Some(size));
                return Err(match oldest {
                    Some(pod) => HandoffError::Mismatch {
                        pod: pod.pod.clone(),
                        expected: pod
                            .allocation
                            .devices
                            .iter()
                            .map(|d| d.uuid.as_str())
                            .collect::<Vec<_>>()
                            .join(","),
                        offered: offered.join(","),
                    },
                    None => error,
                });
            }
        }
        let claim = self.claim.as_mut().expect("claimed above");
        if !claim.may_give(offered) {
            let error = HandoffError::Mismatch {
                pod: claim.pod.clone(),
                expected: claim.next_ids(&[]).join(","),
                offered: offered.join(","),
            };
            self.claim = None;
            return Err(error);
        }
        let gpus = offered
            .iter()
            .filter_map(|id| claim.ids.iter().position(|i| i == id))
            .map(|at| {
                let device = &claim.allocation.devices[at];
                (device.uuid.clone(), device.memory_mib)
            })
            .collect();
        claim.give(offered);
        let grant = Grant {
            pod: claim.pod.clone(),
            ids: offered.to_vec(),
            gpus,
            sharing: claim.allocation.sharing,
        };
        claim.expires = now + self.ttl;
        if claim.next_size().is_none() {
            tracing::info!(pod = %claim.pod, "Handed over; releasing the claim");
            self.handed_over.insert(claim.pod.uid.clone());
            self.claim = None;
        }
        Ok(grant)
    }

    /// Drops a claim that expired or whose pod no longer waits.
    fn lapse(&mut self, now: Instant, waiting: &[WaitingPod]) {
        let Some(claim) = &self.claim else { return };
        if now >= claim.expires {
            tracing::warn!(pod = %claim.pod, "Claim expired");
            self.claim = None;
        } else if !waiting.iter().any(|p| p.pod.uid == claim.pod.uid) {
            tracing::info!(pod = %claim.pod, "Claimed pod no longer waits");
            self.claim = None;
        }
    }

    /// Waiting pods not handed over, in the kubelet's order: as bound, and
    /// oldest first among those bound in the same second.
    fn in_order<'a>(
        &self,
        waiting: &'a [WaitingPod],
    ) -> impl Iterator<Item = &'a WaitingPod> + use<'a> {
        let mut pods: Vec<&WaitingPod> = waiting
            .iter()
            .filter(|p| !self.handed_over.contains(&p.pod.uid))
            .collect();
        pods.sort_by(|a, b| {
            (a.bound_ms, a.created_ms, &a.pod.namespace, &a.pod.name).cmp(&(
                b.bound_ms,
                b.created_ms,
                &b.pod.namespace,
                &b.pod.name,
            ))
        });
        pods.into_iter()
    }

    /// The device IDs of all of `pod`'s GPUs, when its first container asks
    /// for `size` and they are all available; else why not.
    fn fits(
        &self,
        pod: &WaitingPod,
        size: usize,
        available: &BTreeSet<&str>,
    ) -> Result<Vec<String>, String> {
        let count = pod.allocation.devices.len();
        let asked = api::pod_gpus(&pod.requests).unwrap_or(0);
        if asked != count as u64 {
            return Err(format!(
                "its containers ask for {asked} wasmgpu.io/gpu but it was given {count} GPU(s)"
            ));
        }
        if pod.requests.first().map(|r| r.count as usize) != Some(size) {
            return Err(format!(
                "its first container asks for {}",
                pod.requests.first().map_or(0, |r| r.count)
            ));
        }
        let mut ids = Vec::with_capacity(count);
        for device in &pod.allocation.devices {
            let id = match pod.allocation.sharing {
                Sharing::Exclusive => {
                    let id = exclusive_id(&device.uuid);
                    available.contains(id.as_str()).then_some(id)
                }
                Sharing::Shared => available
                    .iter()
                    .filter(|a| !ids.iter().any(|i: &String| i == *a))
                    .filter(|a| parse_id(a) == (device.uuid.as_str(), Sharing::Shared))
                    .min_by_key(|a| replica_number(a))
                    .map(|a| a.to_string()),
            };
            match id {
                Some(id) => ids.push(id),
                None => return Err(format!("{} is not available", device.uuid)),
            }
        }
        Ok(ids)
    }
}

fn replica_number(id: &str) -> u64 {
    id.rsplit_once("::")
        .and_then(|(_, k)| k.parse().ok())
        .unwrap_or(u64::MAX)
}

/// The replica IDs a shared GPU would be offered as (for tests and docs).
pub fn replica_ids(uuid: &str, replicas: u64) -> Vec<String> {
    (0..replicas).map(|k| replica_id(uuid, k)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgpu_api::{Device, PolicyRef};

    fn waiting(name: &str, created_ms: i64, sharing: Sharing, gpus: &[&str]) -> WaitingPod {
        WaitingPod {
            pod: PodRef {
                namespace: "ml".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            bound_ms: 0,
            created_ms,
            allocation: PodAllocation {
                resource: "r".into(),
                node: "n1".into(),
                sharing,
                devices: gpus
                    .iter()
                    .enumerate()
                    .map(|(i, uuid)| Device {
                        uuid: uuid.to_string(),
                        index: i as u32,
                        memory_mib: 1000,
                    })
                    .collect(),
                policy: PolicyRef {
                    name: "binpack".into(),
                    digest: "sha256:0".into(),
                },
            },
            requests: vec![ContainerGpus {
                count: gpus.len() as u32,
                gives_back: false,
            }],
        }
    }

    fn app(count: u32) -> ContainerGpus {
        ContainerGpus {
            count,
            gives_back: false,
        }
    }

    fn init(count: u32) -> ContainerGpus {
        ContainerGpus {
            count,
            gives_back: true,
        }
    }

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| id.to_string()).collect()
    }

    fn all_devices() -> Vec<String> {
        let mut ids = Vec::new();
        for uuid in ["GPU-0", "GPU-1", "GPU-2", "GPU-3"] {
            ids.push(uuid.to_string());
            ids.extend(replica_ids(uuid, 4));
        }
        ids
    }

    fn request(size: usize, available: Vec<String>) -> PreferenceRequest {
        PreferenceRequest {
            available,
            must_include: Vec::new(),
            size,
        }
    }

    fn handoff() -> Handoff {
        Handoff::new("n1", Duration::from_secs(30))
    }

    #[test]
    fn two_pods_started_in_turn_each_get_their_own_gpus() {
        let pods = [
            waiting("b", 2, Sharing::Exclusive, &["GPU-2", "GPU-3"]),
            waiting("a", 1, Sharing::Exclusive, &["GPU-1"]),
        ];
        let mut handoff = handoff();
        let now = Instant::now();
        // The kubelet starts the older pod first.
        let ids = handoff
            .prefer(now, &pods, &request(1, all_devices()))
            .unwrap();
        assert_eq!(ids, ["GPU-1"]);
        assert_eq!(handoff.claimed().unwrap().name, "a");
        let grant = handoff.allocate(now, &pods, &ids).unwrap();
        assert_eq!(grant.pod.name, "a");
        assert_eq!(grant.gpus, [("GPU-1".to_string(), 1000)]);
        assert!(handoff.claimed().is_none(), "released after Allocate");
        let ids = handoff
            .prefer(now, &pods, &request(2, all_devices()))
            .unwrap();
        assert_eq!(ids, ["GPU-2", "GPU-3"]);
        assert_eq!(handoff.allocate(now, &pods, &ids).unwrap().pod.name, "b");
        // Both handed over: nothing waits any more.
        let error = handoff
            .prefer(now, &pods, &request(1, all_devices()))
            .unwrap_err();
        assert!(
            matches!(error, HandoffError::NoPodWaiting { .. }),
            "{error}"
        );
    }

    #[test]
    fn a_mig_pod_gets_its_instances() {
        let pods = [waiting("m", 1, Sharing::Exclusive, &["MIG-0-1"])];
        let mut available = all_devices();
        available.extend(["MIG-0-0".to_string(), "MIG-0-1".to_string()]);
        let mut handoff = handoff();
        let now = Instant::now();
        let ids = handoff.prefer(now, &pods, &request(1, available)).unwrap();
        assert_eq!(ids, ["MIG-0-1"]);
        let grant = handoff.allocate(now, &pods, &ids).unwrap();
        assert_eq!(grant.gpus, [("MIG-0-1".to_string(), 1000)]);
    }

    #[test]
    fn shared_pods_on_one_gpu_get_distinct_replicas() {
        let pods = [
            waiting("a", 1, Sharing::Shared, &["GPU-0"]),
            waiting("b", 2, Sharing::Shared, &["GPU-0"]),
        ];
        let mut handoff = handoff();
        let now = Instant::now();
        let mut available = all_devices();
        let first = handoff
            .prefer(now, &pods, &request(1, available.clone()))
            .unwrap();
        assert_eq!(first, ["GPU-0::0"]);
        handoff.allocate(now, &pods, &first).unwrap();
        available.retain(|id| *id != first[0]);
        let second = handoff.prefer(now, &pods, &request(1, available)).unwrap();
        assert_eq!(second, ["GPU-0::1"]);
        let grant = handoff.allocate(now, &pods, &second).unwrap();
        assert_eq!(
            (grant.pod.name.as_str(), grant.sharing),
            ("b", Sharing::Shared)
        );
    }

    #[test]
    fn an_offer_other_than_the_preference_is_refused_naming_pod_and_devices() {
        let pods = [waiting("a", 1, Sharing::Exclusive, &["GPU-1"])];
        let mut handoff = handoff();
        let now = Instant::now();
        handoff
            .prefer(now, &pods, &request(1, all_devices()))
            .unwrap();
        let error = handoff
            .allocate(now, &pods, &["GPU-2".to_string()])
            .unwrap_err();
        let message = error.to_string();
        assert!(message.contains("ml/a (uid uid-a)"), "{message}");
        assert!(message.contains("given GPU-1"), "{message}");
        assert!(message.contains("offered GPU-2"), "{message}");
        assert!(handoff.claimed().is_none());
    }

    #[test]
    fn allocate_without_a_preference_checks_the_oldest_pod() {
        let pods = [
            waiting("a", 1, Sharing::Exclusive, &["GPU-1"]),
            waiting("b", 2, Sharing::Exclusive, &["GPU-2"]),
        ];
        let mut handoff = handoff();
        let now = Instant::now();
        let grant = handoff
            .allocate(now, &pods, &["GPU-1".to_string()])
            .unwrap();
        assert_eq!(grant.pod.name, "a");
        let error = handoff
            .allocate(now, &pods, &["GPU-3".to_string()])
            .unwrap_err();
        assert!(error.to_string().contains("ml/b"), "{error}");
        assert!(error.to_string().contains("given GPU-2"), "{error}");
    }

    #[test]
    fn a_pod_whose_gpus_are_taken_is_not_chosen() {
        let pods = [
            waiting("a", 1, Sharing::Exclusive, &["GPU-1"]),
            waiting("b", 2, Sharing::Exclusive, &["GPU-2"]),
        ];
        let mut handoff = handoff();
        let available: Vec<String> = all_devices().into_iter().filter(|d| d != "GPU-1").collect();
        let ids = handoff
            .prefer(Instant::now(), &pods, &request(1, available))
            .unwrap();
        assert_eq!(ids, ["GPU-2"]);
    }

    #[test]
    fn an_abandoned_claim_expires() {
        let pods = [
            waiting("a", 1, Sharing::Exclusive, &["GPU-1"]),
            waiting("b", 2, Sharing::Exclusive, &["GPU-2", "GPU-3"]),
        ];
        let mut handoff = handoff();
        let now = Instant::now();
        handoff
            .prefer(now, &pods, &request(1, all_devices()))
            .unwrap();
        // The kubelet gave up on `a` and starts `b`: another size, the claim goes.
        let ids = handoff
            .prefer(now, &pods, &request(2, all_devices()))
            .unwrap();
        assert_eq!(ids, ["GPU-2", "GPU-3"]);
        assert_eq!(handoff.claimed().unwrap().name, "b");
        // Past the TTL nothing is pending any more: `a` is chosen afresh.
        let later = now + Duration::from_secs(31);
        let ids = handoff
            .prefer(later, &pods, &request(1, all_devices()))
            .unwrap();
        assert_eq!(ids, ["GPU-1"]);
        assert_eq!(handoff.claimed().unwrap().name, "a");
    }

    #[test]
    fn containers_get_their_share_of_the_pod_in_turn() {
        let mut pod = waiting("a", 1, Sharing::Exclusive, &["GPU-0", "GPU-1", "GPU-2"]);
        pod.requests = vec![app(1), app(2)];
        let pods = [pod];
        let mut handoff = handoff();
        let now = Instant::now();
        let first = handoff
            .prefer(now, &pods, &request(1, all_devices()))
            .unwrap();
        assert_eq!(first, ["GPU-0"]);
        handoff.allocate(now, &pods, &first).unwrap();
        assert!(handoff.claimed().is_some(), "one container to go");
        let second = handoff
            .prefer(now, &pods, &request(2, all_devices()))
            .unwrap();
        assert_eq!(second, ["GPU-1", "GPU-2"]);
        let grant = handoff.allocate(now, &pods, &second).unwrap();
        assert_eq!(grant.gpus.len(), 2);
        assert!(handoff.claimed().is_none());
        assert!(handoff.is_handed_over("uid-a"));
    }

    #[test]
    fn an_init_container_hands_its_gpus_on_to_the_app_container() {
        // init: 2, app: 2 → the pod holds 2 GPUs, used by both in turn.
        let mut pod = waiting("a", 1, Sharing::Exclusive, &["GPU-0", "GPU-1"]);
        pod.requests = vec![init(2), app(2)];
        let pods = [pod];
        let mut handoff = handoff();
        let now = Instant::now();
        let first = handoff
            .prefer(now, &pods, &request(2, all_devices()))
            .unwrap();
        assert_eq!(first, ["GPU-0", "GPU-1"]);
        handoff.allocate(now, &pods, &first).unwrap();
        // The kubelet reuses both without asking for a preference.
        let grant = handoff
            .allocate(now, &pods, &ids(&["GPU-1", "GPU-0"]))
            .unwrap();
        assert_eq!(
            grant.gpus,
            [("GPU-1".to_string(), 1000), ("GPU-0".to_string(), 1000)]
        );
        assert!(handoff.is_handed_over("uid-a"));
    }

    #[test]
    fn a_container_after_an_init_container_takes_the_reused_gpus_first() {
        // init: 1, app: 2 → 2 GPUs; the app container reuses the init's.
        let mut pod = waiting("a", 1, Sharing::Exclusive, &["GPU-0", "GPU-1"]);
        pod.requests = vec![init(1), app(2)];
        let pods = [pod];
        let now = Instant::now();
        let started = || {
            let mut handoff = handoff();
            let first = handoff
                .prefer(now, &pods, &request(1, all_devices()))
                .unwrap();
            assert_eq!(first, ["GPU-0"]);
            handoff.allocate(now, &pods, &first).unwrap();
            handoff
        };
        let mut handoff = started();
        let asked = PreferenceRequest {
            available: all_devices(),
            must_include: ids(&["GPU-0"]),
            size: 2,
        };
        let second = handoff.prefer(now, &pods, &asked).unwrap();
        assert_eq!(second, ["GPU-0", "GPU-1"]);
        handoff.allocate(now, &pods, &second).unwrap();
        assert!(handoff.is_handed_over("uid-a"));
        // Another pod's GPU in place of the pod's own is refused.
        let error = started()
            .allocate(now, &pods, &ids(&["GPU-0", "GPU-2"]))
            .unwrap_err();
        assert!(error.to_string().contains("offered GPU-0,GPU-2"), "{error}");
    }

    #[test]
    fn the_kubelet_never_skips_a_reusable_gpu() {
        // init: 1, app: 1 → 1 GPU: the app container must get the init's.
        let mut pod = waiting("a", 1, Sharing::Exclusive, &["GPU-0", "GPU-1"]);
        pod.requests = vec![init(1), app(1)];
        // (asks for 1 but was given 2: no container could use GPU-1)
        let pods = [pod];
        let error = handoff()
            .prefer(Instant::now(), &pods, &request(1, all_devices()))
            .unwrap_err();
        assert!(error.to_string().contains("ask for 1"), "{error}");
        let mut pod = pods[0].clone();
        pod.requests = vec![init(2), app(1)];
        let pods = [pod];
        let now = Instant::now();
        let mut handoff = handoff();
        let first = handoff
            .prefer(now, &pods, &request(2, all_devices()))
            .unwrap();
        handoff.allocate(now, &pods, &first).unwrap();
        // Both GPUs are reusable: any one of them is right, nothing else.
        handoff.allocate(now, &pods, &ids(&["GPU-1"])).unwrap();
        assert!(handoff.is_handed_over("uid-a"));
    }

    #[test]
    fn a_sidecar_keeps_its_gpus_and_later_init_containers_get_fresh_ones() {
        // init i1: 1, sidecar s1: 1, init i2: 2, app: 2 → 3 GPUs.
        let mut pod = waiting("a", 1, Sharing::Exclusive, &["GPU-0", "GPU-1", "GPU-2"]);
        pod.requests = vec![init(1), app(1), init(2), app(2)];
        assert_eq!(api::pod_gpus(&pod.requests), Some(3));
        let pods = [pod];
        let now = Instant::now();
        let mut handoff = handoff();
        let i1 = handoff
            .prefer(now, &pods, &request(1, all_devices()))
            .unwrap();
        assert_eq!(i1, ["GPU-0"]);
        handoff.allocate(now, &pods, &i1).unwrap();
        // s1 reuses i1's GPU and keeps it.
        handoff.allocate(now, &pods, &ids(&["GPU-0"])).unwrap();
        // i2 needs two GPUs no container holds.
        let error = {
            let mut h = Handoff::new("n1", Duration::from_secs(30));
            let i1 = h.prefer(now, &pods, &request(1, all_devices())).unwrap();
            h.allocate(now, &pods, &i1).unwrap();
            h.allocate(now, &pods, &i1).unwrap();
            h.allocate(now, &pods, &ids(&["GPU-0", "GPU-1"]))
                .unwrap_err()
        };
        assert!(matches!(error, HandoffError::Mismatch { .. }), "{error}");
        let i2 = handoff
            .prefer(now, &pods, &request(2, all_devices()))
            .unwrap();
        assert_eq!(i2, ["GPU-1", "GPU-2"]);
        handoff.allocate(now, &pods, &i2).unwrap();
        // The app container reuses i2's.
        handoff
            .allocate(now, &pods, &ids(&["GPU-2", "GPU-1"]))
            .unwrap();
        assert!(handoff.is_handed_over("uid-a"));
    }
}
