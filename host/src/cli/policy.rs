//! `wasmgpu policy …`: work with policy components offline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};

use super::table::Table;
use crate::engine::types::{Decision, Snapshot};
use crate::engine::{Engine, Limits, LoadedPolicy, RoundStats};
use crate::validate::{Verdict, validate};

#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Check that FILE is a component of the wasmgpu:policy world.
    ///
    /// Prints what the policy says it is (describe()), its size, sha256 digest
    /// and imports. Exits non-zero with the reason when FILE is not Wasm, is a
    /// core module instead of a component, does not compile, misses an export,
    /// imports something the sandbox does not provide, or fails describe().
    Check {
        /// The policy component (.wasm).
        file: PathBuf,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Run one round against a snapshot file and print each decision with the
    /// host's verdict on it (valid, or why not), fuel used, time and peak memory.
    Run {
        /// The policy component (.wasm).
        file: PathBuf,
        #[command(flatten)]
        input: Input,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        /// Exit with status 2 when the host refuses any decision.
        #[arg(long)]
        fail_on_refused: bool,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Run several policies on the same snapshot and show their placements side by side.
    Compare {
        /// Two or more policy components (.wasm).
        #[arg(required = true, num_args = 2..)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        input: Input,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Time repeated rounds: median and p99 of instantiate, call and validate.
    Bench {
        /// The policy component (.wasm).
        file: PathBuf,
        #[command(flatten)]
        input: Input,
        /// Rounds to time (after one untimed warm-up round).
        #[arg(long, default_value_t = 100)]
        rounds: usize,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Create or update the ConfigMap that ships a policy to the cluster's
    /// controller (server-side apply): label `wasmgpu.io/policy=true`,
    /// `binaryData["policy.wasm"]` (`["policy.wasm.gz"]`, gzip-compressed,
    /// when the component is over 900 KiB), the digest pinned in annotation
    /// `wasmgpu.io/sha256`, and `data["config.json"]` from --config.
    /// A payload key of the other kind (written by kubectl, say) is
    /// replaced in the same step, so exactly one remains; `published` is
    /// printed only when the controller's payload check passes on the
    /// result.
    Publish {
        /// The policy component (.wasm).
        file: PathBuf,
        /// The policy's name (the ConfigMap's; GPUResources name it in `spec.policy`).
        #[arg(long)]
        name: String,
        /// The policy's parameters (JSON), handed to it as `snapshot.config`.
        #[arg(long)]
        config: Option<PathBuf>,
        /// The controller's policy namespace [default: $POD_NAMESPACE, else wasmgpu-system].
        #[arg(long, short)]
        namespace: Option<String>,
    },
    /// Show the policy ConfigMaps in the cluster and what the controller
    /// made of each: active digest and version, when it was loaded, and why
    /// the last version tried was rejected (from the `wasmgpu.io/status`
    /// annotation the controller writes).
    List {
        /// The controller's policy namespace [default: $POD_NAMESPACE, else wasmgpu-system].
        #[arg(long, short)]
        namespace: Option<String>,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Print the JSON Schema of snapshot files.
    SnapshotSchema,
    /// Write a large synthetic snapshot (for benchmarks): NODES nodes of 8 GPUs
    /// (H100 with full NVLink and A100 in NVLink pairs, alternating), about a
    /// quarter in use, and PODS pending pods of 1-8 GPUs.
    GenerateSnapshot {
        /// Number of nodes.
        #[arg(long, default_value_t = 1000)]
        nodes: u32,
        /// Number of pending pods.
        #[arg(long, default_value_t = 1000)]
        pods: u32,
        /// Where to write it (standard output when absent).
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
}

/// The snapshot a round runs on.
#[derive(Debug, Args)]
pub(crate) struct Input {
    /// A snapshot file (JSON; see `wasmgpu policy snapshot-schema`).
    #[arg(long)]
    snapshot: PathBuf,
    /// Policy parameters (JSON) to hand to the policy instead of the snapshot's `config`.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// Per-call limits (defaults are the controller's).
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// Fuel per call (about one unit per Wasm instruction).
    #[arg(long, default_value_t = Limits::default().fuel)]
    fuel: u64,
    /// Wall-clock deadline per call, in milliseconds.
    #[arg(long, default_value_t = Limits::default().deadline.as_millis() as u64)]
    deadline_ms: u64,
    /// Largest linear memory per call, in MiB.
    #[arg(long, default_value_t = (Limits::default().memory_bytes >> 20) as u64)]
    memory_mib: u64,
}

#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub(crate) enum Output {
    /// Human-readable text.
    #[default]
    Table,
    /// Machine-readable JSON.
    Json,
}

impl LimitArgs {
    /// The limits these flags describe.
    pub(crate) fn limits(&self) -> anyhow::Result<Limits> {
        Ok(Limits {
            fuel: self.fuel,
            deadline: Duration::from_millis(self.deadline_ms),
            memory_bytes: usize::try_from(self.memory_mib << 20)
                .context("--memory-mib is too large")?,
            ..Limits::default()
        })
    }

    fn engine(&self) -> anyhow::Result<Engine> {
        Ok(Engine::new(self.limits()?)?)
    }
}

impl Input {
    fn load(&self) -> anyhow::Result<Snapshot> {
        let mut snapshot = read_snapshot(&self.snapshot)?;
        if let Some(path) = &self.config {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --config {}", path.display()))?;
            serde_json::from_str::<serde_json::Value>(&text)
                .with_context(|| format!("--config {} is not valid JSON", path.display()))?;
            snapshot.config = text;
        }
        Ok(snapshot)
    }
}

/// Reads and parses a snapshot file.
pub(crate) fn read_snapshot(path: &Path) -> anyhow::Result<Snapshot> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading snapshot {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a valid snapshot (see `wasmgpu policy snapshot-schema`)",
            path.display()
        )
    })
}

fn load_policy(engine: &Engine, file: &Path) -> anyhow::Result<LoadedPolicy> {
    let bytes =
        std::fs::read(file).with_context(|| format!("reading policy {}", file.display()))?;
    engine
        .load(&bytes)
        .with_context(|| format!("{} is not a usable policy", file.display()))
}

// === impl PolicyCommand ===

impl PolicyCommand {
    pub(crate) fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            PolicyCommand::Check { file, output } => check(&file, output),
            PolicyCommand::Publish {
                file,
                name,
                config,
                namespace,
            } => super::policy_cluster::publish(
                &file,
                &name,
                config.as_deref(),
                super::policy_cluster::namespace(namespace),
            ),
            PolicyCommand::List { namespace, output } => {
                super::policy_cluster::list(super::policy_cluster::namespace(namespace), output)
            }
            PolicyCommand::Run {
                file,
                input,
                output,
                fail_on_refused,
                limits,
            } => {
                let engine = limits.engine()?;
                let policy = load_policy(&engine, &file)?;
                let snapshot = input.load()?;
                let round = policy.allocate(&snapshot)?;
                let started = Instant::now();
                let verdict = validate(&snapshot, &round.decisions);
                let validated = started.elapsed();
                print_round(
                    &policy,
                    &snapshot,
                    &round.decisions,
                    &verdict,
                    &round.stats,
                    validated,
                    output,
                )?;
                Ok(if fail_on_refused && !verdict.refused.is_empty() {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                })
            }
            PolicyCommand::Compare {
                files,
                input,
                limits,
            } => {
                let engine = limits.engine()?;
                let snapshot = input.load()?;
                compare(&engine, &files, &snapshot)
            }
            PolicyCommand::Bench {
                file,
                input,
                rounds,
                output,
                limits,
            } => {
                let engine = limits.engine()?;
                let policy = load_policy(&engine, &file)?;
                let snapshot = input.load()?;
                bench(&policy, &snapshot, rounds, output)
            }
            PolicyCommand::SnapshotSchema => {
                let schema = schemars::schema_for!(Snapshot);
                println!("{}", serde_json::to_string_pretty(&schema)?);
                Ok(ExitCode::SUCCESS)
            }
            PolicyCommand::GenerateSnapshot { nodes, pods, out } => {
                let snapshot = wasmgpu_policy_sdk::testing::large(nodes, pods);
                let json = serde_json::to_string(&snapshot)?;
                match out {
                    Some(path) => std::fs::write(&path, json)
                        .with_context(|| format!("writing {}", path.display()))?,
                    None => println!("{json}"),
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

fn check(file: &Path, output: Output) -> anyhow::Result<ExitCode> {
    let engine = Engine::new(Limits::default())?;
    let policy = match load_policy(&engine, file) {
        Ok(policy) => policy,
        Err(error) => {
            eprintln!("error: {error:#}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let info = policy.info();
    match output {
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "name": info.name,
                "version": info.version,
                "description": info.description,
                "digest": policy.digest(),
                "sizeBytes": policy.size(),
                "imports": policy.imports(),
            }))?
        ),
        Output::Table => {
            println!("ok: {} is a wasmgpu:policy@0.1.0 component", file.display());
            println!("name         {}", info.name);
            println!("version      {}", info.version);
            println!("description  {}", info.description);
            println!("size         {} bytes", policy.size());
            println!("digest       {}", policy.digest());
            println!("imports      {}", policy.imports().join("\n             "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_round(
    policy: &LoadedPolicy,
    snapshot: &Snapshot,
    decisions: &[Decision],
    verdict: &Verdict,
    stats: &RoundStats,
    validated: Duration,
    output: Output,
) -> anyhow::Result<()> {
    let info = policy.info();
    if let Output::Json = output {
        let json = serde_json::json!({
            "policy": { "name": info.name, "version": info.version, "digest": policy.digest() },
            "decisions": decisions,
            "verdict": verdict,
            "stats": {
                "fuelUsed": stats.fuel_used,
                "instantiateMicros": stats.instantiate.as_micros() as u64,
                "callMicros": stats.call.as_micros() as u64,
                "validateMicros": validated.as_micros() as u64,
                "peakMemoryBytes": stats.peak_memory_bytes,
                "log": stats.log,
                "logDropped": stats.log_dropped,
            },
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    let gpus: usize = snapshot.nodes.iter().map(|n| n.gpus.len()).sum();
    println!(
        "policy {} {} ({})",
        info.name,
        info.version,
        policy.digest()
    );
    println!(
        "round  {} pending pod(s), {} node(s), {} GPU(s)",
        snapshot.pending.len(),
        snapshot.nodes.len(),
        gpus
    );
    println!();
    let mut table = Table::new(&["POD", "DECISION", "NODE", "GPUS", "VERDICT"]);
    let mut refusals = verdict.refused.iter();
    let mut next_refusal = refusals.next();
    for decision in decisions {
        let (kind, node, gpus, reason) = match decision {
            Decision::Assign(a) => ("assign", a.node.clone(), a.gpus.join(","), String::new()),
            Decision::Wait(d) => ("wait", "-".into(), "-".into(), d.reason.clone()),
            Decision::Reject(d) => ("reject", "-".into(), "-".into(), d.reason.clone()),
        };
        // Refusals come in decision order, so one cursor pairs them up.
        let verdict_text = match next_refusal {
            Some(r) if &r.decision == decision => {
                next_refusal = refusals.next();
                format!("REFUSED: {}", r.reason)
            }
            _ if kind == "assign" => "valid".into(),
            _ => reason,
        };
        table.row(vec![
            decision_pod(decision).into(),
            kind.into(),
            node,
            gpus,
            verdict_text,
        ]);
    }
    print!("{}", table.render());
    println!();
    println!(
        "{} assigned, {} waiting, {} rejected by the policy, {} refused by the host; {} pod(s) not mentioned",
        verdict.accepted.len(),
        verdict.waiting.len(),
        verdict.rejected.len(),
        verdict.refused.len(),
        snapshot.pending.len().saturating_sub(decisions.len()),
    );
    println!(
        "fuel {}  instantiate {:?}  call {:?}  validate {:?}  peak memory {:.1} MiB",
        stats.fuel_used,
        stats.instantiate,
        stats.call,
        validated,
        stats.peak_memory_bytes as f64 / (1 << 20) as f64
    );
    for line in &stats.log {
        println!("log: {line}");
    }
    if stats.log_dropped > 0 {
        println!("log: … {} more line(s) dropped", stats.log_dropped);
    }
    Ok(())
}

fn decision_pod(decision: &Decision) -> &str {
    match decision {
        Decision::Assign(a) => &a.pod,
        Decision::Wait(d) | Decision::Reject(d) => &d.pod,
    }
}

fn compare(engine: &Engine, files: &[PathBuf], snapshot: &Snapshot) -> anyhow::Result<ExitCode> {
    let mut header = vec!["POD".to_string(), "WANTS".to_string()];
    let mut columns = Vec::new();
    for file in files {
        let policy = load_policy(engine, file)?;
        let round = policy
            .allocate(snapshot)
            .with_context(|| format!("{} failed", policy.info().name))?;
        let verdict = validate(snapshot, &round.decisions);
        header.push(policy.info().name.to_uppercase());
        columns.push((round.decisions, verdict));
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(&header);
    for request in &snapshot.pending {
        let mut row = vec![request.pod.clone(), wants(request)];
        for (_, verdict) in &columns {
            row.push(placement(verdict, &request.pod, snapshot));
        }
        table.row(row);
    }
    print!("{}", table.render());
    println!();
    let mut summary = Table::new(&["POLICY", "PLACED", "NODES USED", "REFUSED BY HOST"]);
    for ((_, verdict), name) in columns.iter().zip(&header[2..]) {
        let mut nodes: Vec<&str> = verdict.accepted.iter().map(|a| a.node.as_str()).collect();
        nodes.sort();
        nodes.dedup();
        summary.row(vec![
            name.to_lowercase(),
            format!("{}/{}", verdict.accepted.len(), snapshot.pending.len()),
            nodes.len().to_string(),
            verdict.refused.len().to_string(),
        ]);
    }
    print!("{}", summary.render());
    let reasons: Vec<String> =
        columns
            .iter()
            .zip(&header[2..])
            .flat_map(|((_, verdict), name)| {
                let waiting = verdict.waiting.iter().map(move |d| {
                    format!("{} {}: waits: {}", name.to_lowercase(), d.pod, d.reason)
                });
                let rejected = verdict.rejected.iter().map(move |d| {
                    format!("{} {}: rejected: {}", name.to_lowercase(), d.pod, d.reason)
                });
                let refused = verdict.refused.iter().map(move |r| {
                    format!(
                        "{} {}: refused by the host: {}",
                        name.to_lowercase(),
                        decision_pod(&r.decision),
                        r.reason
                    )
                });
                waiting.chain(rejected).chain(refused)
            })
            .collect();
    if !reasons.is_empty() {
        println!();
        for line in reasons {
            println!("{line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What a request asks for, in a few words: `2× NVIDIA H100* ≥40000 MiB`.
fn wants(request: &crate::engine::types::Request) -> String {
    let model = request.model.as_deref().unwrap_or("any GPU");
    let memory = match request.sharing {
        crate::engine::types::Sharing::Exclusive if request.memory_mib > 0 => {
            format!(" ≥{} MiB", request.memory_mib)
        }
        crate::engine::types::Sharing::Exclusive => String::new(),
        crate::engine::types::Sharing::Shared => format!(" shared {} MiB", request.memory_mib),
    };
    format!("{}× {model}{memory}", request.count)
}

/// Where `pod` landed in `verdict`, in a few words: `node: gpu indices`.
fn placement(verdict: &Verdict, pod: &str, snapshot: &Snapshot) -> String {
    if let Some(a) = verdict.accepted.iter().find(|a| a.pod == pod) {
        let indices: Vec<String> = snapshot
            .nodes
            .iter()
            .find(|n| n.name == a.node)
            .map(|n| {
                a.gpus
                    .iter()
                    .filter_map(|u| n.gpus.iter().find(|g| &g.uuid == u))
                    .map(|g| g.index.to_string())
                    .collect()
            })
            .unwrap_or_default();
        return format!("{} [{}]", a.node, indices.join(","));
    }
    if verdict.waiting.iter().any(|d| d.pod == pod) {
        return "waits".into();
    }
    if verdict.rejected.iter().any(|d| d.pod == pod) {
        return "rejected".into();
    }
    if verdict
        .refused
        .iter()
        .any(|r| decision_pod(&r.decision) == pod)
    {
        return "refused by host".into();
    }
    "-".into()
}

fn bench(
    policy: &LoadedPolicy,
    snapshot: &Snapshot,
    rounds: usize,
    output: Output,
) -> anyhow::Result<ExitCode> {
    if rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    policy.allocate(snapshot)?;
    let (mut instantiate, mut call, mut check, mut total) = (vec![], vec![], vec![], vec![]);
    let mut fuel = 0;
    for _ in 0..rounds {
        let round = policy.allocate(snapshot)?;
        let started = Instant::now();
        let verdict = validate(snapshot, &round.decisions);
        let validated = started.elapsed();
        std::hint::black_box(verdict);
        instantiate.push(round.stats.instantiate);
        call.push(round.stats.call);
        check.push(validated);
        total.push(round.stats.instantiate + round.stats.call + validated);
        fuel = round.stats.fuel_used;
    }
    let rows = [
        ("instantiate", instantiate),
        ("call", call),
        ("validate", check),
        ("round", total),
    ]
    .map(|(name, mut samples)| {
        samples.sort();
        (name, percentile(&samples, 50), percentile(&samples, 99))
    });
    match output {
        Output::Json => {
            let json: serde_json::Map<String, serde_json::Value> = rows
                .iter()
                .map(|(name, p50, p99)| {
                    let v = serde_json::json!({ "medianMicros": p50.as_secs_f64() * 1e6, "p99Micros": p99.as_secs_f64() * 1e6 });
                    (name.to_string(), v)
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({ "rounds": rounds, "fuelPerRound": fuel, "phases": json })
                )?
            );
        }
        Output::Table => {
            println!(
                "{} over {} rounds: {} pending pods, {} nodes, fuel {} per round",
                policy.info().name,
                rounds,
                snapshot.pending.len(),
                snapshot.nodes.len(),
                fuel
            );
            let mut table = Table::new(&["PHASE", "MEDIAN", "P99"]);
            for (name, p50, p99) in rows {
                table.row(vec![name.into(), format!("{p50:?}"), format!("{p99:?}")]);
            }
            print!("{}", table.render());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The `p`th percentile of sorted samples (nearest rank).
pub(crate) fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}
