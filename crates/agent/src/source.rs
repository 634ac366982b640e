//! What a GPU source reports: the raw facts of a node's GPUs, before any
//! interpretation, and the health events it sees between reads.

use tokio::sync::mpsc::UnboundedSender as Sender;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use wasmgpu_api::MigMode;

/// Where the agent reads GPUs from: NVML on a GPU node, or an inventory file.
///
/// Both report the same raw facts ([`Reading`]); turning them into a
/// `GPUNode` status is the same code for both ([`super::convert`]).
pub trait GpuSource: Send {
    /// A short description for logs and conditions, e.g. `NVML` or
    /// `inventory /etc/wasmgpu/node.yaml`.
    fn describe(&self) -> String;

    /// Reads the node's GPUs now.
    fn read(&mut self) -> Result<Reading, SourceError>;

    /// Starts sending what happens between reads (critical errors, a changed
    /// inventory) to `signals`, from a thread of the source's own. Called once.
    fn watch(&mut self, signals: Sender<Signal>) -> Result<(), SourceError>;
}

/// The node as one read saw it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reading {
    /// NVIDIA driver version, e.g. `570.124.06`.
    pub driver_version: Option<String>,
    /// Highest CUDA version the driver supports, e.g. `12.8`.
    pub cuda_version: Option<String>,
    /// The GPUs, in the order the source lists them.
    pub gpus: Vec<RawGpu>,
}

/// One GPU as the source reports it; optional facts are `None` where the
/// GPU does not support the query.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RawGpu {
    /// Index on the node (NVML / nvidia-smi order).
    pub index: u32,
    /// UUID, e.g. `GPU-5f2c…`.
    pub uuid: String,
    /// Product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Total memory, bytes.
    pub memory_total_bytes: u64,
    /// Memory in use, bytes.
    pub memory_used_bytes: u64,
    /// GPU utilisation, percent.
    pub utilization_percent: Option<u32>,
    /// Core temperature, degrees Celsius.
    pub temperature_c: Option<i32>,
    /// PCI bus id as the source spells it, e.g. `00000000:1B:00.0`.
    pub pci_bus_id: String,
    /// NUMA node, when the platform reports one.
    pub numa_node: Option<u32>,
    /// PCI bus ids at the far end of this GPU's active NVLinks, one entry
    /// per link: another GPU, or an NVSwitch that GPUs share.
    pub nvlink_remote_pci_bus_ids: Vec<String>,
    /// MIG mode, when the GPU supports MIG.
    pub mig_mode: Option<MigMode>,
    /// The MIG instances on the GPU (only when MIG is enabled), in the
    /// order the source lists them.
    #[serde(default)]
    pub mig_instances: Vec<RawMigInstance>,
    /// Critical events the source reports as part of the GPU's state (the
    /// inventory file's `events`); NVML's arrive as [`Signal::Health`].
    pub events: Vec<HealthEvent>,
    /// Why the source could not read this GPU fully (e.g. it fell off the
    /// bus): the GPU is published unhealthy with this reason.
    pub fault: Option<String>,
}

/// One MIG instance (a GPU instance with its compute instance) as the
/// source reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RawMigInstance {
    /// UUID of the MIG device, e.g. `MIG-0c4f…`.
    pub uuid: String,
    /// Profile name, e.g. `1g.10gb`.
    pub profile: String,
    /// Memory of the instance, bytes.
    pub memory_total_bytes: u64,
    /// GPU instance id on the parent GPU, when the source knows it.
    pub gpu_instance_id: Option<u32>,
    /// Compute instance id within the GPU instance, when the source knows it.
    pub compute_instance_id: Option<u32>,
}

/// Something a source reports between reads.
#[derive(Clone, Debug, PartialEq)]
pub enum Signal {
    /// A critical error on one GPU.
    Health(HealthEvent),
    /// The source's view changed (an edited inventory file): read again now.
    Changed,
}

/// A critical error reported for one GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthEvent {
    /// UUID of the GPU.
    pub uuid: String,
    /// What happened.
    pub kind: EventKind,
    /// When the agent saw it (or when the inventory file says it happened),
    /// RFC 3339.
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub at: Timestamp,
}

/// The kinds of critical events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum EventKind {
    /// An XID error with its number (NVML reports 999 for an unknown one).
    Xid(u64),
    /// A double-bit (uncorrectable) ECC error.
    DoubleBitEcc,
}

/// Why a source could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// NVIDIA's management library (`libnvidia-ml.so.1`) is not installed.
    #[error(
        "NVIDIA's management library (libnvidia-ml.so.1) was not found ({0}): install the \
         NVIDIA driver and run the agent on a GPU node, or pass --inventory FILE to publish \
         a simulated node"
    )]
    LibraryNotFound(String),
    /// NVML is installed but failed.
    #[error("NVML: {what}: {error}")]
    Nvml {
        /// The call that failed.
        what: String,
        /// NVML's error.
        error: String,
    },
    /// The inventory file cannot be read.
    #[error("cannot read inventory {path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The inventory file is not a valid inventory.
    #[error("invalid inventory {path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// The source's watch thread could not start.
    #[error("cannot start watching {what}: {error}")]
    Watch {
        /// What was to be watched.
        what: String,
        /// Why it failed.
        error: std::io::Error,
    },
}

impl SourceError {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceError::LibraryNotFound(_) => "nvml-not-found",
            SourceError::Nvml { .. } => "nvml",
            SourceError::Io { .. } => "inventory-unreadable",
            SourceError::Invalid { .. } => "inventory-invalid",
            SourceError::Watch { .. } => "watch",
        }
    }
}
