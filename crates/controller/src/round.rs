//! Scheduling rounds: gather, decide (one policy call per policy), check,
//! start the bindings, report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::apply::Applier;
use super::clock::now_ms;
use super::events::{EventSink, Reason, pod_ref};
use super::metrics::Metrics;
use super::policies::{ActivePolicy, Policies};
use super::report::{Reporter, RoundOutcome};
use super::round_plan::{
    PodEvent, failure_message, plan_all_waiting, plan_verdict, plan_waiting, resources_of,
};
use super::shadows::Shadows;
use super::watch::WatchedIndex;
use tokio::sync::watch;
use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::validate::{Verdict, validate_host};
use wasmgpu_index::RoundStart;

/// What a round does when the active version of a policy fails at run time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnPolicyFailure {
    /// Discard the round's decisions; the pods stay pending (fail closed).
    #[default]
    Wait,
    /// Retry the round with the version active before the latest swap,
    /// when there is one; else wait.
    LastGood,
}

/// Runs rounds until the task is dropped.
pub struct Rounds {
    /// How many watches feed the index (policy ConfigMaps and, when
    /// served, PodGroups included): rounds start once each has listed, so
    /// that no round sees GPUs free that bound pods hold, or misses a
    /// policy.
    pub(super) watched_kinds: usize,
    pub(super) shared: Arc<WatchedIndex>,
    pub(super) applier: Applier,
    pub(super) reporter: Reporter,
    pub(super) events: EventSink,
    /// Looked up at the start of each policy call: a swap takes effect at
    /// the next call, a call in flight keeps its version.
    pub(super) policies: Arc<Policies>,
    /// Called after the policy they shadow, in the background.
    pub(super) shadows: Shadows,
    pub(super) on_failure: OnPolicyFailure,
    /// Named in the log when it is not loaded once rounds start.
    pub(super) default_policy: String,
    /// The least time from one round's start to the next: pending pods
    /// that arrive meanwhile are decided together.
    pub(super) gather_window: Duration,
    /// A round runs at least this often, changes or not.
    pub(super) resync: Duration,
    pub(super) metrics: Metrics,
    /// Whether this replica leads: rounds run only while it does.
    pub(super) leader: watch::Receiver<bool>,
    /// Keeps the snapshots of recent rounds of policies that ask for it.
    pub(super) recorder: Arc<super::recorder::Recorder>,
    /// Gang members told why they wait (pod, reason): told once per reason.
    pub(super) waits_told: std::sync::Mutex<std::collections::HashSet<(String, String)>>,
}

/// Rounds start at least this many times their own length apart: at most
/// a third of one core goes to rounds, however fast pods arrive.
const SPACING_PER_ROUND_LENGTH: u32 = 3;

/// The spacing by round length stops growing here: a round of a second
/// or more (a slow policy, a very large cluster) is followed by the next
/// at once rather than seconds later.
const MOST_SPACING_BY_LENGTH: Duration = Duration::from_secs(1);

/// The least time from a round's start to the next one's: the gather
/// window, or [`SPACING_PER_ROUND_LENGTH`] times what the round took (at
/// most [`MOST_SPACING_BY_LENGTH`]) if that is longer. Under a steady
/// trickle of pods rounds are short and a pod waits at most the window;
/// under a burst the rounds grow with what they decide, each gathers more
/// pods, and the API server keeps the CPU it needs for the bindings
/// (docs/BENCHMARKS.md, "Pods at a steady rate").
fn spacing(gather_window: Duration, round_took: Duration) -> Duration {
    gather_window.max((round_took * SPACING_PER_ROUND_LENGTH).min(MOST_SPACING_BY_LENGTH))
}

// === impl Rounds ===

impl Rounds {
    /// Waits for the first full list of every kind, then, while this
    /// replica leads, runs a round after each change (at least a gather
    /// window after the previous round started), when a problem found
    /// will have stood long enough to be told, and at least every
    /// `resync`. A round in flight when the lead is lost stops at once:
    /// like a crash, the write order leaves nothing the next leader cannot
    /// finish.
    pub async fn run(mut self) {
        self.shared.wait_listed(self.watched_kinds).await;
        tracing::info!(
            policies = ?self.policies.names(),
            "Index ready"
        );
        if self.policies.get(&self.default_policy).is_none() {
            tracing::warn!(
                default_policy = %self.default_policy,
                "The default policy is not loaded: pods of GPUResources that name no policy wait"
            );
        }
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
            let started = tokio::time::Instant::now();
            let mut leader = self.leader.clone();
            tokio::select! {
                () = self.round(round) => {}
                _ = leader.wait_for(|leading| !*leading) => {
                    tracing::warn!(round, "Lost the lead during a round; stopped it");
                    self.applier.stop();
                    continue;
                }
            }
            let took = started.elapsed();
            // At the latest at the resync, or when a problem found will
            // have stood long enough to be told.
            let resync = tokio::time::Instant::now() + self.resync;
            let next = self
                .reporter
                .next_due()
                .map_or(resync, |due| due.min(resync));
            tokio::select! {
                () = self.shared.changed.notified() => {}
                () = tokio::time::sleep_until(next) => {}
                _ = leader.wait_for(|leading| !*leading) => {
                    self.applier.stop();
                    continue;
                }
            }
            // Rounds start at least a gather window apart: under a burst,
            // the pods that arrive during a round and the rest of its window
            // are decided together by the next one; after a quiet spell, a
            // change is decided at once.
            tokio::time::sleep_until(started + spacing(self.gather_window, took)).await;
        }
    }

    /// One round.
    pub async fn round(&mut self, round: u64) {
        let started = Instant::now();
        let RoundStart {
            releases,
            moves,
            unfinished,
            policies,
            resources: views,
            reservations_done,
            evictions,
            stale_nominations,
            extended_claims,
        } = self.shared.index().round_start();
        self.applier.drop_stale(stale_nominations).await;
        self.applier.make_extended_claims(extended_claims).await;
        self.applier.evict(evictions);
        self.applier.clear_reservations(reservations_done).await;
        self.applier.finalize(&views).await;
        self.applier.move_allocations(moves).await;
        self.applier.release(releases).await;
        self.applier.finish(unfinished);
        let mut outcome = RoundOutcome::default();
        let mut bound = 0;
        // One policy at a time, each on a snapshot taken after the previous
        // one's allocations were recorded: two policies never get the same
        // free GPU.
        for name in policies {
            let built = Instant::now();
            let mut snapshot = self.shared.index().snapshot(&name, round, now_ms());
            self.metrics.phase("snapshot", built.elapsed());
            if snapshot.snapshot.pending.is_empty() {
                continue;
            }
            let Some(policy) = self.policies.get(&name) else {
                let message = self.not_loaded(&name);
                let waiting = plan_all_waiting(&snapshot, "no-policy", now_ms());
                let resources = resources_of(&snapshot);
                outcome.policy_error(&name, resources, Reason::PolicyNotFound, &message, waiting);
                continue;
            };
            snapshot.snapshot.config = policy.config.clone();
            bound += self.decide(&policy, snapshot, &mut outcome).await;
        }
        self.reporter.report(outcome);
        self.metrics.round();
        if bound > 0 {
            tracing::info!(round, binding = bound, elapsed = ?started.elapsed(), "Round");
        } else {
            tracing::debug!(round, elapsed = ?started.elapsed(), "Round");
        }
    }

    /// Why no policy named `name` decides: what is loaded, and what
    /// became of the version named so (rejected, or a shadow).
    fn not_loaded(&self, name: &str) -> String {
        let loaded = self.policies.names();
        let rejected = self
            .policies
            .rejection(name)
            .map(|reason| format!("; its latest version was rejected: {reason}"))
            .unwrap_or_default();
        let shadow = self
            .policies
            .shadow(name)
            .map(|(primary, _)| {
                format!(
                    "; {name} is loaded as a shadow of {primary} (annotation wasmgpu.io/shadow-of): shadows decide for no pod"
                )
            })
            .unwrap_or_default();
        format!(
            "no policy named {name:?} is loaded (loaded: {}){rejected}{shadow}; its pods wait",
            loaded.join(", ")
        )
    }

    /// Calls `policy` on `snapshot`, checks its decisions, starts the
    /// bindings of the valid ones; returns how many started.
    async fn decide(
        &self,
        policy: &Arc<ActivePolicy>,
        snapshot: HostSnapshot,
        outcome: &mut RoundOutcome,
    ) -> usize {
        let resources = resources_of(&snapshot);
        self.record(policy, &snapshot);
        // What waits should the call fail (the snapshot goes into the call).
        let if_failed = plan_all_waiting(&snapshot, "policy-failed", now_ms());
        let (policy, snapshot, round) = match self.call_or_fall_back(policy, snapshot).await {
            Ok(called) => called,
            Err(Some(message)) => {
                outcome.policy_error(
                    &policy.name,
                    resources,
                    Reason::PolicyFailed,
                    &message,
                    if_failed,
                );
                return 0;
            }
            Err(None) => return 0,
        };
        let policy = &policy;
        let validated = Instant::now();
        let mut verdict = validate_host(&snapshot, &round.decisions);
        self.metrics.phase("validation", validated.elapsed());
        self.count(policy, &snapshot, &verdict, round.stats.call);
        let mut plan = plan_verdict(&policy.name, &snapshot, &verdict);
        let waiting = plan_waiting(&snapshot, &verdict, now_ms());
        let refused = std::mem::take(&mut plan.refused_resources);
        outcome.policy_decided(&policy.name, resources, waiting, refused);
        for message in &plan.unnamed_refusals {
            tracing::warn!(%message, "Decision refused");
        }
        self.send(plan.events);
        let shadows = self.policies.shadows_of(&policy.name);
        let for_shadows = (!shadows.is_empty()).then(|| verdict.accepted.clone());
        let writes = Instant::now();
        let preempting = std::mem::take(&mut verdict.preempting);
        self.applier.preempt(policy, &snapshot, preempting).await;
        let started = self.applier.assign(policy, &snapshot, verdict.accepted);
        self.metrics.phase("writes", writes.elapsed());
        // Only now, and in the background: the bindings never wait for a
        // shadow, and nothing it decides is applied.
        if let Some(accepted) = for_shadows {
            self.shadows.start(policy, shadows, snapshot, accepted);
        }
        started
    }

    /// Keeps a copy of the round's snapshot when `policy`'s ConfigMap asks
    /// for recorded rounds (serialized and compressed on the blocking pool).
    fn record(&self, policy: &ActivePolicy, snapshot: &HostSnapshot) {
        if self.recorder.wants(&policy.name) {
            let (recorder, name, copy) = (
                Arc::clone(&self.recorder),
                policy.name.clone(),
                snapshot.clone(),
            );
            tokio::task::spawn_blocking(move || recorder.record(&name, copy));
        }
    }

    /// The call's and the verdict's metrics, and a debug line.
    fn count(
        &self,
        policy: &ActivePolicy,
        snapshot: &HostSnapshot,
        verdict: &Verdict,
        call: Duration,
    ) {
        self.metrics.policy_call(&policy.name, call);
        self.metrics.phase("policy-call", call);
        for (outcome, count) in [
            ("accepted", verdict.accepted.len()),
            ("waiting", verdict.waiting.len()),
            ("rejected", verdict.rejected.len()),
            ("refused", verdict.refused.len()),
            ("preempting", verdict.preempting.len()),
        ] {
            self.metrics.decisions(&policy.name, outcome, count);
        }
        tracing::debug!(
            policy = %policy.name,
            pending = snapshot.snapshot.pending.len(),
            accepted = verdict.accepted.len(),
            waiting = verdict.waiting.len(),
            rejected = verdict.rejected.len(),
            refused = verdict.refused.len(),
            call = ?call,
            "Decided"
        );
    }

    /// Calls `policy`; when it fails and `--on-policy-failure last-good`
    /// names an earlier version, calls that one on the same snapshot. The
    /// error is what the pods are told (none when a call panicked).
    async fn call_or_fall_back(
        &self,
        policy: &Arc<ActivePolicy>,
        snapshot: HostSnapshot,
    ) -> Result<(Arc<ActivePolicy>, HostSnapshot, wasmgpu_engine::Round), Option<String>> {
        let (mut snapshot, result) = call(policy, snapshot).await.ok_or(None)?;
        let error = match result {
            Ok(round) => return Ok((Arc::clone(policy), snapshot, round)),
            Err(error) => error,
        };
        self.metrics.policy_failure(&policy.name, error.kind());
        tracing::warn!(policy = %policy.name, digest = %policy.loaded.digest(), kind = error.kind(), %error, "Policy failed");
        let digest = policy.loaded.digest().to_string();
        let last_good = match self.on_failure {
            OnPolicyFailure::Wait => None,
            OnPolicyFailure::LastGood => self
                .policies
                .previous(&policy.name)
                .filter(|p| p.loaded.digest() != policy.loaded.digest()),
        };
        let Some(last_good) = last_good else {
            let message = failure_message(&policy.name, &digest, &error.to_string(), None);
            return Err(Some(message));
        };
        snapshot.snapshot.config = last_good.config.clone();
        let (snapshot, result) = call(&last_good, snapshot).await.ok_or(None)?;
        match result {
            Ok(round) => {
                tracing::warn!(policy = %policy.name, digest = %last_good.loaded.digest(), "Round retried with the last good version");
                Ok((last_good, snapshot, round))
            }
            Err(again) => Err(Some(failure_message(
                &policy.name,
                &digest,
                &error.to_string(),
                Some((last_good.loaded.digest().as_str(), &again.to_string())),
            ))),
        }
    }

    /// Sends a round's Events; those sent once per pod and note (a gang
    /// member told why it waits) are skipped when told before.
    fn send(&self, events: Vec<PodEvent>) {
        let mut told = wasmgpu_support::lock(&self.waits_told);
        if told.len() > 100_000 {
            told.clear();
        }
        for event in events {
            if event.once && !told.insert((event.pod.to_string(), event.note.clone())) {
                continue;
            }
            if event.reason == Reason::DecisionRefused {
                tracing::warn!(pod = %event.pod, message = %event.note, "Decision refused");
            }
            let uid = self.shared.index().pod_uid(&event.pod).map(str::to_string);
            let reference = pod_ref(&event.pod, uid.as_deref());
            if event.reason == Reason::Waiting {
                // One per waiting pod, like `Allocated`: rate-limited, and
                // told again in a later round when not sent now.
                let (pod, note) = (event.pod.to_string(), event.note.clone());
                if !self
                    .events
                    .per_pod(reference, event.reason, "Allocate", event.note)
                {
                    told.remove(&(pod, note));
                }
            } else if event.warning {
                self.events
                    .warning(reference, event.reason, "Allocate", event.note);
            } else {
                self.events
                    .normal(reference, event.reason, "Allocate", event.note);
            }
        }
    }
}

/// Calls `policy` on `snapshot` (with the labels it asks for) on the
/// blocking pool; hands the snapshot back. `None` when the call panicked
/// (the snapshot is lost with it).
async fn call(
    policy: &Arc<ActivePolicy>,
    mut snapshot: HostSnapshot,
) -> Option<(HostSnapshot, wasmgpu_engine::Result<wasmgpu_engine::Round>)> {
    let policy = Arc::clone(policy);
    let call = tokio::task::spawn_blocking(move || {
        let given = snapshot.for_policy(&policy.loaded.info().label_keys);
        let result = policy.loaded.allocate(given);
        (snapshot, result)
    });
    match call.await {
        Ok(done) => Some(done),
        Err(error) => {
            tracing::error!(%error, "Policy call panicked");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_are_a_window_apart_or_three_times_their_length_up_to_a_second() {
        let ms = Duration::from_millis;
        // Short rounds: the window.
        assert_eq!(spacing(ms(10), ms(2)), ms(10));
        // Long rounds (a burst, a large cluster): three times their length.
        assert_eq!(spacing(ms(10), ms(8)), ms(24));
        assert_eq!(spacing(ms(10), ms(60)), ms(180));
        // A longer window still wins.
        assert_eq!(spacing(ms(200), ms(60)), ms(200));
        // Rounds of a third of a second and more: a second from the start
        // at most, so a round of a second or more is followed at once.
        assert_eq!(spacing(ms(10), ms(500)), ms(1000));
        assert_eq!(spacing(ms(10), ms(1500)), ms(1000));
        assert_eq!(spacing(ms(2000), ms(1500)), ms(2000));
    }
}
