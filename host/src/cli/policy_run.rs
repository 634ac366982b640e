//! `wasmgpu policy run|compare|bench`: rounds against a snapshot file, as
//! tables or as the JSON of `cli/output.rs`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::output::{
    BenchOutput, CompareOutput, ComparedPolicy, DecisionBody, DecisionCounts, DecisionOutput,
    GangOutcome, NamespaceHoldings, Phase, Phases, PolicyRef, RunOutput, SnapshotSummary, Stats,
    VerdictKind, decisions,
};
use super::output_format::Output;
use super::render::RenderArgs;
use super::stdout;
use super::table::Table;
use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::types::{Request, Sharing};
use wasmgpu_contract::validate::{Verdict, validate_host};
use wasmgpu_engine::LoadedPolicy;

// === run ===

/// One round of `policy`, printed with the host's verdict on each decision;
/// status 2 with `fail_on_refused` when the host refused any.
/// `snapshot` as `policy` sees it: with the node labels it asks for.
fn given(policy: &LoadedPolicy, snapshot: &HostSnapshot) -> HostSnapshot {
    let mut given = snapshot.clone();
    given.for_policy(&policy.info().label_keys);
    given
}

pub(crate) fn run(
    policy: &LoadedPolicy,
    snapshot: &HostSnapshot,
    output: Output,
    fail_on_refused: bool,
    render: &RenderArgs,
) -> anyhow::Result<ExitCode> {
    let snapshot = &given(policy, snapshot);
    let round = policy.allocate(&snapshot.snapshot)?;
    let started = Instant::now();
    let verdict = validate_host(snapshot, &round.decisions);
    let validated = started.elapsed();
    picture(render, &[(title(policy), snapshot, &verdict)])?;
    let result = RunOutput {
        policy: PolicyRef::of(policy),
        snapshot: SnapshotSummary::of(snapshot),
        decisions: decisions(snapshot, &round.decisions, &verdict),
        summary: DecisionCounts::of(snapshot, &round.decisions, &verdict),
        gangs: GangOutcome::of(snapshot, &verdict),
        namespaces: NamespaceHoldings::of(snapshot, &verdict),
        stats: Stats::of(&round.stats, validated),
    };
    match output {
        Output::Json => stdout::json(&result)?,
        Output::Table => stdout::print(&run_table(&result))?,
    }
    Ok(if fail_on_refused && result.summary.refused > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

fn run_table(run: &RunOutput) -> String {
    let RunOutput {
        policy,
        snapshot,
        summary,
        stats,
        ..
    } = run;
    let mut text = format!(
        "policy {} {} ({})\n",
        policy.name, policy.version, policy.digest
    );
    text += &format!(
        "round  {} pending pod(s), {} node(s), {} GPU(s)\n\n",
        snapshot.pending, snapshot.nodes, snapshot.gpus
    );
    let mut table = Table::new(&["POD", "DECISION", "NODE", "GPUS", "VERDICT"]);
    let mut preempting;
    for decision in &run.decisions {
        let (kind, node, gpus, reason) = match &decision.decision {
            DecisionBody::Assign { node, gpus, .. } => {
                ("assign", node.clone(), gpus.join(","), "valid")
            }
            DecisionBody::Wait { reason, .. } => ("wait", "-".into(), "-".into(), reason.as_str()),
            DecisionBody::Reject { reason, .. } => {
                ("reject", "-".into(), "-".into(), reason.as_str())
            }
            DecisionBody::Preempt {
                node,
                gpus,
                victims,
                ..
            } => {
                preempting = format!("valid, evicting {}", victims.join(","));
                ("preempt", node.clone(), gpus.join(","), preempting.as_str())
            }
        };
        let verdict = match &decision.refusal {
            Some(refusal) => format!("REFUSED: {}", refusal.message),
            None => reason.to_owned(),
        };
        table.row(vec![pod(decision).into(), kind.into(), node, gpus, verdict]);
    }
    text += &table.render();
    text += &format!(
        "\n{} assigned, {} waiting, {} rejected by the policy, {} preempting, {} refused by the host; {} pod(s) not mentioned\n",
        summary.assigned,
        summary.waiting,
        summary.rejected,
        summary.preempting,
        summary.refused,
        summary.not_mentioned,
    );
    text += &gangs_table(&run.gangs);
    text += &namespaces_table(&run.namespaces);
    text += &format!(
        "fuel {}  instantiate {:?}  call {:?}  reset {:?}  validate {:?}  peak memory {:.1} MiB\n",
        stats.fuel_used,
        Duration::from_micros(stats.instantiate_micros),
        Duration::from_micros(stats.call_micros),
        Duration::from_micros(stats.reset_micros),
        Duration::from_micros(stats.validate_micros),
        stats.peak_memory_bytes as f64 / (1 << 20) as f64
    );
    for line in &stats.log {
        text += &format!("log: {line}\n");
    }
    if stats.log_dropped > 0 {
        text += &format!("log: … {} more line(s) dropped\n", stats.log_dropped);
    }
    text
}

/// The gangs, when the snapshot has any.
fn gangs_table(gangs: &[GangOutcome]) -> String {
    if gangs.is_empty() {
        return String::new();
    }
    let mut table = Table::new(&[
        "GANG",
        "MIN-MEMBER",
        "BOUND",
        "PENDING",
        "PLACED",
        "HELD-BACK",
    ]);
    for gang in gangs {
        table.row(vec![
            gang.name.clone(),
            gang.min_member.to_string(),
            gang.bound.to_string(),
            gang.pending.to_string(),
            gang.placed.to_string(),
            gang.held_back.to_string(),
        ]);
    }
    format!("\n{}", table.render())
}

/// What each namespace holds and gets: before → after the round.
fn namespaces_table(namespaces: &[NamespaceHoldings]) -> String {
    if namespaces.is_empty() {
        return String::new();
    }
    let mut table = Table::new(&["NAMESPACE", "PENDING", "GPUS", "MIG", "SHARED-MIB"]);
    let change = |before: u64, placed: u64| {
        if placed == 0 {
            before.to_string()
        } else {
            format!("{before} -> {}", before.saturating_add(placed))
        }
    };
    for ns in namespaces {
        table.row(vec![
            ns.namespace.clone(),
            ns.pending.to_string(),
            change(u64::from(ns.gpus), u64::from(ns.gpus_placed)),
            change(
                u64::from(ns.mig_instances),
                u64::from(ns.mig_instances_placed),
            ),
            change(ns.shared_mib, ns.shared_mib_placed),
        ]);
    }
    format!("\n{}", table.render())
}

fn pod(decision: &DecisionOutput) -> &str {
    match &decision.decision {
        DecisionBody::Assign { pod, .. }
        | DecisionBody::Wait { pod, .. }
        | DecisionBody::Reject { pod, .. }
        | DecisionBody::Preempt { pod, .. } => pod,
    }
}

// === compare ===

/// One round of each policy on its snapshot (the same one but for each
/// policy's `config`), side by side.
pub(crate) fn compare(
    rounds: &[(LoadedPolicy, HostSnapshot)],
    output: Output,
    render: &RenderArgs,
) -> anyhow::Result<ExitCode> {
    let Some((_, snapshot)) = rounds.first() else {
        bail!("nothing to compare");
    };
    let mut policies = Vec::new();
    let mut drawn = Vec::new();
    for (policy, snapshot) in rounds {
        let snapshot = given(policy, snapshot);
        let round = policy
            .allocate(&snapshot.snapshot)
            .with_context(|| format!("{} failed", policy.info().name))?;
        let verdict = validate_host(&snapshot, &round.decisions);
        policies.push(ComparedPolicy {
            policy: PolicyRef::of(policy),
            decisions: decisions(&snapshot, &round.decisions, &verdict),
            summary: DecisionCounts::of(&snapshot, &round.decisions, &verdict),
            nodes_used: nodes_used(&verdict),
        });
        drawn.push((title(policy), snapshot, verdict));
    }
    let panels: Vec<_> = drawn.iter().map(|(t, s, v)| (t.clone(), s, v)).collect();
    picture(render, &panels)?;
    let result = CompareOutput {
        snapshot: SnapshotSummary::of(snapshot),
        policies,
    };
    match output {
        Output::Json => stdout::json(&result)?,
        Output::Table => stdout::print(&compare_table(&result, snapshot))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// A panel's title: the policy's name and version.
fn title(policy: &LoadedPolicy) -> String {
    format!("{} {}", policy.info().name, policy.info().version)
}

/// Writes `--render`'s picture, when asked, and says where (on stderr, so
/// `--output json` stays one document).
fn picture(
    render: &RenderArgs,
    panels: &[(String, &HostSnapshot, &Verdict)],
) -> anyhow::Result<()> {
    let Some(file) = &render.render else {
        return Ok(());
    };
    super::render::write(file, panels, render.color_by)?;
    eprintln!("picture of the round: {}", file.display());
    Ok(())
}

fn nodes_used(verdict: &Verdict) -> usize {
    let mut nodes: Vec<&str> = verdict.accepted.iter().map(|a| a.node.as_str()).collect();
    nodes.sort();
    nodes.dedup();
    nodes.len()
}

fn compare_table(compared: &CompareOutput, host: &HostSnapshot) -> String {
    let snapshot = &host.snapshot;
    let mut header = vec!["POD".to_string(), "WANTS".to_string()];
    header.extend(
        compared
            .policies
            .iter()
            .map(|p| p.policy.name.to_uppercase()),
    );
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(&header);
    for request in &snapshot.pending {
        let mut row = vec![request.pod.clone(), wants(request)];
        for compared in &compared.policies {
            row.push(placement(&compared.decisions, &request.pod, host));
        }
        table.row(row);
    }
    let mut text = table.render();
    text.push('\n');
    let mut summary = Table::new(&["POLICY", "PLACED", "NODES USED", "REFUSED BY HOST"]);
    for compared in &compared.policies {
        summary.row(vec![
            compared.policy.name.clone(),
            format!("{}/{}", compared.summary.assigned, snapshot.pending.len()),
            compared.nodes_used.to_string(),
            compared.summary.refused.to_string(),
        ]);
    }
    text += &summary.render();
    let mut reasons = String::new();
    for compared in &compared.policies {
        let name = &compared.policy.name;
        for decision in &compared.decisions {
            let line = match (&decision.refusal, &decision.decision) {
                (Some(refusal), _) => format!("refused by the host: {}", refusal.message),
                (None, DecisionBody::Wait { reason, .. }) => format!("waits: {reason}"),
                (None, DecisionBody::Reject { reason, .. }) => format!("rejected: {reason}"),
                (None, DecisionBody::Preempt { victims, .. }) => {
                    format!("preempts: evicting {}", victims.join(","))
                }
                (None, DecisionBody::Assign { .. }) => continue,
            };
            reasons += &format!("{name} {}: {line}\n", pod(decision));
        }
    }
    if !reasons.is_empty() {
        text.push('\n');
        text += &reasons;
    }
    text
}

/// What a request asks for, in a few words: `2× NVIDIA H100* ≥40000 MiB`.
fn wants(request: &Request) -> String {
    let Some(request) = wasmgpu_policy_sdk::shape_of(request) else {
        return "DRA claims".into();
    };
    let model = request.model.as_deref().unwrap_or("any GPU");
    let memory = match request.sharing {
        Sharing::Exclusive if request.memory_mib > 0 => format!(" ≥{} MiB", request.memory_mib),
        Sharing::Exclusive => String::new(),
        Sharing::Shared => format!(" shared {} MiB", request.memory_mib),
    };
    format!("{}× {model}{memory}", request.count)
}

/// Where `pod` landed, in a few words: `node [gpu indices]`, `waits`, …
fn placement(decisions: &[DecisionOutput], pod_name: &str, host: &HostSnapshot) -> String {
    let mut about = decisions.iter().filter(|d| pod(d) == pod_name);
    let Some(first) = about.next() else {
        return "-".into();
    };
    // A pod's first decision is the one that counts; later ones are refused.
    match (&first.decision, first.verdict) {
        (_, VerdictKind::Refused) => "refused by host".into(),
        (_, VerdictKind::Held) => "held back (gang)".into(),
        (
            DecisionBody::Assign { node, gpus, .. } | DecisionBody::Preempt { node, gpus, .. },
            VerdictKind::Valid,
        ) => {
            let indices: Vec<String> = host
                .snapshot
                .nodes
                .iter()
                .position(|n| &n.name == node)
                .map(|n| {
                    gpus.iter()
                        .filter_map(|u| host.nodes[n].uuids.iter().position(|x| x == u))
                        .map(|g| host.snapshot.nodes[n].gpus[g].index.to_string())
                        .collect()
                })
                .unwrap_or_default();
            let preempts = matches!(first.decision, DecisionBody::Preempt { .. });
            format!(
                "{node} [{}]{}",
                indices.join(","),
                if preempts { " (preempting)" } else { "" }
            )
        }
        (DecisionBody::Wait { .. }, VerdictKind::Valid) => "waits".into(),
        (DecisionBody::Reject { .. }, VerdictKind::Valid) => "rejected".into(),
    }
}

// === bench ===

/// Times `rounds` rounds (after one untimed warm-up round).
pub(crate) fn bench(
    policy: &LoadedPolicy,
    snapshot: &HostSnapshot,
    rounds: usize,
    output: Output,
) -> anyhow::Result<ExitCode> {
    if rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let host = &given(policy, snapshot);
    let snapshot = &host.snapshot;
    policy.allocate(snapshot)?;
    let (mut instantiate, mut call, mut reset) = (vec![], vec![], vec![]);
    let (mut check, mut total) = (vec![], vec![]);
    let mut fuel = 0;
    for _ in 0..rounds {
        let round = policy.allocate(snapshot)?;
        let started = Instant::now();
        let verdict = validate_host(host, &round.decisions);
        let validated = started.elapsed();
        std::hint::black_box(verdict);
        instantiate.push(round.stats.instantiate);
        call.push(round.stats.call);
        reset.push(round.stats.reset);
        check.push(validated);
        let stats = &round.stats;
        total.push(stats.instantiate + stats.call + stats.reset + validated);
        fuel = round.stats.fuel_used;
    }
    let phase = |mut samples: Vec<Duration>| {
        samples.sort();
        Phase::of(percentile(&samples, 50), percentile(&samples, 99))
    };
    let result = BenchOutput {
        policy: PolicyRef::of(policy),
        snapshot: SnapshotSummary::of(host),
        rounds,
        fuel_per_round: fuel,
        phases: Phases {
            instantiate: phase(instantiate),
            call: phase(call),
            reset: phase(reset),
            validate: phase(check),
            round: phase(total),
        },
    };
    match output {
        Output::Json => stdout::json(&result)?,
        Output::Table => stdout::print(&bench_table(&result))?,
    }
    Ok(ExitCode::SUCCESS)
}

fn bench_table(bench: &BenchOutput) -> String {
    let mut text = format!(
        "{} over {} rounds: {} pending pods, {} nodes, fuel {} per round\n",
        bench.policy.name,
        bench.rounds,
        bench.snapshot.pending,
        bench.snapshot.nodes,
        bench.fuel_per_round
    );
    let mut table = Table::new(&["PHASE", "MEDIAN", "P99"]);
    let phases = &bench.phases;
    for (name, phase) in [
        ("instantiate", &phases.instantiate),
        ("call", &phases.call),
        ("reset", &phases.reset),
        ("validate", &phases.validate),
        ("round", &phases.round),
    ] {
        let shown = |micros: f64| format!("{:?}", Duration::from_secs_f64(micros / 1e6));
        table.row(vec![
            name.into(),
            shown(phase.median_micros),
            shown(phase.p99_micros),
        ]);
    }
    text += &table.render();
    text
}

/// The `p`th percentile of sorted samples (nearest rank).
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}
