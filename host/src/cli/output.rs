//! What commands print with `--output json`: one format for every command.
//!
//! Each command serialises a named type of this file, never the contract's
//! generated types: keys are camelCase, kinds are lower-case words
//! (`"kind": "assign"`), durations are numbers with their unit in the key
//! (`callMicros`), times are RFC 3339. `wasmgpu policy output-schema
//! COMMAND` prints the JSON Schema of each, generated from these types, and
//! `docs/POLICIES.md` ("JSON output") describes them.

use std::collections::HashSet;
use std::time::Duration;

use clap::ValueEnum;
use schemars::JsonSchema;
use serde::Serialize;

use wasmgpu_agent::Reading;
use wasmgpu_api::GPUNodeStatus;
use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::types::{Decision, Sharing};
use wasmgpu_contract::validate::Verdict;
use wasmgpu_engine::{LoadedPolicy, RoundStats};

/// The commands with JSON output, for `wasmgpu policy output-schema`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum SchemaOf {
    /// `wasmgpu policy check --output json`
    Check,
    /// `wasmgpu policy run --output json`
    Run,
    /// `wasmgpu policy compare --output json`
    Compare,
    /// `wasmgpu policy bench --output json`
    Bench,
    /// `wasmgpu agent --once --output json`
    AgentOnce,
}

impl SchemaOf {
    /// The JSON Schema of that command's output.
    pub(crate) fn schema(self) -> schemars::Schema {
        match self {
            SchemaOf::Check => schemars::schema_for!(CheckOutput),
            SchemaOf::Run => schemars::schema_for!(RunOutput),
            SchemaOf::Compare => schemars::schema_for!(CompareOutput),
            SchemaOf::Bench => schemars::schema_for!(BenchOutput),
            SchemaOf::AgentOnce => schemars::schema_for!(AgentOnceOutput),
        }
    }
}

// === policy check ===

/// `wasmgpu policy check --output json`: what a policy component is.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CheckOutput {
    /// The policy's name, from `describe()`.
    pub name: String,
    /// Its version, from `describe()`.
    pub version: String,
    /// What it does, from `describe()`.
    pub description: String,
    /// `sha256:<hex>` of the component.
    pub digest: String,
    /// The component's size.
    pub size_bytes: u64,
    /// What it imports (WASI interfaces, `log`), sorted.
    pub imports: Vec<String>,
}

impl CheckOutput {
    pub(crate) fn of(policy: &LoadedPolicy) -> Self {
        let info = policy.info();
        CheckOutput {
            name: info.name.clone(),
            version: info.version.clone(),
            description: info.description.clone(),
            digest: policy.digest().to_string(),
            size_bytes: policy.size() as u64,
            imports: policy.imports(),
        }
    }
}

// === policy run ===

/// `wasmgpu policy run --output json`: one round and the host's verdict.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunOutput {
    /// The policy that decided.
    pub policy: PolicyRef,
    /// The snapshot it decided on.
    pub snapshot: SnapshotSummary,
    /// Its decisions, in its order, each with the host's verdict.
    pub decisions: Vec<DecisionOutput>,
    /// The decisions, counted.
    pub summary: DecisionCounts,
    /// Each gang of the snapshot and what the round did with it.
    pub gangs: Vec<GangOutcome>,
    /// What each namespace with pending pods or holdings holds before the
    /// round and gets in it (fair-share policies serve tenants of these).
    pub namespaces: Vec<NamespaceHoldings>,
    /// What the call cost.
    pub stats: Stats,
}

/// A policy, as outputs name it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PolicyRef {
    /// From `describe()`.
    pub name: String,
    /// From `describe()`.
    pub version: String,
    /// `sha256:<hex>` of the component.
    pub digest: String,
}

impl PolicyRef {
    pub(crate) fn of(policy: &LoadedPolicy) -> Self {
        PolicyRef {
            name: policy.info().name.clone(),
            version: policy.info().version.clone(),
            digest: policy.digest().to_string(),
        }
    }
}

/// The size of a snapshot.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SnapshotSummary {
    /// The snapshot's `round`.
    pub round: u64,
    /// Candidate nodes.
    pub nodes: usize,
    /// GPUs on those nodes.
    pub gpus: usize,
    /// Pending pods.
    pub pending: usize,
}

impl SnapshotSummary {
    pub(crate) fn of(host: &HostSnapshot) -> Self {
        let snapshot = &host.snapshot;
        SnapshotSummary {
            round: snapshot.round,
            nodes: snapshot.nodes.len(),
            gpus: snapshot.nodes.iter().map(|n| n.gpus.len()).sum(),
            pending: snapshot.pending.len(),
        }
    }
}

/// One decision of a policy and the host's verdict on it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DecisionOutput {
    /// The decision, as the policy made it.
    #[serde(flatten)]
    pub decision: DecisionBody,
    /// `valid`: the host would apply it (an assignment) or record it (a
    /// wait or reject); `refused`: see `refusal`.
    pub verdict: VerdictKind,
    /// Why the host refused it; only when `verdict` is `refused`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Refusal>,
}

/// What a policy decided for one pod, by `kind`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(crate) enum DecisionBody {
    /// Place the pod now.
    Assign {
        /// The pod, `namespace/name`.
        pod: String,
        /// The node chosen.
        node: String,
        /// UUIDs of the GPUs chosen on that node.
        gpus: Vec<String>,
    },
    /// Leave the pod pending this round.
    Wait {
        /// The pod, `namespace/name`.
        pod: String,
        /// Why, for users.
        reason: String,
    },
    /// The request can never be satisfied as posed.
    Reject {
        /// The pod, `namespace/name`.
        pod: String,
        /// Why, for users.
        reason: String,
    },
    /// Evict the victims, then place the pod.
    Preempt {
        /// The pod, `namespace/name`.
        pod: String,
        /// The node chosen.
        node: String,
        /// UUIDs of the GPUs it takes once the victims are gone.
        gpus: Vec<String>,
        /// The pods to evict, `namespace/name`.
        victims: Vec<String>,
    },
}

impl DecisionBody {
    /// `decision` by name: the positions it gives resolved in `snapshot`
    /// (`#N` where a position names nothing; the verdict says why).
    fn of(host: &HostSnapshot, decision: &Decision) -> Self {
        let snapshot = &host.snapshot;
        let pod = |p: u32| {
            snapshot
                .pending
                .get(p as usize)
                .map_or(format!("#{p}"), |r| r.pod.clone())
        };
        let placed = |a: &wasmgpu_contract::Assignment| {
            let node = snapshot
                .nodes
                .get(a.node as usize)
                .map_or(format!("#{}", a.node), |n| n.name.clone());
            let gpus = a
                .gpus
                .iter()
                .chain(a.claims.iter().flat_map(|c| &c.gpus))
                .map(|&g| host.uuid(a.node, g).map_or(format!("#{g}"), str::to_owned))
                .collect();
            (pod(a.pod), node, gpus)
        };
        match decision {
            Decision::Assign(a) => {
                let (pod, node, gpus) = placed(a);
                DecisionBody::Assign { pod, node, gpus }
            }
            Decision::Preempt(p) => {
                let (pod, node, gpus) = placed(&p.assignment);
                let victims = snapshot.running_names(&p.victims);
                DecisionBody::Preempt {
                    pod,
                    node,
                    gpus,
                    victims,
                }
            }
            Decision::Wait(d) => DecisionBody::Wait {
                pod: pod(d.pod),
                reason: d.reason.clone(),
            },
            Decision::Reject(d) => DecisionBody::Reject {
                pod: pod(d.pod),
                reason: d.reason.clone(),
            },
        }
    }
}

/// The host's verdict on one decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum VerdictKind {
    /// The decision is possible.
    Valid,
    /// The decision is not possible; nothing of it is applied.
    Refused,
    /// A valid assignment of a gang member, held back because the gang's
    /// assignments do not reach its `minMember`; the pod waits.
    Held,
}

/// Why the host refused a decision.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Refusal {
    /// A stable, lower-case label: one of the host's refusal codes
    /// (`gpu-taken`, `victim-not-lower`, …; every one is listed in
    /// docs/POLICIES.md, "What the host refuses"), or `gang-incomplete`
    /// (verdict `held`).
    pub code: String,
    /// The reason in words.
    pub message: String,
}

/// Each decision of a round with the host's verdict, in the policy's order.
pub(crate) fn decisions(
    host: &HostSnapshot,
    decisions: &[Decision],
    verdict: &Verdict,
) -> Vec<DecisionOutput> {
    let mut refused = verdict.refused.iter().peekable();
    decisions
        .iter()
        .enumerate()
        .map(|(index, decision)| {
            let body = DecisionBody::of(host, decision);
            let refusal = refused.next_if(|r| r.index == index).map(|r| Refusal {
                code: r.reason.code().to_owned(),
                message: r.reason.to_string(),
            });
            let held = matches!(decision, Decision::Assign(a) if verdict.held_back.contains(&(a.pod as usize)));
            let (verdict_kind, refusal) = match refusal {
                Some(refusal) => (VerdictKind::Refused, Some(refusal)),
                None if held => {
                    let pod = match &body {
                        DecisionBody::Assign { pod, .. } => pod.as_str(),
                        _ => "",
                    };
                    let message = verdict
                        .waiting
                        .iter()
                        .find(|w| w.pod == pod)
                        .map_or_else(String::new, |w| w.reason.clone());
                    (
                        VerdictKind::Held,
                        Some(Refusal {
                            code: "gang-incomplete".into(),
                            message,
                        }),
                    )
                }
                None => (VerdictKind::Valid, None),
            };
            DecisionOutput {
                decision: body,
                verdict: verdict_kind,
                refusal,
            }
        })
        .collect()
}

/// The decisions of a round, counted.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DecisionCounts {
    /// Valid assignments.
    pub assigned: usize,
    /// Valid waits.
    pub waiting: usize,
    /// Valid rejections.
    pub rejected: usize,
    /// Valid preemptions (their pods are bound once the victims are gone).
    pub preempting: usize,
    /// Decisions the host refused.
    pub refused: usize,
    /// Pending pods no decision names (they wait too).
    pub not_mentioned: usize,
}

impl DecisionCounts {
    pub(crate) fn of(host: &HostSnapshot, decisions: &[Decision], verdict: &Verdict) -> Self {
        let snapshot = &host.snapshot;
        let named: HashSet<u32> = decisions.iter().map(Decision::pod).collect();
        DecisionCounts {
            assigned: verdict.accepted.len(),
            waiting: verdict.waiting.len(),
            rejected: verdict.rejected.len(),
            preempting: verdict.preempting.len(),
            refused: verdict.refused.len(),
            not_mentioned: (0..snapshot.pending.len() as u32)
                .filter(|p| !named.contains(p))
                .count(),
        }
    }
}

/// A gang of a snapshot and what one round did with it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GangOutcome {
    /// `namespace/name` of its PodGroup.
    pub name: String,
    /// How many members must hold GPUs together.
    pub min_member: u32,
    /// Members holding GPUs before the round.
    pub bound: u32,
    /// Members pending in the round.
    pub pending: usize,
    /// Members the round places (valid assignments applied).
    pub placed: usize,
    /// Valid assignments the host holds back: with the members bound they
    /// do not reach `minMember`, so none of them is applied.
    pub held_back: usize,
}

impl GangOutcome {
    /// Every gang of `snapshot`, with the verdict's outcome.
    pub(crate) fn of(host: &HostSnapshot, verdict: &Verdict) -> Vec<Self> {
        let snapshot = &host.snapshot;
        snapshot
            .gangs
            .iter()
            .map(|gang| {
                let member = |position: &usize| gang.pending.contains(&(*position as u32));
                GangOutcome {
                    name: gang.name.clone(),
                    min_member: gang.min_member,
                    bound: gang.bound,
                    pending: gang.pending.len(),
                    placed: verdict
                        .accepted
                        .iter()
                        .filter(|p| member(&p.request))
                        .count(),
                    held_back: verdict.held_back.iter().filter(|p| member(p)).count(),
                }
            })
            .collect()
    }
}

/// What one namespace holds before a round and gets in it.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NamespaceHoldings {
    /// The namespace.
    pub namespace: String,
    /// Whole GPUs held before the round.
    pub gpus: u32,
    /// MIG instances held before the round.
    pub mig_instances: u32,
    /// Memory of shared GPUs held before the round, MiB.
    #[serde(rename = "sharedMiB")]
    pub shared_mib: u64,
    /// Pods pending in the round.
    pub pending: usize,
    /// Whole GPUs the round places.
    pub gpus_placed: u32,
    /// MIG instances the round places.
    pub mig_instances_placed: u32,
    /// Shared memory the round places, MiB.
    #[serde(rename = "sharedMiBPlaced")]
    pub shared_mib_placed: u64,
}

impl NamespaceHoldings {
    /// Per namespace (sorted), from the snapshot's usage and pending pods
    /// and the verdict's placements.
    pub(crate) fn of(host: &HostSnapshot, verdict: &Verdict) -> Vec<Self> {
        let snapshot = &host.snapshot;
        let mut by_name = std::collections::BTreeMap::new();
        fn entry<'a>(
            by_name: &'a mut std::collections::BTreeMap<String, NamespaceHoldings>,
            namespace: &str,
        ) -> &'a mut NamespaceHoldings {
            by_name
                .entry(namespace.to_string())
                .or_insert_with(|| NamespaceHoldings {
                    namespace: namespace.to_string(),
                    ..Default::default()
                })
        }
        for usage in wasmgpu_policy_sdk::usage(snapshot) {
            let e = entry(&mut by_name, &usage.namespace);
            e.gpus = e.gpus.saturating_add(usage.exclusive_gpus);
            e.mig_instances = e.mig_instances.saturating_add(usage.mig_instances);
            e.shared_mib = e.shared_mib.saturating_add(usage.shared_mib);
        }
        let namespace = |r: &wasmgpu_contract::Request| {
            snapshot
                .namespaces
                .get(r.namespace as usize)
                .map_or("?", String::as_str)
        };
        for request in &snapshot.pending {
            let e = entry(&mut by_name, namespace(request));
            e.pending = e.pending.saturating_add(1);
        }
        for placement in &verdict.accepted {
            let Some(request) = snapshot.pending.get(placement.request) else {
                continue;
            };
            let e = entry(&mut by_name, namespace(request));
            let units = placement.gpus.len() as u32;
            let Some(shape) = wasmgpu_policy_sdk::shape_of(request) else {
                e.gpus_placed = e.gpus_placed.saturating_add(units);
                continue;
            };
            match (shape.sharing, shape.mig_profile.is_some()) {
                (_, true) => e.mig_instances_placed = e.mig_instances_placed.saturating_add(units),
                (Sharing::Exclusive, false) => e.gpus_placed = e.gpus_placed.saturating_add(units),
                (Sharing::Shared, false) => {
                    let mib = shape.memory_mib.saturating_mul(u64::from(units));
                    e.shared_mib_placed = e.shared_mib_placed.saturating_add(mib);
                }
            }
        }
        by_name.into_values().collect()
    }
}

/// What one call cost, and what the policy logged.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Stats {
    /// Fuel used (about one unit per Wasm instruction; deterministic).
    pub fuel_used: u64,
    /// Creating the store and instantiating the component.
    pub instantiate_micros: u64,
    /// The call, marshalling included.
    pub call_micros: u64,
    /// Giving the instance back (its memory reset for the next call).
    pub reset_micros: u64,
    /// Checking the decisions.
    pub validate_micros: u64,
    /// Largest linear memory seen.
    pub peak_memory_bytes: u64,
    /// The policy's log lines (at most 100 kept, each cut to 1 KiB).
    pub log: Vec<String>,
    /// Log lines over the limit, dropped.
    pub log_dropped: usize,
}

impl Stats {
    pub(crate) fn of(stats: &RoundStats, validated: Duration) -> Self {
        Stats {
            fuel_used: stats.fuel_used,
            instantiate_micros: micros(stats.instantiate),
            call_micros: micros(stats.call),
            reset_micros: micros(stats.reset),
            validate_micros: micros(validated),
            peak_memory_bytes: stats.peak_memory_bytes as u64,
            log: stats.log.clone(),
            log_dropped: stats.log_dropped,
        }
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

// === policy compare ===

/// `wasmgpu policy compare --output json`: several policies on one snapshot.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CompareOutput {
    /// The snapshot they decided on.
    pub snapshot: SnapshotSummary,
    /// One entry per policy, in the order given.
    pub policies: Vec<ComparedPolicy>,
}

/// One policy's round in a comparison.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ComparedPolicy {
    /// The policy.
    pub policy: PolicyRef,
    /// Its decisions, each with the host's verdict.
    pub decisions: Vec<DecisionOutput>,
    /// The decisions, counted.
    pub summary: DecisionCounts,
    /// Distinct nodes its valid assignments use.
    pub nodes_used: usize,
}

// === policy bench ===

/// `wasmgpu policy bench --output json`: timings over repeated rounds.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BenchOutput {
    /// The policy timed.
    pub policy: PolicyRef,
    /// The snapshot of every round.
    pub snapshot: SnapshotSummary,
    /// Rounds timed (after one untimed warm-up round).
    pub rounds: usize,
    /// Fuel one round uses (the same every round).
    pub fuel_per_round: u64,
    /// Median and 99th percentile per phase.
    pub phases: Phases,
}

/// The phases of a round.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Phases {
    /// Creating the store and instantiating the component.
    pub instantiate: Phase,
    /// The call, marshalling included.
    pub call: Phase,
    /// Giving the instance back (its memory reset for the next call).
    pub reset: Phase,
    /// Checking the decisions.
    pub validate: Phase,
    /// All four.
    pub round: Phase,
}

/// Timings of one phase over the rounds.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Phase {
    /// Median, microseconds.
    pub median_micros: f64,
    /// 99th percentile (nearest rank), microseconds.
    pub p99_micros: f64,
}

impl Phase {
    pub(crate) fn of(median: Duration, p99: Duration) -> Self {
        Phase {
            median_micros: median.as_secs_f64() * 1e6,
            p99_micros: p99.as_secs_f64() * 1e6,
        }
    }
}

// === agent --once ===

/// `wasmgpu agent --once --output json`: one reading of the node's GPUs.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentOnceOutput {
    /// The raw facts, as the source reported them (memory in bytes).
    pub reading: Reading,
    /// The GPUNode status the agent would publish (as `kubectl get gpunode
    /// -o json` shows it).
    pub status: GPUNodeStatus,
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgpu_contract::Sharing::Exclusive;
    use wasmgpu_contract::testing::{node, request, snapshot};
    use wasmgpu_contract::types::{Assignment, Deferral};
    use wasmgpu_contract::validate::validate_host as validate;

    #[test]
    fn decisions_are_tagged_by_kind_and_paired_with_their_verdict() {
        let snap = HostSnapshot::from_snapshot(snapshot(
            vec![node("a", 2, "NVIDIA L4", 23034)],
            vec![
                request("ns/x", 1, Exclusive, 0),
                request("ns/y", 1, Exclusive, 0),
                request("ns/z", 1, Exclusive, 0),
            ],
        ));
        let assign = Decision::Assign(Assignment {
            pod: 0,
            node: 0,
            gpus: vec![0],
            claims: Vec::new(),
        });
        // The same decision twice: the second is the refused one.
        let decided = vec![
            assign.clone(),
            assign,
            Decision::Wait(Deferral {
                pod: 1,
                reason: "later".into(),
            }),
        ];
        let verdict = validate(&snap, &decided);
        let out = decisions(&snap, &decided, &verdict);
        let json = serde_json::to_value(&out).unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"kind": "assign", "pod": "ns/x", "node": "a", "gpus": ["GPU-a-0"], "verdict": "valid"},
                {"kind": "assign", "pod": "ns/x", "node": "a", "gpus": ["GPU-a-0"], "verdict": "refused",
                 "refusal": {"code": "decided-twice", "message": "the pod was already decided in this round"}},
                {"kind": "wait", "pod": "ns/y", "reason": "later", "verdict": "valid"},
            ])
        );
        let summary = serde_json::to_value(DecisionCounts::of(&snap, &decided, &verdict)).unwrap();
        assert_eq!(
            summary,
            serde_json::json!({"assigned": 1, "waiting": 1, "rejected": 0, "preempting": 0, "refused": 1, "notMentioned": 1})
        );
    }

    #[test]
    fn every_schema_is_an_object_with_properties() {
        for of in SchemaOf::value_variants() {
            let schema = serde_json::to_value(of.schema()).unwrap();
            assert_eq!(schema["type"], "object", "{of:?}");
            assert!(schema["required"].as_array().is_some(), "{of:?}");
        }
    }

    proptest::proptest! {
        /// What a namespace holds only grows with what a round places, even
        /// at the integer limits (it saturates, never wraps).
        #[test]
        fn namespace_holdings_never_wrap(
            held_mib in proptest::prop_oneof![0u64..100_000, (u64::MAX - 100_000)..=u64::MAX],
            held_gpus in proptest::prop_oneof![0u32..16, (u32::MAX - 16)..=u32::MAX],
            share_mib in proptest::prop_oneof![1u64..100_000, (u64::MAX / 2)..=u64::MAX],
        ) {
            let mut snap = snapshot(
                vec![node("a", 2, "NVIDIA H100", 81920)],
                vec![
                    request("ns/s", 2, wasmgpu_contract::Sharing::Shared, 1),
                    request("ns/x", 1, Exclusive, 0),
                ],
            );
            wasmgpu_contract::testing::shape(&mut snap.pending[0]).memory_mib = share_mib;
            // What the namespace holds: a share of `held_mib` and `held_gpus`
            // GPUs (positions past the node's: counted, not checked).
            let r = wasmgpu_contract::testing::running(&mut snap, "ns/held", 0, 0, &[], 0);
            snap.running[r as usize].shared_mib = held_mib;
            snap.running[r as usize].gpus = vec![0];
            let r = wasmgpu_contract::testing::running(&mut snap, "ns/whole", 0, 0, &[], 0);
            snap.running[r as usize].gpus = vec![1; held_gpus.min(64) as usize];
            let snap = HostSnapshot::from_snapshot(snap);
            // The verdict as if the host had accepted both (the summary
            // counts what it is given).
            let mut verdict = validate(&snap, &[]);
            verdict.accepted = vec![
                wasmgpu_contract::validate::Placement {
                    request: 0,
                    pod: "ns/s".into(),
                    node: "a".into(),
                    gpus: vec!["GPU-a-0".into(), "GPU-a-1".into()],
                    at: (0, vec![0, 1]),
                    claims: Vec::new(),
                },
                wasmgpu_contract::validate::Placement {
                    request: 1,
                    pod: "ns/x".into(),
                    node: "a".into(),
                    gpus: vec!["GPU-a-0".into()],
                    at: (0, vec![0]),
                    claims: Vec::new(),
                },
            ];
            let ns = &NamespaceHoldings::of(&snap, &verdict)[0];
            proptest::prop_assert_eq!(ns.shared_mib, held_mib);
            proptest::prop_assert_eq!(ns.shared_mib_placed, share_mib.saturating_mul(2));
            proptest::prop_assert!(ns.shared_mib.saturating_add(ns.shared_mib_placed) >= held_mib);
            proptest::prop_assert_eq!(ns.gpus_placed, 1);
            proptest::prop_assert_eq!(ns.pending, 2);
        }
    }
}
