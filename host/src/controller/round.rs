//! Scheduling rounds: gather, decide (one policy call per policy), check,
//! apply, report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::apply::Applier;
use super::events::{EventSink, pod_ref};
use super::metrics::Metrics;
use super::policies::{ActivePolicy, PolicySet};
use super::report::{Reporter, RoundOutcome};
use super::watch::Shared;
use crate::engine::types::Snapshot;
use crate::index::ObjectKey;
use crate::validate::validate;
use tokio::sync::watch;

/// The kinds the controller watches; rounds start once each is listed.
pub const WATCHED_KINDS: usize = 4;

/// Runs rounds until the task is dropped.
pub struct Rounds {
    pub(super) shared: Arc<Shared>,
    pub(super) applier: Applier,
    pub(super) reporter: Reporter,
    pub(super) events: EventSink,
    pub(super) policies: PolicySet,
    /// How long pending pods are gathered after a change before deciding.
    pub(super) gather_window: Duration,
    /// A round runs at least this often, changes or not.
    pub(super) resync: Duration,
    pub(super) metrics: Metrics,
    /// Whether this replica leads: rounds run only while it does.
    pub(super) leader: watch::Receiver<bool>,
}

// === impl Rounds ===

impl Rounds {
    /// Waits for the first full list of every kind, then, while this
    /// replica leads, runs a round after each change (gathered for the
    /// window) and at least every `resync`. A round in flight when the
    /// lead is lost stops at once: like a crash, the write order leaves
    /// nothing the next leader cannot finish.
    pub async fn run(mut self) {
        self.shared.wait_listed(WATCHED_KINDS).await;
        tracing::info!(
            policies = ?self.policies.names().collect::<Vec<_>>(),
            "Index ready"
        );
        let mut round = 0u64;
        loop {
            if !*self.leader.borrow_and_update() {
                self.metrics.leader(false);
                tracing::info!("Not the leader: waiting, with the index kept warm");
                if self.leader.wait_for(|leading| *leading).await.is_err() {
                    tracing::error!("Leader election stopped");
                    return;
                }
                tracing::info!("Leading: starting rounds");
            }
            self.metrics.leader(true);
            round += 1;
            let mut leader = self.leader.clone();
            tokio::select! {
                () = self.round(round) => {}
                _ = leader.wait_for(|leading| !*leading) => {
                    tracing::warn!(round, "Lost the lead during a round; stopped it");
                    continue;
                }
            }
            tokio::select! {
                () = self.shared.changed.notified() => {}
                () = tokio::time::sleep(self.resync) => {}
                _ = leader.wait_for(|leading| !*leading) => continue,
            }
            tokio::time::sleep(self.gather_window).await;
        }
    }

    /// One round.
    pub async fn round(&mut self, round: u64) {
        let started = Instant::now();
        let (releases, holders, views, policies) = {
            let index = self.shared.index();
            (
                index.releases(),
                index.unbound_holders(),
                index.resources(),
                index.policies_with_pending(),
            )
        };
        self.applier.finalize(&views).await;
        self.applier.release(releases).await;
        self.applier.finish(holders).await;
        let mut outcome = RoundOutcome::default();
        let mut bound = 0;
        // One policy at a time, each on a snapshot taken after the previous
        // one's allocations were recorded: two policies never get the same
        // free GPU.
        for name in policies {
            let mut snapshot = self.shared.index().snapshot(&name, round);
            if snapshot.pending.is_empty() {
                continue;
            }
            let Some(policy) = self.policies.get(&name).cloned() else {
                let loaded: Vec<&str> = self.policies.names().collect();
                let message = format!(
                    "no policy named {name:?} is loaded (loaded: {}); its pods wait",
                    loaded.join(", ")
                );
                for resource in resources_of(&snapshot) {
                    outcome
                        .policy_errors
                        .insert(resource, ("PolicyNotFound", message.clone()));
                }
                continue;
            };
            snapshot.config = policy.config.clone();
            bound += self.decide(&policy, snapshot, &mut outcome).await;
        }
        self.reporter.report(&self.applier, outcome).await;
        self.metrics.round();
        self.metrics.pods_bound(bound);
        self.metrics.gpus(&self.shared.index().gpu_states());
        if bound > 0 {
            tracing::info!(round, bound, elapsed = ?started.elapsed(), "Round");
        } else {
            tracing::debug!(round, elapsed = ?started.elapsed(), "Round");
        }
    }

    /// Calls `policy` on `snapshot`, checks its decisions, applies the valid
    /// ones; returns how many pods were bound.
    async fn decide(
        &self,
        policy: &Arc<ActivePolicy>,
        snapshot: Snapshot,
        outcome: &mut RoundOutcome,
    ) -> usize {
        let resources = resources_of(&snapshot);
        let call = {
            let policy = Arc::clone(policy);
            tokio::task::spawn_blocking(move || {
                let result = policy.loaded.allocate(&snapshot);
                (snapshot, result)
            })
        };
        let (snapshot, result) = match call.await {
            Ok(done) => done,
            Err(error) => {
                tracing::error!(%error, "Policy call panicked");
                return 0;
            }
        };
        let round = match result {
            Ok(round) => round,
            Err(error) => {
                self.metrics.policy_failure(&policy.name, error.kind());
                tracing::warn!(policy = %policy.name, kind = error.kind(), %error, "Policy failed; its pods wait");
                let message = format!(
                    "policy {} ({}) failed: {error}; its pods wait",
                    policy.name,
                    policy.loaded.digest()
                );
                for resource in resources {
                    outcome
                        .policy_errors
                        .insert(resource, ("PolicyFailed", message.clone()));
                }
                return 0;
            }
        };
        self.metrics.policy_call(&policy.name, round.stats.call);
        let verdict = validate(&snapshot, &round.decisions);
        for (outcome, count) in [
            ("accepted", verdict.accepted.len()),
            ("waiting", verdict.waiting.len()),
            ("rejected", verdict.rejected.len()),
            ("refused", verdict.refused.len()),
        ] {
            self.metrics.decisions(&policy.name, outcome, count);
        }
        tracing::debug!(
            policy = %policy.name,
            pending = snapshot.pending.len(),
            accepted = verdict.accepted.len(),
            waiting = verdict.waiting.len(),
            rejected = verdict.rejected.len(),
            refused = verdict.refused.len(),
            call = ?round.stats.call,
            "Decided"
        );
        outcome.decided.extend(resources);
        for refused in &verdict.refused {
            let Some(pod) = decision_pod(&refused.decision) else {
                continue;
            };
            let message = format!(
                "policy {} decided {}, refused: {}",
                policy.name,
                describe(&refused.decision),
                refused.reason
            );
            tracing::warn!(%pod, %message, "Decision refused");
            if let Some(resource) = resource_of(&snapshot, &pod) {
                outcome.decided.remove(&resource);
                outcome
                    .policy_errors
                    .insert(resource, ("DecisionRefused", message.clone()));
            }
            let uid = self.shared.index().pod_uid(&pod).map(str::to_string);
            self.events.warning(
                pod_ref(&pod, uid.as_deref()),
                "DecisionRefused",
                "Allocate",
                message,
            );
        }
        for rejected in &verdict.rejected {
            let Some(pod) = parse_key(&rejected.pod) else {
                continue;
            };
            let uid = self.shared.index().pod_uid(&pod).map(str::to_string);
            self.events.warning(
                pod_ref(&pod, uid.as_deref()),
                "PolicyRejected",
                "Allocate",
                format!(
                    "policy {} says the pod cannot be placed as requested: {}",
                    policy.name, rejected.reason
                ),
            );
        }
        self.applier
            .assign(policy, &snapshot, verdict.accepted)
            .await
            .bound
    }
}

/// The GPUResources of a snapshot's pending requests.
fn resources_of(snapshot: &Snapshot) -> std::collections::HashSet<ObjectKey> {
    snapshot
        .pending
        .iter()
        .filter_map(|r| parse_key(&r.resource))
        .collect()
}

/// The GPUResource of pending pod `pod`.
fn resource_of(snapshot: &Snapshot, pod: &ObjectKey) -> Option<ObjectKey> {
    let pod = pod.to_string();
    snapshot
        .pending
        .iter()
        .find(|r| r.pod == pod)
        .and_then(|r| parse_key(&r.resource))
}

fn parse_key(key: &str) -> Option<ObjectKey> {
    key.split_once('/')
        .map(|(namespace, name)| ObjectKey::new(namespace, name))
}

fn decision_pod(decision: &crate::engine::types::Decision) -> Option<ObjectKey> {
    use crate::engine::types::Decision;
    match decision {
        Decision::Assign(a) => parse_key(&a.pod),
        Decision::Wait(d) | Decision::Reject(d) => parse_key(&d.pod),
    }
}

fn describe(decision: &crate::engine::types::Decision) -> String {
    use crate::engine::types::Decision;
    match decision {
        Decision::Assign(a) => format!("{} on {} GPUs {}", a.pod, a.node, a.gpus.join(",")),
        Decision::Wait(d) => format!("wait for {}", d.pod),
        Decision::Reject(d) => format!("reject {}", d.pod),
    }
}
