//! `wasmgpu agent`: publish this node's GPUs as its `GPUNode`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tracing_subscriber::EnvFilter;

use super::output::AgentOnceOutput;
use super::output_format::Output;
use super::stdout;
use super::table::Table;
use wasmgpu_agent::deviceplugin::{self, DeviceOptions, NodePods, ResponseOptions, Strategy};
use wasmgpu_agent::file::FileSource;
use wasmgpu_agent::nvml::NvmlSource;
use wasmgpu_agent::{Agent, GpuSource, HealthRules, StatusPublisher};
use wasmgpu_api::{GPUNodeStatus, GpuInfo};

/// Publish this node's GPUs (read through NVML) as the status of the
/// cluster-scoped GPUNode named after the node.
///
/// The agent reads the GPUs every --interval and on every critical XID or
/// double-bit ECC event, and writes the GPUNode (server-side apply, field
/// manager `wasmgpu-agent`) only when something changed; a GPUNode deleted
/// while the agent runs is created again within one interval. It finds the
/// API server as kubectl does: KUBECONFIG, ~/.kube/config, or the in-cluster
/// service account.
///
/// Without NVIDIA's library (libnvidia-ml.so.1) it refuses to start, unless
/// given --inventory FILE: a simulated node, for development and tests.
///
/// It is also the kubelet's device plugin for the extended resource
/// wasmgpu.io/gpu (API v1beta1, socket wasmgpu.sock in --device-plugin-dir):
/// it advertises each GPU whole and as replicas `<uuid>::<k>` for shared use,
/// with the GPU's health, and hands a starting pod exactly the GPUs the
/// controller recorded on it (annotation wasmgpu.io/allocation), as CDI
/// devices `nvidia.com/gpu=<uuid>`; an offer of other devices is refused with
/// an Event on the pod. See docs/AGENT.md.
#[derive(Debug, Args)]
pub struct AgentCommand {
    /// Name of this node, and of its GPUNode (in a DaemonSet: from the
    /// downward API's spec.nodeName).
    #[arg(
        long,
        env = "NODE_NAME",
        value_name = "NAME",
        required_unless_present = "once"
    )]
    node_name: Option<String>,
    /// Read the GPUs from FILE (YAML or JSON, see docs/AGENT.md) instead of
    /// NVML; the file is read again when it changes.
    #[arg(long, value_name = "FILE")]
    inventory: Option<PathBuf>,
    /// How often to read the GPUs and publish a change (e.g. 500ms, 10s, 1m).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    interval: Duration,
    /// XIDs that do not make a GPU unhealthy, comma-separated, or `none` to
    /// count every XID. The default is the list of XIDs NVIDIA's device plugin
    /// attributes to applications.
    #[arg(long, value_name = "XIDS", default_value = DEFAULT_IGNORED_XIDS, value_parser = parse_xids)]
    ignore_xids: IgnoredXids,
    /// Print the node's GPUs once and exit, without contacting the API server.
    #[arg(long)]
    once: bool,
    /// Format of --once: a table, or JSON with the raw reading and the status
    /// that would be published (its schema: `wasmgpu policy output-schema
    /// agent-once`).
    #[arg(long, value_enum, default_value_t, requires = "once")]
    output: Output,
    /// Do not serve the kubelet device plugin API (a simulated node without
    /// a kubelet, or a node whose GPUs another device plugin hands out).
    #[arg(long)]
    no_device_plugin: bool,
    /// The kubelet's device plugin directory (its kubelet.sock; the plugin
    /// serves wasmgpu.sock beside it).
    #[arg(long, value_name = "DIR", default_value = deviceplugin::DEFAULT_DIR)]
    device_plugin_dir: PathBuf,
    /// How the granted GPUs reach the container: CDI device names, or
    /// NVIDIA's volume-mounts list (nodes without CDI; needs the toolkit's
    /// accept-nvidia-visible-devices-as-volume-mounts=true).
    #[arg(long, value_enum, default_value_t)]
    device_list_strategy: Strategy,
    /// Set CUDA_MPS_PINNED_DEVICE_MEM_LIMIT to the share for pods on shared
    /// GPUs (effective only where an MPS control daemon serves the node).
    #[arg(long)]
    mps_memory_limit: bool,
    /// The smallest share of a shared GPU (MiB): each GPU is advertised as
    /// memory / this many replicas for shared use.
    #[arg(long, value_name = "MIB", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    min_share_mib: u64,
    /// How long the device plugin holds its claim on a starting pod while
    /// waiting for the kubelet's next call.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    claim_ttl: Duration,
}

/// The parsed `--ignore-xids`.
#[derive(Clone, Debug)]
struct IgnoredXids(Vec<u64>);

/// [`APPLICATION_XIDS`], as the flag's default (a test checks they agree).
const DEFAULT_IGNORED_XIDS: &str = "13,31,43,45,68,109";

fn parse_xids(text: &str) -> Result<IgnoredXids, String> {
    if text.trim().eq_ignore_ascii_case("none") || text.trim().is_empty() {
        return Ok(IgnoredXids(Vec::new()));
    }
    text.split(',')
        .map(|x| {
            x.trim()
                .parse::<u64>()
                .map_err(|_| format!("{x:?} is not an XID (a whole number)"))
        })
        .collect::<Result<_, _>>()
        .map(IgnoredXids)
}

/// A duration as the other commands take them (`500ms`, `10s`, `1m`), not zero.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))?;
    if duration.is_zero() {
        return Err("the interval must be more than zero".into());
    }
    Ok(duration)
}

impl AgentCommand {
    /// Runs the agent (or prints one snapshot with `--once`).
    pub fn run(self) -> anyhow::Result<ExitCode> {
        tracing_subscriber::fmt()
            .with_env_filter(
                EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
            )
            .with_writer(std::io::stderr)
            .try_init()
            .ok();
        let source: Box<dyn GpuSource> = match &self.inventory {
            // Poll the file's modification time more often than the interval,
            // so that an edit is published within a second.
            Some(path) => Box::new(FileSource::new(
                path,
                self.interval.min(Duration::from_secs(1)),
            )),
            None => Box::new(NvmlSource::init()?),
        };
        let mut agent = Agent::new(source, HealthRules::ignoring(self.ignore_xids.0.clone()));
        if self.once {
            let (reading, status) = agent.snapshot()?;
            match self.output {
                Output::Table => stdout::print(&table(&status))?,
                Output::Json => stdout::json(&AgentOnceOutput { reading, status })?,
            }
            return Ok(ExitCode::SUCCESS);
        }
        let node = self
            .node_name
            .context("--node-name (or NODE_NAME) is required")?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let client = kube::Client::try_default()
                .await
                .context("connecting to the API server")?;
            let publisher = StatusPublisher::start(client.clone(), &node).await?;
            if !self.no_device_plugin {
                let (statuses, received) = tokio::sync::watch::channel(None);
                agent.report_to(statuses);
                let config = deviceplugin::Config {
                    dir: self.device_plugin_dir.clone(),
                    devices: DeviceOptions {
                        min_share_mib: self.min_share_mib,
                    },
                    response: ResponseOptions {
                        strategy: self.device_list_strategy,
                        mps_memory_limit: self.mps_memory_limit,
                    },
                    claim_ttl: self.claim_ttl,
                    pod_wait: Duration::from_secs(10),
                    check: self.interval.min(Duration::from_secs(1)),
                };
                let pods = NodePods::watch(client, &node);
                deviceplugin::start(config, &node, pods, received);
            }
            agent.run(publisher, self.interval).await?;
            anyhow::Ok(())
        })?;
        Ok(ExitCode::SUCCESS)
    }
}

fn table(status: &GPUNodeStatus) -> String {
    let mut out = format!(
        "Driver {}   CUDA {}   GPUs {} ({} healthy)",
        status.driver_version.as_deref().unwrap_or("-"),
        status.cuda_version.as_deref().unwrap_or("-"),
        status.gpus_total,
        status.gpus_healthy
    );
    if status.mig_instances_total > 0 {
        out.push_str(&format!("   MIG instances {}", status.mig_instances_total));
    }
    out.push('\n');
    let index_of = |uuid: &str| {
        status
            .gpus
            .iter()
            .find(|g| g.uuid == uuid)
            .map(|g| g.index.to_string())
            .unwrap_or_else(|| uuid.to_owned())
    };
    let mut table = Table::new(&[
        "GPU", "MODEL", "MEMORY", "UTIL", "TEMP", "PCI", "NUMA", "NVLINK", "MIG", "HEALTH", "UUID",
    ]);
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for gpu in &status.gpus {
        let GpuInfo { index, model, .. } = gpu;
        let health = match &gpu.unhealthy_reason {
            None => "ok".to_owned(),
            Some(reason) => format!("UNHEALTHY: {reason}"),
        };
        table.row(vec![
            index.to_string(),
            model.clone(),
            format!("{} / {} MiB", gpu.memory_used_mib, gpu.memory_total_mib),
            opt(gpu.utilization_percent.map(|u| format!("{u}%"))),
            opt(gpu.temperature_c.map(|t| format!("{t}C"))),
            gpu.pci_bus_id.clone(),
            opt(gpu.numa_node.map(|n| n.to_string())),
            if gpu.nvlink_peers.is_empty() {
                "-".into()
            } else {
                gpu.nvlink_peers
                    .iter()
                    .map(|p| index_of(p))
                    .collect::<Vec<_>>()
                    .join(",")
            },
            opt(gpu.mig_mode.map(|m| format!("{m:?}"))),
            health.clone(),
            gpu.uuid.clone(),
        ]);
        // One line per MIG instance, under its GPU; an instance shares its
        // GPU's health.
        for (slot, mig) in gpu.mig_instances.iter().enumerate() {
            let ids = match (mig.gpu_instance_id, mig.compute_instance_id) {
                (Some(gi), Some(ci)) => format!("GI {gi} CI {ci}"),
                (Some(gi), None) => format!("GI {gi}"),
                (None, Some(ci)) => format!("CI {ci}"),
                (None, None) => "-".into(),
            };
            table.row(vec![
                format!("{index}:{slot}"),
                format!("MIG {}", mig.profile),
                format!("{} MiB", mig.memory_total_mib),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                ids,
                health.clone(),
                mig.uuid.clone(),
            ]);
        }
    }
    out.push_str(&table.render());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgpu_agent::APPLICATION_XIDS;

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("10x").unwrap_err().contains("\"10x\""));
        assert!(parse_duration("0s").is_err());
    }

    #[test]
    fn the_table_lists_mig_instances_under_their_gpu() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/inventory/mig.yaml"
        ))
        .unwrap();
        let reading =
            wasmgpu_agent::file::parse(&text, k8s_openapi::jiff::Timestamp::UNIX_EPOCH).unwrap();
        let rules = HealthRules::default();
        let faults = wasmgpu_agent::health::Faults::default();
        let mut status = wasmgpu_agent::convert::to_status(
            &reading,
            wasmgpu_agent::convert::Context {
                source: "test",
                read_error: None,
                rules: &rules,
                faults: &faults,
                now: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            },
        );
        status.gpus[0].unhealthy_reason = Some("XID 79".into());
        let shown = table(&status);
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[0].ends_with("MIG instances 4"), "{shown}");
        // GPU 0, its four instances, then GPU 1.
        let first: Vec<&str> = lines[2..]
            .iter()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(first, ["0", "0:0", "0:1", "0:2", "0:3", "1"], "{shown}");
        let instance = lines[3];
        for want in [
            "MIG 3g.40gb",
            "40192 MiB",
            "GI 2 CI 0",
            "UNHEALTHY: XID 79",
            "MIG-4f1a6c2e-8b3d-5e7f-9a0b-1c2d3e4f5a60",
        ] {
            assert!(instance.contains(want), "{want:?} in {instance:?}");
        }
        assert!(
            lines[7].contains("Disabled") && lines[7].contains("ok"),
            "{shown}"
        );
    }

    #[test]
    fn xids_parse_as_a_list_or_none() {
        assert_eq!(parse_xids("13, 31,43").unwrap().0, [13, 31, 43]);
        assert!(parse_xids("none").unwrap().0.is_empty());
        assert!(parse_xids("13,x").unwrap_err().contains("\"x\""));
        assert_eq!(
            parse_xids(DEFAULT_IGNORED_XIDS).unwrap().0,
            APPLICATION_XIDS
        );
    }
}
