//! Preemptions in progress: what a preemptor's nomination
//! (`wasmgpu.io/nomination`) waits for, whom it still has to evict, and
//! what it is bound with once its victims are gone.
//!
//! ```text
//!  nomination ─▶ victims still there ─▶ evictions (again, after a restart)
//!       │
//!       └─ every victim gone ─┬─ GPUResource pod: bind
//!                             └─ DRA pod: once no other claim holds a
//!                                nominated device (the victims' claims
//!                                deallocated), the claims' writes, then
//!                                bind; a claim no longer what the
//!                                nomination named: the nomination is stale
//! ```

use crate::claim_writes::Chosen;
use crate::dra::DeviceId;
use crate::facts::binding::ClaimWrite;
use crate::facts::pod::PodFacts;
use crate::index::Index;
use crate::key::ObjectKey;
use wasmgpu_api::{NominatedClaim, NominatedDevice, Nomination};

/// A victim of a nomination to evict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    /// The pod the GPUs are nominated for.
    pub preemptor: ObjectKey,
    /// The pod to evict.
    pub victim: ObjectKey,
    /// Its UID (the eviction is for this pod, not a namesake).
    pub uid: String,
}

/// Where a preemptor's nomination stands.
#[derive(Debug, PartialEq)]
enum Standing {
    /// Victims still there, or their claims still hold a nominated
    /// device.
    Waiting,
    /// Ready to bind, with a DRA pod's claim writes.
    Ready(Vec<ClaimWrite>),
    /// It can no longer be carried out (a claim recreated, allocated by
    /// another writer, a device no longer published): why.
    Stale(String),
}

// === impl Index ===

impl Index {
    /// Whether every victim of `pod`'s nomination is gone: deleted,
    /// finished, or recreated under another UID.
    pub(crate) fn victims_gone(&self, pod: &ObjectKey) -> bool {
        let Some(nomination) = self.key_to_pod.get(pod).and_then(|p| p.nomination()) else {
            return false;
        };
        nomination.victims.iter().all(|v| {
            self.key_to_pod
                .get(&ObjectKey::new(&v.namespace, &v.name))
                .is_none_or(|p| p.uid != v.uid || p.terminal)
        })
    }

    /// The UIDs of the pods a preemptor not yet bound names as its
    /// victims: their GPUs are promised (a UID names one pod, never a
    /// namesake created later).
    pub(crate) fn nominated_victims(&self) -> std::collections::HashSet<&str> {
        self.nominated_pods()
            .filter_map(|(_, p)| p.nomination())
            .flat_map(|n| &n.victims)
            .map(|v| v.uid.as_str())
            .collect()
    }

    /// The victims of every nomination that are still there and not yet
    /// going away: to evict (again, after a restart), with their preemptor.
    pub fn evictions(&self) -> Vec<Eviction> {
        let mut evictions = Vec::new();
        for (preemptor, pod) in self.nominated_pods() {
            let Some(nomination) = pod.nomination() else {
                continue;
            };
            for v in &nomination.victims {
                let victim = ObjectKey::new(&v.namespace, &v.name);
                let live = self
                    .key_to_pod
                    .get(&victim)
                    .is_some_and(|p| p.uid == v.uid && !p.terminal && !p.deleting);
                if live {
                    evictions.push(Eviction {
                        preemptor: preemptor.clone(),
                        victim,
                        uid: v.uid.clone(),
                    });
                }
            }
        }
        evictions
    }

    /// What a DRA preemptor's nomination records of its claim `writes`:
    /// each claim they allocate, with its devices by request and UUID
    /// (claims allocated already are only reserved at binding).
    pub fn nominated_claims(&self, writes: &[ClaimWrite]) -> Vec<NominatedClaim> {
        writes
            .iter()
            .filter_map(|w| {
                let results = w.allocation.as_ref()?.devices.as_ref()?.results.as_ref()?;
                let devices = results
                    .iter()
                    .filter_map(|r| {
                        let id = DeviceId {
                            driver: r.driver.clone(),
                            pool: r.pool.clone(),
                            device: r.device.clone(),
                        };
                        let (_, uuid) = self.dra.locate(&id)?;
                        Some(NominatedDevice {
                            request: r.request.clone(),
                            uuid: uuid.to_owned(),
                        })
                    })
                    .collect();
                Some(NominatedClaim {
                    name: w.claim.name.clone(),
                    uid: w.uid.clone(),
                    devices,
                })
            })
            .collect()
    }

    /// The claim writes `pod`'s nomination binds with once it is ready
    /// (empty for a GPUResource pod); `None` while it waits, or when it
    /// is stale ([`Index::stale_nominations`]).
    pub(crate) fn nomination_ready(&self, pod: &ObjectKey) -> Option<Vec<ClaimWrite>> {
        match self.standing(pod)? {
            Standing::Ready(writes) => Some(writes),
            Standing::Waiting | Standing::Stale(_) => None,
        }
    }

    /// Nominations of unbound pods that can no longer be carried out, and
    /// why: the controller removes them (the nominated GPUs are free
    /// again, and the pod is decided anew).
    pub fn stale_nominations(&self) -> Vec<(ObjectKey, String)> {
        self.nominated_pods()
            .filter_map(|(key, _)| match self.standing(key)? {
                Standing::Stale(why) => Some((key.clone(), why)),
                Standing::Waiting | Standing::Ready(_) => None,
            })
            .collect()
    }

    /// The pods waiting on a nomination (see [`PodFacts::nomination`]), by
    /// key: the few pods the index keeps apart as they change.
    fn nominated_pods(&self) -> impl Iterator<Item = (&ObjectKey, &PodFacts)> {
        self.bound_use
            .nominated()
            .iter()
            .filter_map(|key| Some((key, self.key_to_pod.get(key)?)))
    }

    /// Where `pod`'s nomination stands; `None` without one.
    fn standing(&self, pod: &ObjectKey) -> Option<Standing> {
        let nomination = self.key_to_pod.get(pod)?.nomination()?;
        if !self.victims_gone(pod) {
            return Some(Standing::Waiting);
        }
        if nomination.claims.is_empty() {
            return Some(Standing::Ready(Vec::new()));
        }
        Some(self.claims_standing(pod, nomination))
    }

    /// A DRA preemptor's claims, its victims gone: waiting while another
    /// claim still holds a nominated device; stale when a claim is not the
    /// one nominated, or allocated other than for this pod; else ready
    /// with the writes (a claim allocated and reserved for the pod before
    /// a restart needs none).
    fn claims_standing(&self, pod: &ObjectKey, nomination: &Nomination) -> Standing {
        let node = nomination.allocation.node.as_str();
        let keys: Vec<ObjectKey> = nomination
            .claims
            .iter()
            .map(|c| ObjectKey::new(&pod.namespace, &c.name))
            .collect();
        let pod_uid = &nomination.uid;
        let mut pending = Vec::new();
        for (claim, key) in nomination.claims.iter().zip(&keys) {
            let Some(facts) = self.dra.claim(key) else {
                return Standing::Stale(format!("ResourceClaim {key} is gone"));
            };
            if facts.uid() != claim.uid {
                return Standing::Stale(format!("ResourceClaim {key} was recreated"));
            }
            if !facts.allocated() {
                pending.push((claim, key));
            } else if !facts.reserved_for().any(|uid| uid == pod_uid) {
                return Standing::Stale(format!(
                    "ResourceClaim {key} was allocated by another writer"
                ));
            }
        }
        let nominated = |uuid: &str| {
            pending
                .iter()
                .any(|(c, _)| c.devices.iter().any(|d| d.uuid == uuid))
        };
        let held_by_another = self.dra.allocated().any(|(claim, device)| {
            !keys.contains(claim)
                && self
                    .dra
                    .locate(device)
                    .is_some_and(|(n, uuid)| n == node && nominated(uuid))
        });
        if held_by_another {
            return Standing::Waiting;
        }
        let names: Vec<String> = pending.iter().map(|(_, key)| key.to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let chosen: Vec<Chosen<'_>> = pending
            .iter()
            .enumerate()
            .flat_map(|(c, (claim, _))| {
                claim.devices.iter().map(move |d| Chosen {
                    claim: c,
                    request: d.request.clone(),
                    uuid: &d.uuid,
                })
            })
            .collect();
        match self.claim_writes(pod, &names, &chosen, node) {
            Ok(writes) => Standing::Ready(writes),
            Err(why) => Standing::Stale(why),
        }
    }
}
