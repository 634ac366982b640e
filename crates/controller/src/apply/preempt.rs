//! Carrying out preemptions the host accepted.
//!
//! ```text
//!  round: verdict.preempting ─▶ nomination written on the preemptor
//!         (wasmgpu.io/nomination; the index holds its GPUs from then on)
//!         └─▶ each victim evicted (Eviction API: PodDisruptionBudgets apply)
//!               refused by a PDB ─▶ the nomination is dropped, the pod waits
//!  later rounds: victims not yet going are evicted again (after a restart);
//!                once all are gone the preemptor is bound (Applier::finish)
//! ```
//!
//! The nomination is written before any eviction, so a controller that
//! stops in between finds it and goes on; a victim's GPUs stay held until it
//! is gone, and the nominated ones are given to nobody else.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, EvictParams, Patch, Preconditions};
use serde_json::json;

use super::{Applier, ApplyError, Writer, binding_of, merge_params};
use crate::events::{Reason, pod_ref};
use crate::policies::ActivePolicy;
use wasmgpu_api::{NOMINATION_ANNOTATION, Nomination, Victim};
use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::validate::Preempting;
use wasmgpu_index::{Eviction, ObjectKey};

impl Applier {
    /// Nominates the GPUs of each accepted preemption for its preemptor and
    /// starts evicting its victims. Returns how many nominations were
    /// written.
    pub async fn preempt(
        &self,
        policy: &ActivePolicy,
        snapshot: &HostSnapshot,
        preempting: Vec<Preempting>,
    ) -> usize {
        let mut written = 0;
        for preemption in preempting {
            let nomination = {
                let index = self.writer.shared.index();
                let Some(binding) = binding_of(policy, snapshot, &preemption.placement, &index)
                else {
                    continue;
                };
                let victims: Option<Vec<Victim>> = preemption
                    .victims
                    .iter()
                    .map(|name| {
                        let key = ObjectKey::parse(name)?;
                        let uid = index.pod_uid(&key)?.to_owned();
                        Some(Victim {
                            namespace: key.namespace,
                            name: key.name,
                            uid,
                        })
                    })
                    .collect();
                // A victim gone since the snapshot: the next round decides
                // again on what is there.
                let Some(victims) = victims else {
                    continue;
                };
                let claims = index.nominated_claims(&binding.claims);
                (
                    binding.pod,
                    Nomination {
                        uid: binding.uid,
                        allocation: binding.allocation,
                        victims,
                        claims,
                    },
                )
            };
            let (preemptor, nomination) = nomination;
            if self.writer.nominate(&preemptor, &nomination).await {
                written += 1;
                let victims: Vec<Eviction> = nomination
                    .victims
                    .iter()
                    .map(|v| Eviction {
                        preemptor: preemptor.clone(),
                        victim: ObjectKey::new(&v.namespace, &v.name),
                        uid: v.uid.clone(),
                    })
                    .collect();
                self.evict(victims);
            }
        }
        written
    }

    /// Removes nominations that can no longer be carried out (`stale`,
    /// with why): their GPUs are free again and the pod is decided anew.
    pub async fn drop_stale(&self, stale: Vec<(ObjectKey, String)>) {
        for (pod, why) in stale {
            tracing::info!(%pod, %why, "Dropping a nomination that can no longer be carried out; the pod is decided again");
            self.writer.drop_nomination(&pod).await;
        }
    }

    /// Evicts victims (of nominations written now or before a restart), in
    /// the background.
    pub fn evict(&self, evictions: Vec<Eviction>) {
        if evictions.is_empty() {
            return;
        }
        let writer = Arc::clone(&self.writer);
        self.tasks().spawn(async move {
            for eviction in evictions {
                writer.evict(&eviction).await;
            }
        });
    }
}

impl Writer {
    /// Writes `nomination` on `preemptor` and feeds the written pod to the
    /// index (its GPUs are held from now on). False when it was not
    /// written: the pod waits for a later round.
    async fn nominate(&self, preemptor: &ObjectKey, nomination: &Nomination) -> bool {
        let (key, value) = nomination.annotation();
        let patch = json!({"metadata": {"uid": nomination.uid, "annotations": {key: value}}});
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &preemptor.namespace);
        match self
            .timed(
                "nomination",
                pods.patch(&preemptor.name, &merge_params(), &Patch::Merge(&patch)),
            )
            .await
        {
            Ok(pod) => {
                self.shared.index().apply_pod(&pod);
                let victims: Vec<String> = nomination
                    .victims
                    .iter()
                    .map(|v| format!("{}/{}", v.namespace, v.name))
                    .collect();
                tracing::info!(pod = %preemptor, node = %nomination.allocation.node, victims = ?victims, "Preempting");
                self.events.normal(
                    pod_ref(preemptor, Some(&nomination.uid)),
                    Reason::Preempting,
                    "Preempt",
                    format!(
                        "GPUs {} on node {} are nominated for this pod; evicting {}",
                        nomination.allocation.device_list(),
                        nomination.allocation.node,
                        victims.join(", ")
                    ),
                );
                true
            }
            Err(error) => {
                tracing::warn!(pod = %preemptor, error_kind = error.kind(), %error, "Cannot write the nomination; the pod waits for a later round");
                false
            }
        }
    }

    /// Evicts one victim; a PodDisruptionBudget that refuses drops the
    /// nomination (the preemptor waits, and is told why).
    async fn evict(&self, eviction: &Eviction) {
        let pods: Api<Pod> =
            Api::namespaced(self.eviction_client.clone(), &eviction.victim.namespace);
        let params = evict_params(&eviction.uid);
        let preemptor = &eviction.preemptor;
        let note = self.victim_note(eviction);
        match self
            .timed("eviction", pods.evict(&eviction.victim.name, &params))
            .await
        {
            Ok(_) => {
                tracing::info!(victim = %eviction.victim, preemptor = %preemptor, "Evicted");
                self.events.normal(
                    pod_ref(&eviction.victim, Some(&eviction.uid)),
                    Reason::Preempted,
                    "Preempt",
                    note,
                );
            }
            Err(ApplyError::Api(kube::Error::Api(status)))
                if status.is_not_found() || status.code == 409 =>
            {
                // Gone already, or another pod of its name: nothing to evict.
            }
            Err(ApplyError::Api(kube::Error::Api(status))) if status.code == 429 => {
                self.blocked_by_budget(eviction, &status.message).await;
            }
            Err(error) => {
                tracing::warn!(victim = %eviction.victim, preemptor = %preemptor, error_kind = error.kind(), %error, "Cannot evict; retrying next round");
            }
        }
    }

    /// What a victim is told: who takes its GPUs, and why it may.
    fn victim_note(&self, eviction: &Eviction) -> String {
        let preemptor = &eviction.preemptor;
        let index = self.shared.index();
        preempted_note(
            preemptor,
            (
                index.pod_priority(preemptor),
                index.pod_priority(&eviction.victim),
            ),
            (
                index.tenant_of(&preemptor.namespace),
                index.tenant_of(&eviction.victim.namespace),
            ),
        )
    }

    /// A PodDisruptionBudget refused the eviction (`message`): the
    /// preemptor backs off, is told why, and loses its nomination.
    async fn blocked_by_budget(&self, eviction: &Eviction, message: &str) {
        let preemptor = &eviction.preemptor;
        let backoff = self
            .shared
            .index()
            .preemption_blocked(preemptor, crate::clock::now_ms());
        self.metrics.preemption_backoff();
        let why = format!(
            "evicting {} was refused: {} (a PodDisruptionBudget forbids it now); the \
             preemption is dropped and the pod waits, preempting no one for {}s",
            eviction.victim,
            message,
            backoff.as_secs()
        );
        tracing::warn!(victim = %eviction.victim, preemptor = %preemptor, %why, "Preemption blocked");
        let uid = self.shared.index().pod_uid(preemptor).map(str::to_owned);
        self.events.warning(
            pod_ref(preemptor, uid.as_deref()),
            Reason::PreemptionBlocked,
            "Preempt",
            why,
        );
        self.drop_nomination(preemptor).await;
    }

    /// Removes `pod`'s nomination: its GPUs are free for anyone again.
    pub(super) async fn drop_nomination(&self, pod: &ObjectKey) {
        let patch = json!({"metadata": {"annotations": {NOMINATION_ANNOTATION: null}}});
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        match self
            .timed(
                "nomination",
                pods.patch(&pod.name, &merge_params(), &Patch::Merge(&patch)),
            )
            .await
        {
            Ok(written) => self.shared.index().apply_pod(&written),
            Err(error) => {
                tracing::warn!(%pod, error_kind = error.kind(), %error, "Cannot drop the nomination; retrying when its victim is evicted again");
            }
        }
    }
}

/// The Event note on a victim: who takes its GPUs, and by which rule the
/// host let it: a higher priority (`priorities`: the preemptor's, the
/// victim's), else reclaim toward the preemptor's tenant's quota
/// (`tenants`: the preemptor's, the victim's).
fn preempted_note(
    preemptor: &ObjectKey,
    priorities: (Option<i32>, Option<i32>),
    tenants: (Option<&str>, Option<&str>),
) -> String {
    match (priorities, tenants) {
        ((Some(ours), Some(theirs)), _) if ours > theirs => format!(
            "evicted so that {preemptor} (priority {ours}, above this pod's {theirs}) can take its GPUs"
        ),
        (_, (Some(ours), Some(theirs))) if ours != theirs => format!(
            "evicted so that {preemptor} can take its GPUs: reclaimed for tenant {ours}, under its \
             quota, from tenant {theirs}, over its own"
        ),
        _ => format!("evicted so that {preemptor} can take its GPUs"),
    }
}

/// Eviction of exactly the pod with `uid`, not a namesake.
fn evict_params(uid: &str) -> EvictParams {
    EvictParams {
        delete_options: Some(DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        }),
        ..EvictParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_victim_is_told_whether_priority_or_reclaim_took_its_gpus() {
        let preemptor = ObjectKey::new("b", "train");
        let by_priority = preempted_note(&preemptor, (Some(1000), Some(100)), (None, None));
        assert_eq!(
            by_priority,
            "evicted so that b/train (priority 1000, above this pod's 100) can take its GPUs"
        );
        let reclaimed = preempted_note(
            &preemptor,
            (Some(100), Some(100)),
            (Some("team-b"), Some("team-a")),
        );
        assert!(
            reclaimed.contains("reclaimed for tenant team-b, under its quota, from tenant team-a"),
            "{reclaimed}"
        );
        // The victim gone from the index already: no rule is claimed.
        let unknown = preempted_note(&preemptor, (Some(1000), None), (None, None));
        assert_eq!(unknown, "evicted so that b/train can take its GPUs");
    }
}
