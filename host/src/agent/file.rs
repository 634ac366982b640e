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

use super::source::{EventKind, GpuSource, HealthEvent, RawGpu, Reading, Signal, SourceError};
use crate::api::MigMode;

const MIB: u64 = 1024 * 1024;
/// Most memory a GPU may have, in MiB: what bytes in a `u64` can hold.
const MAX_MIB: u64 = u64::MAX / MIB;

/// An inventory file, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Inventory {
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
    /// Critical events seen on the GPU.
    #[serde(default)]
    pub events: Vec<InventoryEvent>,
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
    let inventory: Inventory = serde_norway::from_str(text).map_err(|e| e.to_string())?;
    inventory.into_reading(modified)
}

impl Inventory {
    fn into_reading(self, modified: Timestamp) -> Result<Reading, String> {
        let mut uuids: BTreeMap<&str, usize> = BTreeMap::new();
        let mut indices: BTreeMap<u32, usize> = BTreeMap::new();
        let mut buses: BTreeMap<String, usize> = BTreeMap::new();
        for (i, gpu) in self.gpus.iter().enumerate() {
            if gpu.uuid.trim().is_empty() {
                return Err(format!("gpus[{i}].uuid: must not be empty"));
            }
            if gpu.pci_bus_id.trim().is_empty() {
                return Err(format!("gpus[{i}].pciBusId: must not be empty"));
            }
            if let Some(j) = uuids.insert(&gpu.uuid, i) {
                return Err(format!(
                    "gpus[{i}].uuid: {:?} repeats gpus[{j}].uuid",
                    gpu.uuid
                ));
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
        "events",
        "xid",
        "doubleBitEcc",
        "at",
    ];

    /// Reads `text` as an inventory and, when it is one, converts it to the
    /// status the agent would publish.
    fn read_and_convert(text: &str) {
        if let Ok(reading) = parsed(text) {
            let rules = crate::agent::HealthRules::ignoring([13]);
            let faults = crate::agent::health::Faults::default();
            crate::agent::convert::to_status(
                &reading,
                crate::agent::convert::Context {
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
            json in crate::fixtures::arbitrary_json(KEYS),
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
