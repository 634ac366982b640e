//! `GPUNode`: the GPUs of one node, as its agent sees them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A node's GPU inventory. The object is cluster-scoped and named after the
/// node; everything lives in `status`, written by the node's agent.
// The printer columns repeat `type_` values, which clippy takes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "wasmgpu.io",
    version = "v1alpha1",
    kind = "GPUNode",
    plural = "gpunodes",
    shortname = "gpun",
    category = "wasmgpu",
    status = "GPUNodeStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "The GPUs of one node (named after it), published by the node's wasmgpu agent.",
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".status.gpusTotal"),
    printcolumn(name = "Healthy", type_ = "integer", json_path = ".status.gpusHealthy"),
    printcolumn(
        name = "MIG",
        type_ = "integer",
        json_path = ".status.migInstancesTotal"
    ),
    printcolumn(name = "Model", type_ = "string", json_path = ".status.model"),
    printcolumn(name = "Driver", type_ = "string", json_path = ".status.driverVersion"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct GPUNodeSpec {}

/// What the agent saw on its node at `lastUpdated`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GPUNodeStatus {
    /// NVIDIA driver version, e.g. `570.124.06`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// Highest CUDA version the driver supports, e.g. `12.8`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<String>,
    /// The GPUs, sorted by index.
    #[serde(default)]
    pub gpus: Vec<GpuInfo>,
    /// Number of GPUs (for `kubectl get`).
    #[serde(default)]
    pub gpus_total: u32,
    /// Number of healthy GPUs (for `kubectl get`).
    #[serde(default)]
    pub gpus_healthy: u32,
    /// Number of MIG instances over all GPUs (for `kubectl get`).
    #[serde(default)]
    pub mig_instances_total: u32,
    /// The most common GPU model on the node (for `kubectl get`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// When the agent last published this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    /// `Ready` (the agent reads NVML) and others, with reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// One GPU of a node.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GpuInfo {
    /// NVML UUID, e.g. `GPU-5f2c…`.
    pub uuid: String,
    /// Index on the node (NVML / nvidia-smi order).
    pub index: u32,
    /// Product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub model: String,
    /// Total memory, MiB.
    #[serde(rename = "memoryTotalMiB")]
    pub memory_total_mib: u64,
    /// Memory in use by any process, MiB.
    #[serde(default, rename = "memoryUsedMiB")]
    pub memory_used_mib: u64,
    /// GPU utilisation over the last sample period, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 100))]
    pub utilization_percent: Option<u32>,
    /// Core temperature, degrees Celsius.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "temperatureC"
    )]
    pub temperature_c: Option<i32>,
    /// PCI bus id, e.g. `00000000:1B:00.0`.
    #[serde(default)]
    pub pci_bus_id: String,
    /// NUMA node the GPU is attached to, when the platform reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// UUIDs of the GPUs on this node with an active NVLink to this one.
    #[serde(default)]
    pub nvlink_peers: Vec<String>,
    /// MIG mode, when the GPU supports MIG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_mode: Option<MigMode>,
    /// The MIG instances an operator created on this GPU (static MIG), when
    /// MIG is enabled. Each is allocated on its own; the GPU itself is then
    /// handed out whole only while none of them is held. They share the
    /// GPU's health: an instance of an unhealthy GPU is unhealthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig_instances: Vec<MigInstanceInfo>,
    /// False after a critical error (XID, double-bit ECC) or when unusable.
    pub healthy: bool,
    /// Why the GPU is unhealthy, e.g. `XID 79 at 2026-11-30T14:03:58Z`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unhealthy_reason: Option<String>,
}

/// One MIG instance (a GPU instance with its compute instance) of a GPU.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MigInstanceInfo {
    /// NVML UUID of the MIG device, e.g. `MIG-0c4f…`; what a pod is given.
    pub uuid: String,
    /// The profile, e.g. `1g.10gb` or `3g.40gb`.
    pub profile: String,
    /// Memory of the instance, MiB.
    #[serde(rename = "memoryTotalMiB")]
    pub memory_total_mib: u64,
    /// GPU instance id on the parent GPU, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance_id: Option<u32>,
    /// Compute instance id within the GPU instance, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_instance_id: Option<u32>,
}

/// Multi-Instance GPU mode.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigMode {
    /// The GPU is used whole.
    Disabled,
    /// The GPU is partitioned into MIG instances.
    Enabled,
}
