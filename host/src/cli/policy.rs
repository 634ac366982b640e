//! `wasmgpu policy …`: work with policy components offline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::output::{CheckOutput, SchemaOf};
use super::output_format::Output;
use super::policy_run;
use super::snapshot_file;
use super::stdout;
use wasmgpu_contract::HostSnapshot;
use wasmgpu_engine::{Engine, Limits, LoadedPolicy};

#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Start a policy: write a Rust crate NAME that builds a working policy
    /// component (first fit, nodes of a preferred zone first), with a unit
    /// test, a config example, a small snapshot and a README of the commands
    /// that build, check, run and publish it.
    ///
    /// Outside a wasmgpu checkout the crate is a workspace of its own: its own
    /// `policy` build profile, the SDK as a path dependency (--sdk, default:
    /// the checkout this wasmgpu was built from) and wasmgpu's lockfile, so it
    /// builds with the dependency versions wasmgpu was tested with. Inside a
    /// checkout it is added to the workspace's members instead.
    ///
    /// With --lang js|python|go: the same policy in that language, with its
    /// unit tests (one holding its decisions to the host's validator), built
    /// and tested from its own directory through the checkout's
    /// `policies/LANG/build.sh`.
    New {
        /// The policy's name: its ConfigMap's and its crate's (e.g. zone-first).
        name: String,
        /// Where to write the crate [default: ./NAME]; must not exist or be empty.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The SDK: a wasmgpu checkout's `policies/sdk` for Rust (it is not on
        /// crates.io), `policies/js`, `policies/python` or `policies/go` for
        /// the others [default: the checkout this wasmgpu was built from].
        #[arg(long)]
        sdk: Option<PathBuf>,
        /// The language: a Rust crate, or a JavaScript, Python or Go policy
        /// built and tested by that SDK's `build.sh --policy .` and
        /// `--test-policy .`.
        #[arg(long, value_enum, default_value_t)]
        lang: super::policy_new::Lang,
    },
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
        render: super::render::RenderArgs,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Run several policies on the same snapshot and show their placements side by side.
    ///
    /// Each policy takes its own parameters with `--config POLICY=FILE`
    /// (repeated; POLICY is its name as `describe()` gives it, or its file);
    /// a plain `--config FILE` goes to every policy not named otherwise.
    Compare {
        /// Two or more policy components (.wasm).
        #[arg(required = true, num_args = 2..)]
        files: Vec<PathBuf>,
        /// A snapshot file (JSON; see `wasmgpu policy snapshot-schema`).
        #[arg(long)]
        snapshot: PathBuf,
        /// Policy parameters (JSON) instead of the snapshot's `config`:
        /// `POLICY=FILE` for one policy (repeatable), `FILE` for all others.
        #[arg(long, value_name = "[POLICY=]FILE")]
        config: Vec<String>,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        #[command(flatten)]
        render: super::render::RenderArgs,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Hold decisions made anywhere to the host's rules: the verdict the
    /// controller would give them on SNAPSHOT (accepted, preempting, waiting,
    /// rejected, and each refused decision with its rule and reason).
    ///
    /// DECISIONS is a JSON array of decisions as a policy returns them,
    /// positions into the snapshot, in serde's tagged form:
    /// `[{"assign": {"pod": 0, "node": 1, "gpus": [0, 1]}}, {"wait": {"pod":
    /// 1, "reason": "no room"}}]`. The SDKs' `testing` modules call this to
    /// check a unit test's round. Exit status: 0 when nothing is refused, 2
    /// when something is (the verdict is printed either way, as with `run
    /// --fail-on-refused`), 1 on an error (unreadable or invalid input).
    Validate {
        /// A snapshot file (JSON; see `wasmgpu policy snapshot-schema`).
        #[arg(long)]
        snapshot: PathBuf,
        /// The decisions (a JSON array; `-` reads standard input).
        #[arg(long)]
        decisions: PathBuf,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Time repeated rounds: median and p99 of instantiate, call, reset
    /// (the instance's memory, when it goes) and validate.
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
    ///
    /// With --oci REF instead of FILE, the ConfigMap names a component pushed
    /// to an OCI registry (`wasmgpu policy push`): `data["component.ref"]`,
    /// and `wasmgpu.io/pull-secret` from --pull-secret; any component it
    /// carried is removed in the same step.
    Publish {
        /// The policy component (.wasm).
        #[arg(required_unless_present = "oci")]
        file: Option<PathBuf>,
        /// Name a component in an OCI registry instead of carrying one:
        /// oci://REGISTRY/REPOSITORY@sha256:<manifest digest>, as `policy
        /// push` prints it.
        #[arg(long, value_name = "REF", conflicts_with = "file")]
        oci: Option<String>,
        /// The Secret (kubernetes.io/dockerconfigjson, in the namespace) with
        /// the registry's credentials and optional `ca.crt`, for --oci.
        #[arg(long, value_name = "SECRET", requires = "oci")]
        pull_secret: Option<String>,
        /// The policy's name (the ConfigMap's; GPUResources name it in `spec.policy`).
        #[arg(long)]
        name: String,
        /// The policy's parameters (JSON), handed to it as `snapshot.config`.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Publish it as a shadow of policy PRIMARY (annotation
        /// `wasmgpu.io/shadow-of`): the controller calls it after PRIMARY on
        /// the same snapshots and compares its decisions, never applying
        /// them (`wasmgpu policy shadow NAME` shows how they compare).
        /// Publishing NAME again without it makes NAME decide.
        #[arg(long, value_name = "PRIMARY")]
        shadow_of: Option<String>,
        /// The controller's policy namespace [default: $POD_NAMESPACE, else wasmgpu-system].
        #[arg(long, short)]
        namespace: Option<String>,
    },
    /// Push a component to an OCI registry, as a Wasm OCI artifact (config
    /// `application/vnd.wasm.config.v0+json`, layer `application/wasm`, as
    /// `wkg oci push` writes it), under TARGET's tag. Prints the reference
    /// pinned to the manifest's digest (`oci://REGISTRY/REPOSITORY@sha256:…`):
    /// put it in a policy ConfigMap's `data["component.ref"]` (see
    /// docs/POLICIES.md, "Components too big for a ConfigMap"). FILE is
    /// checked as `policy check` does before anything is sent.
    Push {
        /// The policy component (.wasm).
        file: PathBuf,
        /// Where: oci://REGISTRY/REPOSITORY:TAG.
        target: String,
        #[command(flatten)]
        registry: super::policy_push::RegistryArgs,
    },
    /// Show the policy ConfigMaps in the cluster and what the controller
    /// made of each: the policy a shadow runs beside (SHADOW-OF), active
    /// digest and version, the digest of its config.json (CONFIG: a change
    /// of parameters alone shows there), when it was loaded, and why the
    /// last version tried was rejected (from the `wasmgpu.io/status`
    /// annotation the controller writes).
    List {
        /// The controller's policy namespace [default: $POD_NAMESPACE, else wasmgpu-system].
        #[arg(long, short)]
        namespace: Option<String>,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Show how shadow policy NAME's decisions compare with its primary's,
    /// from the `wasmgpu.io/shadow-status` annotation the controller writes:
    /// pods placed on the same node and GPUs, the same node on other GPUs,
    /// another node, by the primary only, by the shadow only, and decisions
    /// of the shadow the host refused; since when, rounds compared, failed
    /// and skipped (its previous call still ran), the last error, and the
    /// last rounds with the pods decided differently.
    Shadow {
        /// The shadow policy (its ConfigMap's name).
        name: String,
        /// The controller's policy namespace [default: $POD_NAMESPACE, else wasmgpu-system].
        #[arg(long, short)]
        namespace: Option<String>,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Write the snapshot the controller would hand policy NAME in its next
    /// round, from the cluster of the current kubeconfig: the objects the
    /// controller watches (Nodes, GPUNodes, GPUResources, wasmgpu's Pods),
    /// listed once and fed to the controller's own index and snapshot
    /// builder, with `config.json` from the policy's ConfigMap. Bindings the
    /// controller has in flight at that moment are not visible from here.
    ///
    /// With --recorded URL, a round the controller recorded instead: the
    /// exact snapshot it handed the policy, kept for the last N rounds when
    /// the policy's ConfigMap is annotated `wasmgpu.io/record-rounds: "N"`
    /// (at most 20), served at the controller's --http-address, e.g. after
    /// `kubectl port-forward -n wasmgpu-system deploy/wasmgpu-controller
    /// 8080`: `--recorded http://127.0.0.1:8080`.
    Snapshot {
        /// The policy whose pending pods the snapshot carries.
        #[arg(long, value_name = "NAME")]
        policy: String,
        /// Read a recorded round from the controller at this URL (its
        /// --http-address) instead of building the next one.
        #[arg(long, value_name = "URL")]
        recorded: Option<String>,
        /// With --recorded: the round to read (default: the latest).
        #[arg(long, value_name = "N", requires = "recorded")]
        round: Option<u64>,
        /// With --recorded: list the recorded rounds instead.
        #[arg(long, requires = "recorded", conflicts_with = "round")]
        list: bool,
        /// Where to write it (standard output when absent).
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// The controller's policy namespace [default: $POD_NAMESPACE, else wasmgpu-system].
        #[arg(long, short)]
        namespace: Option<String>,
        /// The controller's --default-policy: the policy of GPUResources that name none.
        #[arg(long, value_name = "NAME", default_value = "binpack")]
        default_policy: String,
    },
    /// Print the JSON Schema of snapshot files.
    SnapshotSchema,
    /// Rewrite a snapshot file in today's form (contract 0.3): a file of
    /// contract 0.2, or of the first form (snake_case keys, labels as
    /// pairs), is read with a warning until it is rewritten.
    UpgradeSnapshot {
        /// The snapshot file.
        file: PathBuf,
        /// Where to write it [default: FILE itself].
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Print the JSON Schema of a command's `--output json` (see
    /// docs/POLICIES.md, "JSON output").
    OutputSchema {
        /// The command whose output to describe.
        #[arg(value_enum)]
        command: SchemaOf,
    },
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
    /// A snapshot file (JSON; see `wasmgpu policy snapshot-schema`). Besides
    /// its shape, its contents are checked as the controller's snapshots
    /// would be (unique names, indices in range, counts of 1 to 16, …).
    #[arg(long)]
    snapshot: PathBuf,
    /// Policy parameters (JSON) to hand to the policy instead of the snapshot's `config`.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// Per-call limits of the policy commands: fuel (deterministic, counted
/// and reported), the deadline and memory as the controller's.
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// Fuel per call (about one unit per Wasm instruction): a deterministic
    /// limit, the same on every machine, and the fuel used is reported. 0
    /// turns fuel metering off: only the deadline bounds a call, which runs
    /// about 10% faster (docs/BENCHMARKS.md; the controller's default).
    #[arg(long, default_value_t = Limits::default().fuel)]
    fuel: u64,
    #[command(flatten)]
    bounds: BoundArgs,
}

/// The wall-clock and memory limits of each policy call (defaults are the
/// controller's and the policy commands').
#[derive(Debug, Args)]
pub(crate) struct BoundArgs {
    /// Wall-clock deadline per call, in milliseconds.
    #[arg(long, default_value_t = Limits::default().deadline.as_millis() as u64)]
    deadline_ms: u64,
    /// Largest linear memory per call, in MiB.
    #[arg(long, default_value_t = (Limits::default().memory_bytes >> 20) as u64)]
    memory_mib: u64,
}

impl LimitArgs {
    /// The limits these flags describe.
    pub(crate) fn limits(&self) -> anyhow::Result<Limits> {
        self.bounds.limits(self.fuel)
    }

    fn engine(&self) -> anyhow::Result<Engine> {
        super::engine::cli_engine(self.limits()?)
    }
}

impl BoundArgs {
    /// The limits these flags describe, with `fuel` per call (0: none).
    pub(crate) fn limits(&self, fuel: u64) -> anyhow::Result<Limits> {
        Ok(Limits {
            fuel,
            deadline: Duration::from_millis(self.deadline_ms),
            memory_bytes: self
                .memory_mib
                .checked_mul(1 << 20)
                .and_then(|bytes| usize::try_from(bytes).ok())
                .with_context(|| {
                    format!(
                        "--memory-mib: {} is too large (at most {} MiB)",
                        self.memory_mib,
                        usize::MAX >> 20
                    )
                })?,
            ..Limits::default()
        })
    }
}

impl Input {
    fn load(&self) -> anyhow::Result<HostSnapshot> {
        let mut snapshot = snapshot_file::read(&self.snapshot)?;
        if let Some(path) = &self.config {
            snapshot.snapshot.config = read_config(path)?;
        }
        Ok(snapshot)
    }
}

/// A `--config` file's text, once it is known to be JSON.
fn read_config(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --config {}", path.display()))?;
    serde_json::from_str::<serde_json::Value>(&text)
        .with_context(|| format!("--config {} is not valid JSON", path.display()))?;
    Ok(text)
}

/// `policy compare`'s `--config [POLICY=]FILE` flags.
#[derive(Debug, Default, PartialEq)]
struct CompareConfigs {
    /// For every policy not named in `per_policy`.
    all: Option<PathBuf>,
    /// POLICY (a name or a file) and its parameters.
    per_policy: Vec<(String, PathBuf)>,
}

impl CompareConfigs {
    fn parse(flags: &[String]) -> anyhow::Result<Self> {
        let mut configs = CompareConfigs::default();
        for flag in flags {
            match flag.split_once('=') {
                Some((policy, file)) if !Path::new(flag).exists() => {
                    if policy.is_empty() || file.is_empty() {
                        anyhow::bail!("--config {flag}: write POLICY=FILE or FILE");
                    }
                    configs.per_policy.push((policy.into(), file.into()));
                }
                _ => {
                    if let Some(all) = &configs.all {
                        anyhow::bail!(
                            "--config {flag}: a plain FILE goes to every policy and {} already does; \
                             name the policy: --config POLICY={flag}",
                            all.display()
                        );
                    }
                    configs.all = Some(flag.into());
                }
            }
        }
        Ok(configs)
    }

    /// The parameters for `policy` (loaded from `file`), if any flag gives it some.
    fn of(&self, policy: &LoadedPolicy, file: &Path) -> anyhow::Result<Option<String>> {
        let mine: Vec<&PathBuf> = self
            .per_policy
            .iter()
            .filter(|(key, _)| names(key, policy, file))
            .map(|(_, path)| path)
            .collect();
        match mine[..] {
            [] => self.all.as_deref().map(read_config).transpose(),
            [path] => read_config(path).map(Some),
            _ => anyhow::bail!(
                "--config: {} is given parameters {} times; give it one",
                policy.info().name,
                mine.len()
            ),
        }
    }

    /// An error for a `POLICY=FILE` flag that names none of the policies.
    fn all_used(
        &self,
        rounds: &[(LoadedPolicy, HostSnapshot)],
        files: &[PathBuf],
    ) -> anyhow::Result<()> {
        for (key, path) in &self.per_policy {
            let used = rounds
                .iter()
                .zip(files)
                .any(|((policy, _), file)| names(key, policy, file));
            if !used {
                let known: Vec<String> = rounds
                    .iter()
                    .zip(files)
                    .map(|((policy, _), file)| {
                        format!("{} ({})", policy.info().name, file.display())
                    })
                    .collect();
                anyhow::bail!(
                    "--config {key}={}: no policy named {key}; the policies are {}",
                    path.display(),
                    known.join(", ")
                );
            }
        }
        Ok(())
    }
}

/// True when `key` names `policy`: its `describe()` name, its file as
/// given, or the file's name without `.wasm`.
fn names(key: &str, policy: &LoadedPolicy, file: &Path) -> bool {
    key == policy.info().name
        || Path::new(key) == file
        || file.file_stem().is_some_and(|stem| stem == key)
}

pub(crate) fn load_policy(engine: &Engine, file: &Path) -> anyhow::Result<LoadedPolicy> {
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
            PolicyCommand::New {
                name,
                dir,
                sdk,
                lang,
            } => new_policy(&name, dir.as_deref(), sdk.as_deref(), lang),
            PolicyCommand::Check { file, output } => check(&file, output),
            PolicyCommand::Publish {
                file,
                oci,
                pull_secret,
                name,
                config,
                shadow_of,
                namespace,
            } => {
                let target = super::policy_cluster::Target {
                    name,
                    namespace: super::policy_cluster::namespace(namespace),
                    shadow_of,
                };
                publish(
                    file,
                    oci,
                    pull_secret.as_deref(),
                    config.as_deref(),
                    &target,
                )
            }
            PolicyCommand::Push {
                file,
                target,
                registry,
            } => super::policy_push::push(&file, &target, &registry),
            PolicyCommand::List { namespace, output } => {
                super::policy_cluster::list(super::policy_cluster::namespace(namespace), output)
            }
            PolicyCommand::Shadow {
                name,
                namespace,
                output,
            } => super::policy_shadow::show(
                &name,
                &super::policy_cluster::namespace(namespace),
                output,
            ),
            PolicyCommand::Run {
                file,
                input,
                output,
                fail_on_refused,
                render,
                limits,
            } => {
                let engine = limits.engine()?;
                let policy = load_policy(&engine, &file)?;
                let snapshot = input.load()?;
                policy_run::run(&policy, &snapshot, output, fail_on_refused, &render)
            }
            PolicyCommand::Compare {
                files,
                snapshot,
                config,
                output,
                render,
                limits,
            } => compare(&files, &snapshot, &config, output, &render, &limits),
            PolicyCommand::Validate {
                snapshot,
                decisions,
                output,
            } => {
                let snapshot = super::snapshot_file::read(&snapshot)?;
                super::policy_validate::validate(&snapshot, &decisions, output)
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
                policy_run::bench(&policy, &snapshot, rounds, output)
            }
            PolicyCommand::Snapshot {
                policy,
                recorded: Some(url),
                round,
                list,
                out: file,
                ..
            } => super::policy_snapshot::recorded(&url, &policy, round, list, file.as_deref()),
            PolicyCommand::Snapshot {
                policy,
                out: file,
                namespace,
                default_policy,
                ..
            } => super::policy_snapshot::export(
                &policy,
                &super::policy_cluster::namespace(namespace),
                &default_policy,
                file.as_deref(),
            ),
            PolicyCommand::SnapshotSchema => {
                stdout::json(&schemars::schema_for!(
                    wasmgpu_contract::snapshot_file::SnapshotFile
                ))?;
                Ok(ExitCode::SUCCESS)
            }
            PolicyCommand::UpgradeSnapshot { file, out } => upgrade_snapshot(&file, out),
            PolicyCommand::OutputSchema { command } => {
                stdout::json(&command.schema())?;
                Ok(ExitCode::SUCCESS)
            }
            PolicyCommand::GenerateSnapshot {
                nodes,
                pods,
                out: file,
            } => generate_snapshot(nodes, pods, file.as_deref()),
        }
    }
}

/// `wasmgpu policy new`: a project for a new policy, its tests run on a
/// generated snapshot.
fn new_policy(
    name: &str,
    dir: Option<&Path>,
    sdk: Option<&Path>,
    lang: super::policy_new::Lang,
) -> anyhow::Result<ExitCode> {
    let example = generated_snapshot(8, 12)?;
    let message = super::policy_new::new(name, dir, sdk, lang, example)?;
    stdout::print(&message)?;
    Ok(ExitCode::SUCCESS)
}

/// `wasmgpu policy publish`: a file into a ConfigMap, or a reference to an
/// OCI artifact.
fn publish(
    file: Option<PathBuf>,
    oci: Option<String>,
    pull_secret: Option<&str>,
    config: Option<&Path>,
    target: &super::policy_cluster::Target,
) -> anyhow::Result<ExitCode> {
    target.check()?;
    match (file, oci) {
        (_, Some(reference)) => {
            super::policy_cluster::publish_ref(&reference, pull_secret, config, target)
        }
        (Some(file), None) => super::policy_cluster::publish(&file, config, target),
        (None, None) => anyhow::bail!("give FILE or --oci REF"),
    }
}

/// `wasmgpu policy compare`: several policies on one snapshot, each with
/// its own configuration where given.
fn compare(
    files: &[PathBuf],
    snapshot: &Path,
    config: &[String],
    output: Output,
    render: &super::render::RenderArgs,
    limits: &LimitArgs,
) -> anyhow::Result<ExitCode> {
    let engine = limits.engine()?;
    let snapshot = snapshot_file::read(snapshot)?;
    let configs = CompareConfigs::parse(config)?;
    let mut rounds = Vec::new();
    for file in files {
        let policy = load_policy(&engine, file)?;
        let mut snapshot = snapshot.clone();
        if let Some(text) = configs.of(&policy, file)? {
            snapshot.snapshot.config = text;
        }
        rounds.push((policy, snapshot));
    }
    configs.all_used(&rounds, files)?;
    policy_run::compare(&rounds, output, render).map_err(|error| match &configs.all {
        Some(all) => error.context(format!(
            "--config {} went to every policy; give a policy that takes other \
             parameters its own with --config POLICY=FILE",
            all.display()
        )),
        None => error,
    })
}

/// `wasmgpu policy upgrade-snapshot`: a snapshot file rewritten in the
/// current format, in place unless `out` is given.
fn upgrade_snapshot(file: &Path, out: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let snapshot = snapshot_file::read(file)?;
    let json = wasmgpu_contract::snapshot_file::to_json(&snapshot)?;
    let out = out.unwrap_or_else(|| file.to_owned());
    std::fs::write(&out, json + "\n").with_context(|| format!("writing {}", out.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// `wasmgpu policy generate-snapshot`: into `file`, or to standard output.
fn generate_snapshot(nodes: u32, pods: u32, file: Option<&Path>) -> anyhow::Result<ExitCode> {
    let json = generated_snapshot(nodes, pods)?;
    match file {
        Some(path) => {
            std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?
        }
        None => stdout::println(&json)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The JSON of `generate-snapshot --nodes NODES --pods PODS`.
fn generated_snapshot(nodes: u32, pods: u32) -> anyhow::Result<String> {
    let snapshot = wasmgpu_contract::testing::large(nodes, pods);
    let host = HostSnapshot::from_snapshot(snapshot);
    Ok(wasmgpu_contract::snapshot_file::to_json(&host)?)
}

fn check(file: &Path, output: Output) -> anyhow::Result<ExitCode> {
    let engine = super::engine::cli_engine(Limits::default())?;
    let policy = match load_policy(&engine, file) {
        Ok(policy) => policy,
        Err(error) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {error:#}");
            return Ok(ExitCode::FAILURE);
        }
    };
    match output {
        Output::Json => stdout::json(&CheckOutput::of(&policy))?,
        Output::Table => {
            let info = policy.info();
            let mut text = format!(
                "ok: {} is a {} component\n",
                file.display(),
                wasmgpu_engine::CONTRACT
            );
            text += &format!("name         {}\n", info.name);
            text += &format!("version      {}\n", info.version);
            text += &format!("description  {}\n", info.description);
            text += &format!("size         {} bytes\n", policy.size());
            text += &format!("digest       {}\n", policy.digest());
            text += &format!(
                "imports      {}\n",
                policy.imports().join("\n             ")
            );
            stdout::print(&text)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
