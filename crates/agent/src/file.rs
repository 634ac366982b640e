//! The inventory file source: a simulated node, for machines without GPUs.
//!
//! The file (YAML, or JSON, which is YAML too) lists the same raw facts NVML
//! reports, so it goes through the same conversion; see `docs/AGENT.md` for
//! the format and `deploy/inventory/` for examples. It is read again on every
//! publish interval, and at once when its modification time changes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc::UnboundedSender as Sender;

use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

use super::source::{
    EventKind, GpuSource, HealthEvent, RawGpu, RawMigInstance, Reading, Signal, SourceError,
};
use wasmgpu_api::MigMode;

const MIB: u64 = 1024 * 1024;
/// Most memory a GPU may have, in MiB: what bytes in a `u64` can hold.
const MAX_MIB: u64 = u64::MAX / MIB;

/// An inventory file, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InventoryFile {
    /// NVIDIA driver version.
    #[serde(default)]
    pub driver_version: Option<String>,
    /// CUDA version.
    #[serde(default)]
    pub cuda_version: Option<String>,
    /// The GPUs.
    pub gpus: Vec<InventoryGpu>,
}

/// One GPU of an inventory file.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InventoryGpu {
    /// Index on the node.
    pub index: u32,
    /// UUID, unique on the node.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Total memory, MiB.
    #[serde(rename = "memoryTotalMiB")]
    pub memory_total_mib: u64,
    /// Memory in use, MiB.
    #[serde(default, rename = "memoryUsedMiB")]
    pub memory_used_mib: u64,
    /// Utilisation, percent.
    #[serde(default)]
    pub utilization_percent: Option<u32>,
    /// Temperature, degrees Celsius.
    #[serde(default, rename = "temperatureC")]
    pub temperature_c: Option<i32>,
    /// PCI bus id, unique on the node.
    pub pci_bus_id: String,
    /// NUMA node.
    #[serde(default)]
    pub numa_node: Option<u32>,
    /// Far ends of the GPU's NVLinks (PCI bus ids of GPUs or NVSwitches).
    #[serde(default)]
    pub nvlinks: Vec<String>,
    /// MIG mode.
    #[serde(default)]
    pub mig_mode: Option<MigMode>,
    /// MIG instances (only with `migMode: Enabled`).
    #[serde(default)]
    pub mig_instances: Vec<InventoryMigInstance>,
    /// Critical events seen on the GPU.
    #[serde(default)]
    pub events: Vec<InventoryEvent>,
}

/// A MIG instance of an inventory file's GPU.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InventoryMigInstance {
    /// UUID (`MIG-…`), unique on the node.
    pub uuid: String,
    /// Profile, e.g. `1g.10gb`.
    pub profile: String,
    /// Memory, MiB: more than 0, at most the GPU's.
    #[serde(rename = "memoryTotalMiB")]
    pub memory_total_mib: u64,
    /// GPU instance id.
    #[serde(default)]
    pub gpu_instance_id: Option<u32>,
    /// Compute instance id.
    #[serde(default)]
    pub compute_instance_id: Option<u32>,
}

/// A critical event in an inventory file: exactly one of `xid` and
/// `doubleBitEcc: true`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InventoryEvent {
    /// An XID error.
    #[serde(default)]
    pub xid: Option<u64>,
    /// A double-bit ECC error.
    #[serde(default)]
    pub double_bit_ecc: bool,
    /// When it happened (default: the file's modification time).
    #[serde(default)]
    pub at: Option<Timestamp>,
}

/// Parses and checks an inventory; `modified` stands in for events without `at`.
/// Errors name the field, e.g. `gpus[1].uuid: …`.
pub fn parse(text: &str, modified: Timestamp) -> Result<Reading, String> {
    let inventory: InventoryFile = serde_norway::from_str(text).map_err(|e| e.to_string())?;
    inventory.into_reading(modified)
}

impl InventoryFile {
    fn into_reading(self, modified: Timestamp) -> Result<Reading, String> {
        // Every UUID on the node (GPUs and MIG instances) with where it is.
        let mut uuids: BTreeMap<&str, String> = BTreeMap::new();
        let mut indices: BTreeMap<u32, usize> = BTreeMap::new();
        let mut buses: BTreeMap<String, usize> = BTreeMap::new();
        for (i, gpu) in self.gpus.iter().enumerate() {
            if gpu.uuid.trim().is_empty() {
                return Err(format!("gpus[{i}].uuid: must not be empty"));
            }
            if gpu.pci_bus_id.trim().is_empty() {
                return Err(format!("gpus[{i}].pciBusId: must not be empty"));
            }
            if let Some(other) = uuids.insert(&gpu.uuid, format!("gpus[{i}].uuid")) {
                return Err(format!("gpus[{i}].uuid: {:?} repeats {other}", gpu.uuid));
            }
            if let Some(j) = indices.insert(gpu.index, i) {
                return Err(format!(
                    "gpus[{i}].index: {} repeats gpus[{j}].index",
                    gpu.index
                ));
            }
            let bus = super::convert::normalize_bus_id(&gpu.pci_bus_id);
            if let Some(j) = buses.insert(bus, i) {
                return Err(format!(
                    "gpus[{i}].pciBusId: {:?} repeats gpus[{j}].pciBusId",
                    gpu.pci_bus_id
                ));
            }
            if gpu.memory_total_mib > MAX_MIB {
                return Err(format!(
                    "gpus[{i}].memoryTotalMiB: {} is too large (at most {MAX_MIB} MiB)",
                    gpu.memory_total_mib
                ));
            }
            if gpu.memory_used_mib > gpu.memory_total_mib {
                return Err(format!(
                    "gpus[{i}].memoryUsedMiB: {} is more than memoryTotalMiB ({})",
                    gpu.memory_used_mib, gpu.memory_total_mib
                ));
            }
            if let Some(u) = gpu.utilization_percent.filter(|u| *u > 100) {
                return Err(format!(
                    "gpus[{i}].utilizationPercent: {u} is more than 100"
                ));
            }
            check_mig_instances(i, gpu, &mut uuids)?;
        }
        let mut gpus = Vec::with_capacity(self.gpus.len());
        for (i, gpu) in self.gpus.into_iter().enumerate() {
            let mut events = Vec::with_capacity(gpu.events.len());
            for (e, event) in gpu.events.into_iter().enumerate() {
                let kind = match (event.xid, event.double_bit_ecc) {
                    (Some(xid), false) => EventKind::Xid(xid),
                    (None, true) => EventKind::DoubleBitEcc,
                    _ => {
                        return Err(format!(
                            "gpus[{i}].events[{e}]: needs exactly one of xid and doubleBitEcc: true"
                        ));
                    }
                };
                events.push(HealthEvent {
                    uuid: gpu.uuid.clone(),
                    kind,
                    at: event.at.unwrap_or(modified),
                });
            }
            gpus.push(RawGpu {
                index: gpu.index,
                uuid: gpu.uuid,
                name: gpu.name,
                memory_total_bytes: gpu.memory_total_mib * MIB,
                memory_used_bytes: gpu.memory_used_mib * MIB,
                utilization_percent: gpu.utilization_percent,
                temperature_c: gpu.temperature_c,
                pci_bus_id: gpu.pci_bus_id,
                numa_node: gpu.numa_node,
                nvlink_remote_pci_bus_ids: gpu.nvlinks,
                mig_mode: gpu.mig_mode,
                mig_instances: gpu
                    .mig_instances
                    .into_iter()
                    .map(|m| RawMigInstance {
                        uuid: m.uuid,
                        profile: m.profile,
                        memory_total_bytes: m.memory_total_mib * MIB,
                        gpu_instance_id: m.gpu_instance_id,
                        compute_instance_id: m.compute_instance_id,
                    })
                    .collect(),
                events,
                fault: None,
            });
        }
        Ok(Reading {
            driver_version: self.driver_version,
            cuda_version: self.cuda_version,
            gpus,
        })
    }
}

/// Checks the MIG instances of `gpu` (at `gpus[i]`), adding their UUIDs to
/// `uuids`.
fn check_mig_instances<'a>(
    i: usize,
    gpu: &'a InventoryGpu,
    uuids: &mut BTreeMap<&'a str, String>,
) -> Result<(), String> {
    if gpu.mig_instances.is_empty() {
        return Ok(());
    }
    if gpu.mig_mode != Some(MigMode::Enabled) {
        return Err(format!(
            "gpus[{i}].migInstances: a GPU has MIG instances only with migMode: Enabled \
             (set it, or remove the instances)"
        ));
    }
    let mut ids: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    let mut memory: u64 = 0;
    for (m, mig) in gpu.mig_instances.iter().enumerate() {
        let at = format!("gpus[{i}].migInstances[{m}]");
        if !mig.uuid.starts_with("MIG-") || mig.uuid.trim().len() <= "MIG-".len() {
            return Err(format!(
                "{at}.uuid: {:?} is not a MIG device UUID (MIG-…, as nvidia-smi -L shows it)",
                mig.uuid
            ));
        }
        if let Some(other) = uuids.insert(&mig.uuid, format!("{at}.uuid")) {
            return Err(format!("{at}.uuid: {:?} repeats {other}", mig.uuid));
        }
        if !super::nvml::is_profile(&mig.profile) {
            return Err(format!(
                "{at}.profile: {:?} is not a MIG profile (e.g. 1g.10gb, 3g.40gb, 1c.2g.20gb)",
                mig.profile
            ));
        }
        if mig.memory_total_mib == 0 {
            return Err(format!("{at}.memoryTotalMiB: must be more than 0"));
        }
        if mig.memory_total_mib > gpu.memory_total_mib {
            return Err(format!(
                "{at}.memoryTotalMiB: {} is more than the GPU's memoryTotalMiB ({})",
                mig.memory_total_mib, gpu.memory_total_mib
            ));
        }
        memory = memory.saturating_add(mig.memory_total_mib);
        if memory > gpu.memory_total_mib {
            return Err(format!(
                "{at}.memoryTotalMiB: the instances up to this one have {memory} MiB, more \
                 than the GPU's memoryTotalMiB ({})",
                gpu.memory_total_mib
            ));
        }
        if let (Some(gi), Some(ci)) = (mig.gpu_instance_id, mig.compute_instance_id)
            && let Some(j) = ids.insert((gi, ci), m)
        {
            return Err(format!(
                "{at}: gpuInstanceId {gi} with computeInstanceId {ci} repeats \
                 gpus[{i}].migInstances[{j}]"
            ));
        }
    }
    Ok(())
}

// === impl FileSource ===

/// Reads an inventory file.
#[derive(Debug)]
pub struct FileSource {
    path: PathBuf,
    poll: Duration,
}

impl FileSource {
    /// A source reading `path`; [`GpuSource::watch`] checks its modification
    /// time every `poll`.
    pub fn new(path: impl Into<PathBuf>, poll: Duration) -> Self {
        Self {
            path: path.into(),
            poll,
        }
    }
}

fn modified(path: &Path) -> std::io::Result<SystemTime> {
    std::fs::metadata(path)?.modified()
}

impl GpuSource for FileSource {
    fn describe(&self) -> String {
        format!("inventory {}", self.path.display())
    }

    fn read(&mut self) -> Result<Reading, SourceError> {
        let path = self.path.display().to_string();
        let io = |error| SourceError::Io {
            path: path.clone(),
            error,
        };
        let text = std::fs::read_to_string(&self.path).map_err(io)?;
        let mtime = modified(&self.path).map_err(io)?;
        let mtime = Timestamp::try_from(mtime).unwrap_or(Timestamp::UNIX_EPOCH);
        parse(&text, mtime).map_err(|message| SourceError::Invalid {
            path: path.clone(),
            message,
        })
    }

    fn watch(&mut self, signals: Sender<Signal>) -> Result<(), SourceError> {
        let path = self.path.clone();
        let poll = self.poll;
        std::thread::Builder::new()
            .name("inventory-watch".into())
            .spawn(move || {
                let mut last = modified(&path).ok();
                loop {
                    std::thread::sleep(poll);
                    let now = modified(&path).ok();
                    if now != last {
                        last = now;
                        tracing::debug!(path = %path.display(), "Inventory changed");
                        if signals.send(Signal::Changed).is_err() {
                            return;
                        }
                    }
                }
            })
            .map_err(|error| SourceError::Watch {
                what: self.describe(),
                error,
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODIFIED: &str = "2026-11-30T12:00:00Z";

    fn parsed(text: &str) -> Result<Reading, String> {
        parse(text, MODIFIED.parse().unwrap())
    }

    const TWO: &str = r#"
driverVersion: "570.124.06"
cudaVersion: "12.8"
gpus:
  - index: 0
    uuid: GPU-a
    name: NVIDIA A100-SXM4-40GB
    memoryTotalMiB: 40960
    pciBusId: "00000000:07:00.0"
    numaNode: 0
    nvlinks: ["00000000:0F:00.0", "00000000:0F:00.0"]
    migMode: Disabled
  - index: 1
    uuid: GPU-b
    name: NVIDIA A100-SXM4-40GB
    memoryTotalMiB: 40960
    memoryUsedMiB: 1024
    utilizationPercent: 37
    temperatureC: 41
    pciBusId: "0000:0f:00.0"
    nvlinks: ["00000000:07:00.0"]
    events:
      - xid: 79
        at: "2026-11-30T14:03:58Z"
      - doubleBitEcc: true
"#;

    #[test]
    fn an_inventory_reads_as_raw_facts() {
        let reading = parsed(TWO).unwrap();
        assert_eq!(reading.driver_version.as_deref(), Some("570.124.06"));
        assert_eq!(reading.cuda_version.as_deref(), Some("12.8"));
        assert_eq!(reading.gpus.len(), 2);
        let b = &reading.gpus[1];
        assert_eq!(b.memory_total_bytes, 40960 * MIB);
        assert_eq!(b.memory_used_bytes, 1024 * MIB);
        assert_eq!(b.utilization_percent, Some(37));
        assert_eq!(b.temperature_c, Some(41));
        assert_eq!(reading.gpus[0].mig_mode, Some(MigMode::Disabled));
        assert_eq!(reading.gpus[0].numa_node, Some(0));
        assert_eq!(
            b.events,
            [
                HealthEvent {
                    uuid: "GPU-b".into(),
                    kind: EventKind::Xid(79),
                    at: "2026-11-30T14:03:58Z".parse().unwrap()
                },
                HealthEvent {
                    uuid: "GPU-b".into(),
                    kind: EventKind::DoubleBitEcc,
                    at: MODIFIED.parse().unwrap()
                },
            ]
        );
    }

    #[test]
    fn json_inventories_read_too() {
        let reading = parsed(
            r#"{"gpus": [{"index": 0, "uuid": "GPU-x", "name": "NVIDIA L4",
                "memoryTotalMiB": 23034, "pciBusId": "00000000:01:00.0"}]}"#,
        )
        .unwrap();
        assert_eq!(reading.gpus[0].name, "NVIDIA L4");
        assert_eq!(reading.driver_version, None);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                TWO.replace("    uuid: GPU-b\n", ""),
                "gpus[1]: missing field `uuid`",
            ),
            (
                TWO.replace("uuid: GPU-b", "uuid: GPU-a"),
                "gpus[1].uuid: \"GPU-a\" repeats gpus[0].uuid",
            ),
            (
                TWO.replace("index: 1", "index: 0"),
                "gpus[1].index: 0 repeats gpus[0].index",
            ),
            (
                TWO.replace("0000:0f:00.0", "00000000:07:00.0"),
                "gpus[1].pciBusId: \"00000000:07:00.0\" repeats gpus[0].pciBusId",
            ),
            (
                TWO.replace("memoryUsedMiB: 1024", "memoryUsedMiB: 50000"),
                "gpus[1].memoryUsedMiB: 50000 is more than",
            ),
            (
                TWO.replace("utilizationPercent: 37", "utilizationPercent: 137"),
                "gpus[1].utilizationPercent: 137",
            ),
            (
                TWO.replace("temperatureC: 41", "temperature: 41"),
                "gpus[1]: unknown field `temperature`",
            ),
            (
                TWO.replace("migMode: Disabled", "migMode: Sometimes"),
                "gpus[0].migMode: unknown variant `Sometimes`",
            ),
            (
                TWO.replace(
                    "memoryTotalMiB: 40960\n    memoryUsedMiB",
                    "memoryTotalMiB: lots\n    memoryUsedMiB",
                ),
                "gpus[1].memoryTotalMiB: invalid type",
            ),
            (
                TWO.replace("doubleBitEcc: true", "at: \"2026-11-30T14:03:58Z\""),
                "gpus[1].events[1]: needs exactly one of xid and doubleBitEcc",
            ),
            (
                TWO.replace("uuid: GPU-a", "uuid: \" \""),
                "gpus[0].uuid: must not be empty",
            ),
            (
                TWO.replace(
                    "memoryTotalMiB: 40960\n    memoryUsedMiB",
                    "memoryTotalMiB: 18446744073709551615\n    memoryUsedMiB",
                ),
                "gpus[1].memoryTotalMiB: 18446744073709551615 is too large (at most 17592186044415 MiB)",
            ),
        ];
        for (text, want) in cases {
            let got = parsed(&text).expect_err(want);
            assert!(got.contains(want), "want: {want}\ngot:  {got}");
        }
    }

    /// GPU 0 of [`TWO`] with MIG enabled and three instances.
    fn with_mig() -> String {
        TWO.replace(
            "    migMode: Disabled\n",
            r#"    migMode: Enabled
    migInstances:
      - uuid: MIG-0
        profile: 3g.20gb
        memoryTotalMiB: 20096
        gpuInstanceId: 1
        computeInstanceId: 0
      - uuid: MIG-1
        profile: 2g.10gb
        memoryTotalMiB: 9856
      - uuid: MIG-2
        profile: 1c.2g.10gb
        memoryTotalMiB: 9856
        gpuInstanceId: 5
        computeInstanceId: 1
"#,
        )
    }

    #[test]
    fn mig_instances_read_with_their_gpu() {
        let reading = parsed(&with_mig()).unwrap();
        let gpu = &reading.gpus[0];
        assert_eq!(gpu.mig_mode, Some(MigMode::Enabled));
        assert_eq!(
            gpu.mig_instances[0],
            RawMigInstance {
                uuid: "MIG-0".into(),
                profile: "3g.20gb".into(),
                memory_total_bytes: 20096 * MIB,
                gpu_instance_id: Some(1),
                compute_instance_id: Some(0),
            }
        );
        assert_eq!(
            (
                gpu.mig_instances[1].gpu_instance_id,
                gpu.mig_instances[1].compute_instance_id
            ),
            (None, None)
        );
        assert_eq!(gpu.mig_instances.len(), 3);
        assert!(reading.gpus[1].mig_instances.is_empty());
    }

    #[test]
    fn mig_errors_name_the_field() {
        let mig = with_mig();
        let cases = [
            (
                mig.replace("migMode: Enabled", "migMode: Disabled"),
                "gpus[0].migInstances: a GPU has MIG instances only with migMode: Enabled",
            ),
            (
                mig.replace("    migMode: Enabled\n", ""),
                "gpus[0].migInstances: a GPU has MIG instances only with migMode: Enabled",
            ),
            (
                mig.replace("uuid: MIG-1", "uuid: GPU-1"),
                "gpus[0].migInstances[1].uuid: \"GPU-1\" is not a MIG device UUID",
            ),
            (
                mig.replace("uuid: MIG-1", "uuid: \"MIG-\""),
                "gpus[0].migInstances[1].uuid: \"MIG-\" is not a MIG device UUID",
            ),
            (
                mig.replace("uuid: MIG-2", "uuid: MIG-0"),
                "gpus[0].migInstances[2].uuid: \"MIG-0\" repeats gpus[0].migInstances[0].uuid",
            ),
            (
                mig.replace("uuid: GPU-b", "uuid: MIG-1"),
                "gpus[1].uuid: \"MIG-1\" repeats gpus[0].migInstances[1].uuid",
            ),
            (
                mig.replace("profile: 2g.10gb", "profile: \"\""),
                "gpus[0].migInstances[1].profile: \"\" is not a MIG profile",
            ),
            (
                mig.replace("profile: 2g.10gb", "profile: large"),
                "gpus[0].migInstances[1].profile: \"large\" is not a MIG profile",
            ),
            (
                mig.replace(
                    "memoryTotalMiB: 9856\n      - uuid: MIG-2",
                    "memoryTotalMiB: 0\n      - uuid: MIG-2",
                ),
                "gpus[0].migInstances[1].memoryTotalMiB: must be more than 0",
            ),
            (
                mig.replace("memoryTotalMiB: 20096", "memoryTotalMiB: 40961"),
                "gpus[0].migInstances[0].memoryTotalMiB: 40961 is more than the GPU's memoryTotalMiB (40960)",
            ),
            (
                mig.replace("memoryTotalMiB: 20096", "memoryTotalMiB: 32000"),
                "gpus[0].migInstances[1].memoryTotalMiB: the instances up to this one have 41856 MiB, more than the GPU's memoryTotalMiB (40960)",
            ),
            (
                mig.replace(
                    "gpuInstanceId: 5\n        computeInstanceId: 1",
                    "gpuInstanceId: 1\n        computeInstanceId: 0",
                ),
                "gpus[0].migInstances[2]: gpuInstanceId 1 with computeInstanceId 0 repeats gpus[0].migInstances[0]",
            ),
            (
                mig.replace("profile: 3g.20gb", "profil: 3g.20gb"),
                "gpus[0].migInstances[0]: unknown field `profil`",
            ),
            (
                mig.replace("        profile: 3g.20gb\n", ""),
                "gpus[0].migInstances[0]: missing field `profile`",
            ),
        ];
        for (text, want) in cases {
            let got = parsed(&text).expect_err(want);
            assert!(got.contains(want), "want: {want}\ngot:  {got}");
        }
    }

    const KEYS: &[&str] = &[
        "driverVersion",
        "cudaVersion",
        "gpus",
        "index",
        "uuid",
        "name",
        "memoryTotalMiB",
        "memoryUsedMiB",
        "utilizationPercent",
        "temperatureC",
        "pciBusId",
        "numaNode",
        "nvlinks",
        "migMode",
        "migInstances",
        "profile",
        "gpuInstanceId",
        "computeInstanceId",
        "events",
        "xid",
        "doubleBitEcc",
        "at",
    ];

    /// Reads `text` as an inventory and, when it is one, converts it to the
    /// status the agent would publish.
    fn read_and_convert(text: &str) {
        if let Ok(reading) = parsed(text) {
            let rules = crate::health::HealthRules::ignoring([13]);
            let faults = crate::health::Faults::default();
            crate::convert::to_status(
                &reading,
                crate::convert::Context {
                    source: "test",
                    read_error: None,
                    rules: &rules,
                    faults: &faults,
                    now: MODIFIED.parse().unwrap(),
                },
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        #[test]
        fn arbitrary_json_is_an_error_or_an_inventory(
            json in wasmgpu_support::testing::arbitrary_json(KEYS),
        ) {
            read_and_convert(&json.to_string());
        }

        /// Any numbers and strings in the right places.
        #[test]
        fn arbitrary_values_are_an_error_or_an_inventory(
            total in proptest::prelude::any::<u64>(),
            used in proptest::prop_oneof![9 => 0u64..=40960, 1 => proptest::prelude::any::<u64>()],
            percent in proptest::prop_oneof![9 => 0u32..=100, 1 => proptest::prelude::any::<u32>()],
            index in proptest::prelude::any::<u32>(),
            xid in proptest::prelude::any::<u64>(),
            bus in "[0-9a-fA-F:.]{0,20}",
            link in "[0-9a-fA-F:.]{0,20}",
        ) {
            let text = TWO
                .replace("memoryTotalMiB: 40960\n    memoryUsedMiB", &format!("memoryTotalMiB: {total}\n    memoryUsedMiB"))
                .replace("memoryUsedMiB: 1024", &format!("memoryUsedMiB: {used}"))
                .replace("utilizationPercent: 37", &format!("utilizationPercent: {percent}"))
                .replace("index: 1", &format!("index: {index}"))
                .replace("xid: 79", &format!("xid: {xid}"))
                .replace("0000:0f:00.0", &bus)
                .replace("00000000:07:00.0\"]", &format!("{link}\"]"));
            read_and_convert(&text);
            // What is read is what the file says: no bits silently lost.
            if let Ok(reading) = parsed(&text) {
                proptest::prop_assert_eq!(reading.gpus[1].memory_total_bytes / MIB, total);
            }
        }
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let mut source = FileSource::new("/nonexistent/node.yaml", Duration::from_secs(1));
        let error = source.read().unwrap_err().to_string();
        assert!(
            error.starts_with("cannot read inventory /nonexistent/node.yaml"),
            "{error}"
        );
    }
}
