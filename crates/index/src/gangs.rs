//! # Gangs: pods placed all together or not at all
//!
//! A gang is a PodGroup (`scheduling.x-k8s.io/v1alpha1`) and the pods that
//! name it (label `scheduling.x-k8s.io/pod-group`). The index keeps the
//! group's facts (`minMember`, `scheduleTimeoutSeconds`, the reservation of
//! a round being applied) and, from them and the holdings, says:
//!
//! ```text
//!  waiting members ─┐
//!  holdings ────────┼─▶ gangs_of      → the snapshot's gangs: min-member, bound, pending
//!  PodGroups ───────┘   gang_timeouts → GangTimedOut problems (members keep waiting)
//!                       gang_bound    → members holding GPUs, whatever their policy
//! ```
//!
//! Whether a round's assignments reach `minMember` is the validator's rule
//! (`wasmgpu_contract::validate`); writing a gang's bindings is the
//! controller's. Pure: no I/O, no clock (the time comes in).

use std::collections::BTreeMap;

use wasmgpu_contract::types::{Gang, Running};

use crate::holdings::Holdings;
use crate::index::Index;
use crate::key::ObjectKey;
use crate::problem::Problem;
use crate::snapshot::{RunningPod, Waiting};

// === impl Index ===

impl Index {
    /// A [`Problem::GangTimedOut`] for each waiting member of a gang that
    /// is still short of `minMember` while its oldest waiting member was
    /// created more than the PodGroup's `scheduleTimeoutSeconds` before
    /// `now_ms`. They keep waiting: the gang may fit later, and it holds
    /// nothing to give back.
    pub(crate) fn gang_timeouts(
        &self,
        waiting: &[Waiting<'_>],
        holdings: &Holdings,
        now_ms: u64,
    ) -> Vec<Problem> {
        let mut key_to_members: BTreeMap<ObjectKey, Vec<&Waiting<'_>>> = BTreeMap::new();
        for w in waiting {
            if let Some(group) = &w.pod.pod_group {
                let key = ObjectKey::new(&w.key.namespace, group);
                key_to_members.entry(key).or_default().push(w);
            }
        }
        let mut problems = Vec::new();
        for (key, members) in key_to_members {
            let Some(facts) = self.key_to_gang.get(&key) else {
                continue;
            };
            let Some(timeout_s) = facts.schedule_timeout_seconds else {
                continue;
            };
            let bound = self.gang_bound(&key, holdings);
            if bound >= facts.min_member {
                continue;
            }
            let oldest_ms = members
                .iter()
                .map(|w| w.request.created_ms)
                .min()
                .unwrap_or(now_ms);
            if now_ms.saturating_sub(oldest_ms) <= u64::from(timeout_s) * 1000 {
                continue;
            }
            for w in &members {
                let (Some(pod), Some(resource)) = (ObjectKey::parse(&w.request.pod), &w.resource)
                else {
                    continue;
                };
                problems.push(Problem::GangTimedOut {
                    pod,
                    resource: resource.clone(),
                    group: key.clone(),
                    timeout_s,
                    min_member: facts.min_member,
                    bound,
                    waiting: members.len() as u32,
                });
            }
        }
        problems
    }

    /// Members of gang `key` holding GPUs.
    pub(crate) fn gang_bound(&self, key: &ObjectKey, holdings: &Holdings) -> u32 {
        holdings
            .live()
            .filter(|h| {
                h.pod.namespace == key.namespace
                    && h.facts.and_then(|p| p.pod_group.as_deref()) == Some(key.name.as_str())
            })
            .count() as u32
    }

    /// The gangs of `waiting` and of the `running` pods (which are
    /// `running_pods`), sorted by name, each with its members already
    /// holding GPUs counted as bound; sets each member's `gang`.
    pub(crate) fn gangs_of(
        &self,
        waiting: &mut [Waiting<'_>],
        running: &mut [Running],
        running_pods: &[RunningPod<'_>],
        holdings: &Holdings,
    ) -> Vec<Gang> {
        let mut key_to_members: BTreeMap<ObjectKey, (Vec<u32>, Vec<u32>)> = BTreeMap::new();
        for (position, w) in waiting.iter().enumerate() {
            if let Some(group) = &w.pod.pod_group {
                let key = ObjectKey::new(&w.key.namespace, group);
                key_to_members
                    .entry(key)
                    .or_default()
                    .0
                    .push(position as u32);
            }
        }
        for (position, pod) in running_pods.iter().enumerate() {
            if let Some(group) = pod.facts.and_then(|p| p.pod_group.as_ref()) {
                let gang = ObjectKey::new(&pod.key.namespace, group);
                key_to_members
                    .entry(gang)
                    .or_default()
                    .1
                    .push(position as u32);
            }
        }
        let mut gangs = Vec::with_capacity(key_to_members.len());
        for (key, (pending, members_running)) in key_to_members {
            let Some(facts) = self.key_to_gang.get(&key) else {
                continue;
            };
            let bound = self.gang_bound(&key, holdings);
            let at = Some(gangs.len() as u32);
            for &m in &pending {
                waiting[m as usize].request.gang = at;
            }
            for &m in &members_running {
                running[m as usize].gang = at;
            }
            gangs.push(Gang {
                name: key.to_string(),
                min_member: facts.min_member,
                bound,
                pending,
                running: members_running,
            });
        }
        gangs
    }
}

// === what the controller clears ===

impl Index {
    /// Gangs whose reservation can go: every reserved member is bound (it
    /// carries its allocation), gone, finished or recreated.
    pub fn reservations_to_clear(&self) -> Vec<ObjectKey> {
        self.key_to_gang
            .iter()
            .filter_map(|(key, gang)| {
                let reservation = gang.reservation.as_ref()?;
                let done = reservation.members.iter().all(|(pod, member)| {
                    let pod = ObjectKey::new(&key.namespace, pod);
                    self.key_to_pod
                        .get(&pod)
                        .is_none_or(|p| p.uid != member.uid || !p.unplaced())
                });
                (done && self.pods_listed).then(|| key.clone())
            })
            .collect()
    }
}
