//! Snapshot files: what `wasmgpu policy snapshot` exports, authors edit and
//! share, and `policy run|compare|bench` read. A file holds a
//! [`HostSnapshot`]: what a policy sees plus every node label and GPU UUID,
//! so one file serves any policy, whatever labels it asks for.
//!
//! wasmgpu writes `"contract": "wasmgpu:policy@…"` as the first field. A file
//! without it (written by hand) is read as the current contract. Files of
//! the previous contract (0.2) and of the first form (snake_case keys) are
//! read with [`Read::upgraded_from`] set, so the reader can say how to
//! rewrite them (`wasmgpu policy upgrade-snapshot`); any other version is
//! refused, naming both.
//!
//! In files, sets are lists: `eligibleSets` as sorted node positions and a
//! GPU's `nvlink` as the GPU indices it links to (numbers JSON readers keep
//! exactly), a node's labels as a map.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::bits;
pub use crate::bounds::CONTRACT;
use crate::host_snapshot::{HostNode, HostSnapshot, SharedCounters};
use crate::types::{
    Gang, Gpu, GpuRef, MigInstance, Node, Publisher, Request, Running, Snapshot, Tenant,
};

/// The contract before this one, whose files are read and upgraded.
pub const PREVIOUS_CONTRACT: &str = "wasmgpu:policy@0.2.0";

/// A snapshot file, as JSON.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct SnapshotFile {
    /// The contract the snapshot follows, e.g. `wasmgpu:policy@0.3.0`.
    /// Written by wasmgpu; optional in hand-written files (read as this
    /// wasmgpu's contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
    /// The round it was taken in.
    pub round: u64,
    /// GPU product names; a GPU's `model` indexes this list.
    pub models: Vec<String>,
    /// MIG profile names; a MIG instance's `profile` indexes it.
    #[serde(default)]
    pub mig_profiles: Vec<String>,
    /// Namespaces of pending and running pods, sorted; a pod's `namespace`
    /// indexes this list.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Nodes, with every label and each GPU's UUID.
    pub nodes: Vec<FileNode>,
    /// Pending pods, oldest first.
    pub pending: Vec<Request>,
    /// Pods holding GPUs.
    #[serde(default)]
    pub running: Vec<Running>,
    /// Node sets, each as sorted node positions.
    pub eligible_sets: Vec<Vec<u32>>,
    /// Candidate GPUs of DRA alternatives.
    #[serde(default)]
    pub candidate_sets: Vec<Vec<GpuRef>>,
    /// Gangs.
    #[serde(default)]
    pub gangs: Vec<Gang>,
    /// Tenants.
    #[serde(default)]
    pub tenants: Vec<Tenant>,
    /// The policy's `config.json`, verbatim.
    #[serde(default)]
    pub config: String,
}

/// A node in a snapshot file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct FileNode {
    /// Kubernetes node name.
    pub name: String,
    /// Every label of the node.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Its GPUs and MIG instances, in the contract's order.
    pub gpus: Vec<FileGpu>,
    /// What is left of each DRA shared counter of its partitionable
    /// devices, by `<driver>/<pool>/<counterSet>/<counter>`, once the
    /// devices in use consumed theirs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shared_counters_left: BTreeMap<String, u64>,
}

/// A GPU in a snapshot file: the contract's `gpu` with its UUID.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct FileGpu {
    /// NVML UUID; `GPU-{node}-{position}` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The contract's `index`.
    pub index: u32,
    /// The contract's `model`.
    pub model: u32,
    /// The contract's `memory-mib`.
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// The contract's `allocated-mib`.
    #[serde(rename = "allocatedMiB", default)]
    pub allocated_mib: u64,
    /// The contract's `held`.
    #[serde(default)]
    pub held: bool,
    /// The contract's `shared-owners`.
    #[serde(default)]
    pub shared_owners: u32,
    /// The contract's `numa-node`.
    #[serde(default)]
    pub numa_node: Option<u32>,
    /// The indices of the GPUs it has an NVLink to (below 64).
    #[serde(default)]
    pub nvlink: Vec<u32>,
    /// The contract's `healthy`.
    pub healthy: bool,
    /// The contract's `mig`.
    #[serde(default)]
    pub mig: Option<MigInstance>,
    /// The contract's `published-by`.
    #[serde(default)]
    pub published_by: Publisher,
    /// The DRA shared counters it consumes (named as the node's
    /// `sharedCountersLeft`) and how much of each.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub consumes_counters: BTreeMap<String, u64>,
}

/// A file node's shared counters as the host holds them; a counter a GPU
/// consumes that the node does not list has nothing left.
fn counters_of(node: &FileNode) -> SharedCounters {
    let mut left: Vec<(String, u64)> = node
        .shared_counters_left
        .iter()
        .map(|(name, value)| (name.clone(), *value))
        .collect();
    let mut consumes: Vec<Vec<(u32, u64)>> = Vec::new();
    for (g, gpu) in node.gpus.iter().enumerate() {
        for (name, &amount) in &gpu.consumes_counters {
            let c = match left.iter().position(|(n, _)| n == name) {
                Some(c) => c,
                None => {
                    left.push((name.clone(), 0));
                    left.len() - 1
                }
            };
            consumes.resize(g + 1, Vec::new());
            consumes[g].push((c as u32, amount));
        }
    }
    SharedCounters { left, consumes }
}

// === impl SnapshotFile ===

impl SnapshotFile {
    /// The file form of a host snapshot.
    pub fn of(host: &HostSnapshot) -> SnapshotFile {
        let s = &host.snapshot;
        let nodes = s
            .nodes
            .iter()
            .zip(&host.nodes)
            .map(|(node, names)| FileNode {
                name: node.name.clone(),
                labels: (*names.labels).clone(),
                shared_counters_left: names.counters.left.iter().cloned().collect(),
                gpus: node
                    .gpus
                    .iter()
                    .zip(names.uuids.iter())
                    .enumerate()
                    .map(|(position, (g, uuid))| FileGpu {
                        uuid: Some(uuid.clone()),
                        index: g.index,
                        model: g.model,
                        memory_mib: g.memory_mib,
                        allocated_mib: g.allocated_mib,
                        held: g.held,
                        shared_owners: g.shared_owners,
                        numa_node: g.numa_node,
                        nvlink: bits::nvlink_indices(g.nvlink).collect(),
                        healthy: g.healthy,
                        mig: g.mig,
                        published_by: g.published_by,
                        consumes_counters: names
                            .counters
                            .of(position as u32)
                            .iter()
                            .filter_map(|&(c, amount)| {
                                Some((names.counters.left.get(c as usize)?.0.clone(), amount))
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        SnapshotFile {
            contract: Some(CONTRACT.to_owned()),
            round: s.round,
            models: s.models.clone(),
            mig_profiles: s.mig_profiles.clone(),
            namespaces: s.namespaces.clone(),
            nodes,
            pending: s.pending.clone(),
            running: s.running.clone(),
            eligible_sets: s
                .eligible_sets
                .iter()
                .map(|set| bits::indices(set).collect())
                .collect(),
            candidate_sets: s.candidate_sets.clone(),
            gangs: s.gangs.clone(),
            tenants: s.tenants.clone(),
            config: s.config.clone(),
        }
    }

    /// The host snapshot the file holds (no labels given to a policy yet;
    /// see [`HostSnapshot::for_policy`]).
    pub fn into_host(self) -> HostSnapshot {
        let node_count = self.nodes.len();
        let (nodes, names) = self
            .nodes
            .into_iter()
            .map(|node| {
                let counters = counters_of(&node);
                let uuids: Vec<String> = node
                    .gpus
                    .iter()
                    .enumerate()
                    .map(|(g, gpu)| {
                        gpu.uuid
                            .clone()
                            .unwrap_or_else(|| format!("GPU-{}-{g}", node.name))
                    })
                    .collect();
                let gpus = node
                    .gpus
                    .into_iter()
                    .map(|g| Gpu {
                        index: g.index,
                        model: g.model,
                        memory_mib: g.memory_mib,
                        allocated_mib: g.allocated_mib,
                        held: g.held,
                        shared_owners: g.shared_owners,
                        numa_node: g.numa_node,
                        nvlink: bits::nvlink_of(g.nvlink),
                        healthy: g.healthy,
                        mig: g.mig,
                        published_by: g.published_by,
                    })
                    .collect();
                (
                    Node {
                        name: node.name,
                        labels: Vec::new(),
                        gpus,
                    },
                    HostNode {
                        labels: node.labels.into(),
                        uuids: uuids.into(),
                        counters,
                    },
                )
            })
            .unzip();
        HostSnapshot {
            snapshot: Snapshot {
                round: self.round,
                models: self.models,
                mig_profiles: self.mig_profiles,
                namespaces: self.namespaces,
                label_keys: Vec::new(),
                nodes,
                pending: self.pending,
                running: self.running,
                eligible_sets: self
                    .eligible_sets
                    .into_iter()
                    .map(|set| bits::from_indices(node_count, set))
                    .collect(),
                candidate_sets: self.candidate_sets,
                gangs: self.gangs,
                tenants: self.tenants,
                config: self.config,
            },
            nodes: names,
            resources: Vec::new(),
        }
    }
}

/// A snapshot file of another contract version.
#[derive(Debug, thiserror::Error)]
#[error(
    "a snapshot of {found}, but this wasmgpu reads {CONTRACT} snapshots (and upgrades \
     {PREVIOUS_CONTRACT} ones): export it again with this version's `wasmgpu policy \
     snapshot` (or `generate-snapshot`), or use a wasmgpu of {found}"
)]
pub struct OtherContract {
    /// The version the file names.
    pub found: String,
}

/// `snapshot` as the text of a snapshot file (JSON on one line).
pub fn to_json(snapshot: &HostSnapshot) -> serde_json::Result<String> {
    serde_json::to_string(&SnapshotFile::of(snapshot))
}

/// The contract a file's text names, if it names one.
fn named_contract(text: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Probe {
        contract: Option<serde_json::Value>,
    }
    let found = serde_json::from_str::<Probe>(text).ok()?.contract?;
    Some(
        found
            .as_str()
            .map_or_else(|| found.to_string(), str::to_owned),
    )
}

/// Refuses the text of a snapshot file that names a contract this wasmgpu
/// neither reads nor upgrades. Text that is not a JSON object passes:
/// parsing it says what is wrong.
pub fn check(text: &str) -> Result<(), OtherContract> {
    match named_contract(text) {
        Some(found) if found != CONTRACT && found != PREVIOUS_CONTRACT => {
            Err(OtherContract { found })
        }
        _ => Ok(()),
    }
}

/// An older form a file was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OldForm {
    /// Contract 0.2 with snake_case keys and labels as pairs.
    First,
    /// Contract 0.2 ([`PREVIOUS_CONTRACT`]).
    Previous,
}

impl OldForm {
    /// How to say it to the reader.
    pub fn describe(self) -> &'static str {
        match self {
            OldForm::First => "the first snapshot form (snake_case keys, contract 0.2)",
            OldForm::Previous => "contract 0.2 (wasmgpu:policy@0.2.0)",
        }
    }
}

/// A snapshot file's text, read.
#[derive(Debug)]
pub struct Read {
    /// The snapshot.
    pub snapshot: HostSnapshot,
    /// Set when the file was of an older form, upgraded as it was read:
    /// write it again to keep it current.
    pub upgraded_from: Option<OldForm>,
}

/// Reads the text of a snapshot file of this contract, or of an older form
/// it upgrades (see [`Read::upgraded_from`]). An error is the error of
/// today's form, with its line and column.
pub fn read(text: &str) -> serde_json::Result<Read> {
    let named = named_contract(text);
    let error = if named.as_deref() == Some(PREVIOUS_CONTRACT) {
        None
    } else {
        match serde_json::from_str::<SnapshotFile>(text) {
            Ok(file) => {
                return Ok(Read {
                    snapshot: file.into_host(),
                    upgraded_from: None,
                });
            }
            Err(error) => Some(error),
        }
    };
    let mut value = serde_json::from_str::<serde_json::Value>(text)?;
    let first = crate::upgrade::first_form_to_previous(&mut value);
    let previous = first || named.as_deref() == Some(PREVIOUS_CONTRACT) || looks_previous(&value);
    if !previous {
        return Err(error.expect("a file of today's form that failed to parse"));
    }
    crate::upgrade::previous_to_current(&mut value);
    match serde_json::from_value::<SnapshotFile>(value) {
        Ok(file) => Ok(Read {
            snapshot: file.into_host(),
            upgraded_from: Some(if first {
                OldForm::First
            } else {
                OldForm::Previous
            }),
        }),
        Err(later) => Err(error.unwrap_or(later)),
    }
}

/// Whether an unversioned file is of the 0.2 shape (requests with their
/// shape at the top, GPUs with `nvlinkPeers`, or `usage`).
fn looks_previous(value: &serde_json::Value) -> bool {
    let Some(top) = value.as_object() else {
        return false;
    };
    top.contains_key("usage")
        || top
            .get("pending")
            .and_then(|p| p.as_array())
            .is_some_and(|p| p.iter().any(|r| r.get("count").is_some()))
        || top
            .get("nodes")
            .and_then(|n| n.as_array())
            .is_some_and(|nodes| {
                nodes.iter().any(|n| {
                    n.get("gpus")
                        .and_then(|g| g.as_array())
                        .is_some_and(|g| g.iter().any(|g| g.get("nvlinkPeers").is_some()))
                })
            })
}

/// Why a snapshot file's text is not a snapshot a policy may see: the
/// contract crate's one error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not JSON, or not of the snapshot's shape.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Of the right shape, but no controller would build it.
    #[error(transparent)]
    Invalid(#[from] crate::snapshot_check::SnapshotError),
    /// Of another contract version (`"contract"`).
    #[error(transparent)]
    Contract(#[from] OtherContract),
}

impl Error {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Json(_) => "json",
            Error::Invalid(_) => "invalid",
            Error::Contract(_) => "other-contract",
        }
    }
}

/// Reads a snapshot file's text ([`read`]) of a contract this wasmgpu reads
/// ([`check`]), and holds it to the rules the controller's snapshots obey
/// ([`crate::snapshot_check::check`]).
pub fn parse(text: &str) -> Result<Read, Error> {
    check(text)?;
    let read = read(text)?;
    crate::snapshot_check::check(&read.snapshot)?;
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEMO: &str = include_str!("../../../policies/snapshots/demo.json");

    #[test]
    fn files_name_their_contract_and_another_is_refused_naming_both() {
        let demo = read(DEMO).unwrap();
        assert_eq!(
            demo.upgraded_from, None,
            "the shipped demo is of today's form"
        );
        let text = to_json(&demo.snapshot).unwrap();
        assert!(
            text.starts_with(&format!("{{\"contract\":\"{CONTRACT}\",")),
            "{text}"
        );
        assert!(check(&text).is_ok());
        assert_eq!(read(&text).unwrap().snapshot, demo.snapshot);

        let old = text.replace(CONTRACT, "wasmgpu:policy@0.0.1");
        let error = check(&old).unwrap_err().to_string();
        assert!(
            error.contains("a snapshot of wasmgpu:policy@0.0.1, but this wasmgpu reads")
                && error.contains(CONTRACT),
            "{error}"
        );
        // Hand-written files carry no version; text that is not JSON is
        // left for the parser to explain.
        assert!(check(DEMO).is_ok());
        assert!(check("not json").is_ok());
    }

    #[test]
    fn files_of_older_forms_read_as_todays_and_say_so() {
        let today = read(DEMO).unwrap().snapshot;
        let previous = crate::testing::previous_form(&today);
        assert!(previous.contains("\"nvlinkPeers\""), "{previous}");
        let upgraded = read(&previous).unwrap();
        assert_eq!(upgraded.upgraded_from, Some(OldForm::Previous));
        assert_eq!(upgraded.snapshot, today);

        let first = crate::testing::first_form(&previous);
        assert!(
            first.contains("\"eligible_sets\"") && first.contains("\"Exclusive\""),
            "{first}"
        );
        let upgraded = read(&first).unwrap();
        assert_eq!(upgraded.upgraded_from, Some(OldForm::First));
        assert_eq!(upgraded.snapshot, today);
        assert!(!today.nodes[0].labels.is_empty());

        // Today's form that is wrong keeps its own error, with its place.
        let error = read(&DEMO.replacen("\"round\"", "\"rounds\"", 1)).unwrap_err();
        assert!(
            error.to_string().contains("missing field `round`"),
            "{error}"
        );
    }
}
