//! Prometheus metrics of the controller, served at `/metrics`.
//!
//! docs/CONTROLLER.md#metrics lists every metric with its labels;
//! `host/tests/docs.rs` compares that list with [`Metrics::names`] (every
//! metric registered) and fails when the two differ.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

use wasmgpu_index::{GpuState, TenantView};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitingLabels {
    policy: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    policy: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    policy: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LoadLabels {
    policy: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    kind: &'static str,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UnsentEventLabels {
    reason: &'static str,
    why: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    shadow: String,
    primary: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowOutcomeLabels {
    shadow: String,
    primary: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowResultLabels {
    shadow: String,
    primary: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    node: String,
    model: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
    /// `holding`, `waiting`, `quota` or `limit`.
    state: &'static str,
}

/// The prefix of every metric's name.
const PREFIX: &str = "wasmgpu";

/// Registers metrics and remembers the name each is scraped under.
struct Registrar {
    registry: Registry,
    names: Vec<String>,
}

impl Registrar {
    fn new(registry: Registry) -> Self {
        Self {
            registry,
            names: Vec::new(),
        }
    }

    /// Registers `metric` and hands it back, to be kept and updated.
    fn add<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M {
        let suffix = match metric.metric_type() {
            MetricType::Counter => "_total",
            _ => "",
        };
        self.names.push(format!("{PREFIX}_{name}{suffix}"));
        self.registry.register(name, help, metric.clone());
        metric
    }
}

/// The controller's metrics. Cheap to clone; all clones count together.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// Every metric registered, as scraped: `wasmgpu_rounds_total`.
    names: Arc<[String]>,
    round: RoundMetrics,
    policy: PolicyMetrics,
    api: ApiMetrics,
}
/// What rounds decide and how long they take.
#[derive(Clone)]
struct RoundMetrics {
    rounds: Counter,
    decisions: Family<OutcomeLabels, Counter>,
    pods_bound: Counter,
    preemption_backoffs: Counter,
    phases: Family<PhaseLabels, Histogram>,
    binding: Histogram,
    pods_waiting: Family<WaitingLabels, Gauge>,
    oldest_waiting: Family<PolicyLabels, Gauge<f64, AtomicU64>>,
    gpus: Family<GpuLabels, Gauge>,
    tenant_gpus: Family<TenantLabels, Gauge>,
}

/// Policies: calls, failures, loads and pulls, shadows.
#[derive(Clone)]
struct PolicyMetrics {
    policy_call: Family<PolicyLabels, Histogram>,
    policy_failures: Family<FailureLabels, Counter>,
    policy_loads: Family<LoadLabels, Counter>,
    component_pulls: Family<LoadLabels, Counter>,
    shadow_placements: Family<ShadowOutcomeLabels, Counter>,
    shadow_rounds: Family<ShadowResultLabels, Counter>,
    shadow_call: Family<ShadowLabels, Histogram>,
}

/// The API server: leadership, writes, watches, Events.
#[derive(Clone)]
struct ApiMetrics {
    leader: Gauge,
    writes: Family<WriteLabels, Counter>,
    watch_connected: Family<KindLabels, Gauge>,
    watch_failures: Family<KindLabels, Counter>,
    events_unsent: Family<UnsentEventLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

// === impl Metrics ===

impl Metrics {
    /// Every metric, registered and at zero.
    pub fn new() -> Self {
        let mut registrar = Registrar::new(Registry::with_prefix(PREFIX));
        let round = RoundMetrics::register(&mut registrar);
        let policy = PolicyMetrics::register(&mut registrar);
        let api = ApiMetrics::register(&mut registrar);
        Self {
            names: registrar.names.into(),
            registry: Arc::new(registrar.registry),
            round,
            policy,
            api,
        }
    }

    /// The name of every metric, as scraped (counters with `_total`),
    /// whether or not it has a sample yet (a family without one is not
    /// encoded).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// A round ran.
    pub fn round(&self) {
        self.round.rounds.inc();
    }

    /// A preemptor backs off: a victim's eviction was refused.
    pub fn preemption_backoff(&self) {
        self.round.preemption_backoffs.inc();
    }

    /// A policy call took `elapsed`.
    pub fn policy_call(&self, policy: &str, elapsed: Duration) {
        self.policy
            .policy_call
            .get_or_create(&PolicyLabels {
                policy: policy.into(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// A policy call failed with an error of `kind`.
    pub fn policy_failure(&self, policy: &str, kind: &'static str) {
        self.policy
            .policy_failures
            .get_or_create(&FailureLabels {
                policy: policy.into(),
                kind,
            })
            .inc();
    }

    /// `count` decisions of `policy` ended as `outcome`.
    pub fn decisions(&self, policy: &str, outcome: &'static str, count: usize) {
        self.round
            .decisions
            .get_or_create(&OutcomeLabels {
                policy: policy.into(),
                outcome,
            })
            .inc_by(count as u64);
    }

    /// `count` pods were bound.
    pub fn pods_bound(&self, count: usize) {
        self.round.pods_bound.inc_by(count as u64);
    }

    /// A version of `policy` was loaded (`loaded`) or refused (`rejected`).
    pub fn policy_load(&self, policy: &str, result: &'static str) {
        self.policy
            .policy_loads
            .get_or_create(&LoadLabels {
                policy: policy.into(),
                result,
            })
            .inc();
    }

    /// The component of `policy` came from `result` (`registry`, `disk`,
    /// `memory`), or could not be pulled for that reason.
    pub fn component_pull(&self, policy: &str, result: &'static str) {
        self.policy
            .component_pulls
            .get_or_create(&LoadLabels {
                policy: policy.into(),
                result,
            })
            .inc();
    }

    /// Replaces the GPU gauges with `states`.
    pub fn gpus(&self, states: &[GpuState]) {
        self.round.gpus.clear();
        for state in states {
            self.round
                .gpus
                .get_or_create(&GpuLabels {
                    node: state.node.clone(),
                    model: state.model.clone(),
                    state: state.state,
                })
                .set(i64::from(state.count));
        }
    }

    /// Replaces the tenant gauges with `tenants`.
    pub fn tenants(&self, tenants: &[TenantView]) {
        self.round.tenant_gpus.clear();
        for t in tenants {
            let states = [
                ("holding", Some(t.holding)),
                ("waiting", Some(t.waiting)),
                ("quota", Some(t.quota)),
                ("limit", t.limit),
            ];
            for (state, value) in states {
                if let Some(value) = value {
                    self.round
                        .tenant_gpus
                        .get_or_create(&TenantLabels {
                            tenant: t.name.clone(),
                            state,
                        })
                        .set(i64::from(value));
                }
            }
        }
    }

    /// What is still pending after a round, per policy that had pending
    /// pods: `(policy, [(reason, pods)], age of the oldest in ms)`. Replaces
    /// what the previous round said (a policy with nothing pending has no
    /// sample).
    pub fn waiting<'a>(
        &self,
        per_policy: impl IntoIterator<Item = (&'a str, &'a [(&'static str, usize)], Option<u64>)>,
    ) {
        self.round.pods_waiting.clear();
        self.round.oldest_waiting.clear();
        for (policy, by_reason, oldest_ms) in per_policy {
            for &(reason, pods) in by_reason {
                self.round
                    .pods_waiting
                    .get_or_create(&WaitingLabels {
                        policy: policy.into(),
                        reason,
                    })
                    .set(i64::try_from(pods).unwrap_or(i64::MAX));
            }
            if let Some(ms) = oldest_ms {
                self.round
                    .oldest_waiting
                    .get_or_create(&PolicyLabels {
                        policy: policy.into(),
                    })
                    .set(ms as f64 / 1000.0);
            }
        }
    }

    /// An API write of `kind` ended with `result` (`ok`, an HTTP status
    /// code, `timeout`, `error`).
    pub fn write(&self, kind: &'static str, result: impl Into<String>) {
        self.api
            .writes
            .get_or_create(&WriteLabels {
                kind,
                result: result.into(),
            })
            .inc();
    }

    /// An Event of `reason` was not sent: `rate-limited` or `queue-full`.
    pub fn event_unsent(&self, reason: &'static str, why: &'static str) {
        self.api
            .events_unsent
            .get_or_create(&UnsentEventLabels { reason, why })
            .inc();
    }

    /// A phase of a round took `elapsed`.
    pub fn phase(&self, phase: &'static str, elapsed: Duration) {
        self.round
            .phases
            .get_or_create(&PhaseLabels { phase })
            .observe(elapsed.as_secs_f64());
    }

    /// A binding was answered `elapsed` after its decision was validated.
    pub fn binding(&self, elapsed: Duration) {
        self.round.binding.observe(elapsed.as_secs_f64());
    }

    /// Whether this replica leads.
    pub fn leader(&self, leading: bool) {
        self.api.leader.set(i64::from(leading));
    }

    /// Whether the watch of `kind` is connected.
    pub fn watch_connected(&self, kind: &'static str, connected: bool) {
        self.api
            .watch_connected
            .get_or_create(&KindLabels { kind })
            .set(i64::from(connected));
    }

    /// `count` pods of a round of shadow `shadow` of `primary` ended as
    /// `outcome`.
    pub fn shadow_placements(
        &self,
        shadow: &str,
        primary: &str,
        outcome: &'static str,
        count: u64,
    ) {
        self.policy
            .shadow_placements
            .get_or_create(&ShadowOutcomeLabels {
                shadow: shadow.into(),
                primary: primary.into(),
                outcome,
            })
            .inc_by(count);
    }

    /// A round of shadow `shadow` of `primary` was `compared`, `failed` or
    /// `skipped`.
    pub fn shadow_round(&self, shadow: &str, primary: &str, result: &'static str) {
        self.policy
            .shadow_rounds
            .get_or_create(&ShadowResultLabels {
                shadow: shadow.into(),
                primary: primary.into(),
                result,
            })
            .inc();
    }

    /// A call of shadow `shadow` of `primary` took `elapsed`.
    pub fn shadow_call(&self, shadow: &str, primary: &str, elapsed: Duration) {
        self.policy
            .shadow_call
            .get_or_create(&ShadowLabels {
                shadow: shadow.into(),
                primary: primary.into(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// A list or watch of `kind` failed.
    pub fn watch_failure(&self, kind: &'static str) {
        self.api
            .watch_failures
            .get_or_create(&KindLabels { kind })
            .inc();
    }
}

impl RoundMetrics {
    fn register(registrar: &mut Registrar) -> Self {
        Self {
            rounds: registrar.add(
                "rounds",
                "Scheduling rounds run",
                Counter::default(),
            ),
            decisions: registrar.add(
                "decisions",
                "Policy decisions by outcome after the host's check",
                Family::<OutcomeLabels, Counter>::default(),
            ),
            pods_bound: registrar.add(
                "pods_bound",
                "Pods bound to a node",
                Counter::default(),
            ),
            preemption_backoffs: registrar.add(
                "preemption_backoffs",
                "Preemptions dropped because a victim's eviction was refused; the preemptor then preempts no one for a while (10 s, doubling up to 5 min)",
                Counter::default(),
            ),
            phases: registrar.add(
                "round_phase_seconds",
                "Time of each phase of a round: snapshot build, policy call, validation, writes started",
                Family::<PhaseLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
        }),
            ),
            binding: registrar.add(
                "binding_seconds",
                "Time from a decision's validation to its binding's answer",
                Histogram::new(exponential_buckets(0.000_5, 2.0, 16)),
            ),
            pods_waiting: registrar.add(
                "pods_waiting",
                "Pods still pending after the latest round, by policy and why: policy-wait, gang, rejected, refused, preempting (its victims still going), unmentioned, policy-failed, no-policy",
                Family::<WaitingLabels, Gauge>::default(),
            ),
            oldest_waiting: registrar.add(
                "pod_wait_oldest_seconds",
                "Age of the oldest pod still pending after the latest round, by policy",
                Family::<PolicyLabels, Gauge<f64, AtomicU64>>::default(),
            ),
            gpus: registrar.add(
                "gpus",
                "GPUs by node, model and state",
                Family::<GpuLabels, Gauge>::default(),
            ),
            tenant_gpus: registrar.add(
                "tenant_gpus",
                "GPUs per GPUTenant: holding, waiting (asked by pending pods), quota and limit (when set)",
                Family::<TenantLabels, Gauge>::default(),
            ),
        }
    }
}

impl PolicyMetrics {
    fn register(registrar: &mut Registrar) -> Self {
        Self {
            policy_call: registrar.add(
                "policy_call_seconds",
                "Time of one allocate call (instantiate, marshal, run)",
                Family::<PolicyLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
        }),
            ),
            policy_failures: registrar.add(
                "policy_failures",
                "Policy calls that failed, by kind",
                Family::<FailureLabels, Counter>::default(),
            ),
            policy_loads: registrar.add(
                "policy_loads",
                "Policy versions loaded or rejected",
                Family::<LoadLabels, Counter>::default(),
            ),
            component_pulls: registrar.add(
                "component_pulls",
                "Policy components named by OCI reference: where each came from, or why it could not be pulled",
                Family::<LoadLabels, Counter>::default(),
            ),
            shadow_placements: registrar.add(
                "shadow_placements",
                "Pods a shadow policy decided, by how its decision compared with its primary's",
                Family::<ShadowOutcomeLabels, Counter>::default(),
            ),
            shadow_rounds: registrar.add(
                "shadow_rounds",
                "Rounds of a shadow policy: compared, failed, or skipped (its previous call still ran)",
                Family::<ShadowResultLabels, Counter>::default(),
            ),
            shadow_call: registrar.add(
                "shadow_call_seconds",
                "Time of one allocate call of a shadow policy (off the round's path)",
                Family::<ShadowLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
        }),
            ),
        }
    }
}

impl ApiMetrics {
    fn register(registrar: &mut Registrar) -> Self {
        Self {
            leader: registrar.add(
                "leader",
                "1 while this replica leads and applies decisions",
                Gauge::default(),
            ),
            writes: registrar.add(
                "api_writes",
                "API writes by kind and result (ok, HTTP status, timeout, error)",
                Family::<WriteLabels, Counter>::default(),
            ),
            watch_connected: registrar.add(
                "watch_connected",
                "1 while the watch of the kind is connected (its last list or watch succeeded)",
                Family::<KindLabels, Gauge>::default(),
            ),
            watch_failures: registrar.add(
                "watch_failures",
                "Failed lists and watches, by kind",
                Family::<KindLabels, Counter>::default(),
            ),
            events_unsent: registrar.add(
                "events_unsent",
                "Events not sent, by reason and why (rate-limited: over --allocated-events-per-second; queue-full)",
                Family::<UnsentEventLabels, Counter>::default(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_what_was_counted() {
        let metrics = Metrics::new();
        metrics.round();
        metrics.decisions("binpack", "accepted", 3);
        metrics.policy_failure("spread", "out-of-fuel");
        metrics.policy_call("binpack", Duration::from_millis(2));
        metrics.gpus(&[GpuState {
            node: "n1".into(),
            model: "H100".into(),
            state: "free",
            count: 2,
        }]);
        metrics.tenants(&[TenantView {
            name: "a".into(),
            holding: 2,
            ..TenantView::default()
        }]);
        metrics.leader(true);
        metrics.write("binding", "ok");
        metrics.write("binding", "409");
        metrics.phase("validation", Duration::from_micros(300));
        metrics.watch_connected("Pod", false);
        metrics.watch_failure("Pod");
        metrics.event_unsent("Allocated", "rate-limited");
        metrics.shadow_placements("spread", "binpack", "other-node", 2);
        metrics.shadow_round("spread", "binpack", "skipped");
        metrics.shadow_call("spread", "binpack", Duration::from_millis(1));
        let text = metrics.encode();
        for line in [
            "wasmgpu_rounds_total 1",
            "wasmgpu_decisions_total{policy=\"binpack\",outcome=\"accepted\"} 3",
            "wasmgpu_policy_failures_total{policy=\"spread\",kind=\"out-of-fuel\"} 1",
            "wasmgpu_policy_call_seconds_count{policy=\"binpack\"} 1",
            "wasmgpu_gpus{node=\"n1\",model=\"H100\",state=\"free\"} 2",
            "wasmgpu_leader 1",
            "wasmgpu_api_writes_total{kind=\"binding\",result=\"409\"} 1",
            "wasmgpu_round_phase_seconds_count{phase=\"validation\"} 1",
            "wasmgpu_watch_connected{kind=\"Pod\"} 0",
            "wasmgpu_watch_failures_total{kind=\"Pod\"} 1",
            "wasmgpu_events_unsent_total{reason=\"Allocated\",why=\"rate-limited\"} 1",
            "wasmgpu_shadow_placements_total{shadow=\"spread\",primary=\"binpack\",outcome=\"other-node\"} 2",
            "wasmgpu_shadow_rounds_total{shadow=\"spread\",primary=\"binpack\",result=\"skipped\"} 1",
            "wasmgpu_shadow_call_seconds_count{shadow=\"spread\",primary=\"binpack\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        // A GPU that changed state is not counted twice.
        metrics.gpus(&[GpuState {
            node: "n1".into(),
            model: "H100".into(),
            state: "allocated",
            count: 1,
        }]);
        let text = metrics.encode();
        assert!(!text.contains("state=\"free\""), "{text}");
    }

    /// The names of [`Metrics::names`] are those the registry encodes,
    /// once every metric has a sample.
    #[test]
    fn names_are_those_the_registry_encodes() {
        let metrics = Metrics::new();
        metrics.round();
        metrics.decisions("binpack", "accepted", 1);
        metrics.pods_bound(1);
        metrics.policy_call("binpack", Duration::from_millis(1));
        metrics.policy_failure("binpack", "trap");
        metrics.policy_load("binpack", "loaded");
        metrics.component_pull("binpack", "registry");
        metrics.gpus(&[GpuState {
            node: "n1".into(),
            model: "H100".into(),
            state: "free",
            count: 1,
        }]);
        metrics.tenants(&[TenantView {
            name: "a".into(),
            holding: 2,
            ..TenantView::default()
        }]);
        metrics.leader(true);
        metrics.write("binding", "ok");
        metrics.phase("snapshot", Duration::from_micros(10));
        metrics.binding(Duration::from_millis(3));
        metrics.watch_connected("Pod", true);
        metrics.watch_failure("Pod");
        metrics.event_unsent("Allocated", "rate-limited");
        metrics.shadow_placements("spread", "binpack", "same", 1);
        metrics.shadow_round("spread", "binpack", "compared");
        metrics.shadow_call("spread", "binpack", Duration::from_millis(1));
        metrics.waiting([("binpack", &[("gang", 2)][..], Some(90_000))]);
        let text = metrics.encode();
        assert!(
            text.contains("wasmgpu_pods_waiting{policy=\"binpack\",reason=\"gang\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("wasmgpu_pod_wait_oldest_seconds{policy=\"binpack\"} 90.0"),
            "{text}"
        );
        let encoded: std::collections::BTreeSet<String> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|rest| rest.split_once(' '))
            .map(|(name, kind)| match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_string(),
            })
            .collect();
        let names: std::collections::BTreeSet<String> = metrics.names().iter().cloned().collect();
        assert_eq!(
            names, encoded,
            "a metric without a sample here is not encoded: give each new metric one in this test"
        );
    }
}
