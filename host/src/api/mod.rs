//! # The wasmgpu API (group `wasmgpu.io`, version `v1alpha1`)
//!
//! ```text
//!  GPUResource (namespaced, `gpur`)          GPUNode (cluster-scoped, `gpun`)
//!  ┌──────────────────────────────┐          ┌───────────────────────────────┐
//!  │ spec: count, model, memoryMiB│          │ status (agent): driver, CUDA, │
//!  │       sharing, policy        │          │   gpus[uuid, model, memory,   │
//!  │ status (controller): phase,  │ devices  │        NUMA, NVLink, health]  │
//!  │   allocations[pod, podUID,   │ ───────▶ │                               │
//!  │     node, devices, policy]   │ by uuid  │ named after its Node          │
//!  └──────────────────────────────┘          └───────────────────────────────┘
//!        ▲ annotation wasmgpu.io/gpuresource
//!  Pod (schedulerName: wasmgpu)
//! ```
//!
//! The CRDs are generated from these types ([`crds`]) and checked in under
//! `deploy/crds/` (`wasmgpu crd --write deploy/crds`).

pub mod conditions;
mod crd;
mod gpunode;
mod gpuresource;
pub mod policy;

pub use crd::{Drift, check_dir, crds, files, kustomization, to_yaml, write_dir};
pub use gpunode::{GPUNode, GPUNodeSpec, GPUNodeStatus, GpuInfo, MigMode};
pub use gpuresource::{
    Allocation, Device, GPUResource, GPUResourceSpec, GPUResourceStatus, InvalidSpec, MAX_COUNT,
    Phase, PolicyRef, Sharing,
};

/// The API group of the wasmgpu CRDs.
pub const GROUP: &str = "wasmgpu.io";
/// The version of the wasmgpu CRDs.
pub const VERSION: &str = "v1alpha1";
/// `spec.schedulerName` of the pods wasmgpu places.
pub const SCHEDULER_NAME: &str = "wasmgpu";
/// Pod annotation naming the `GPUResource` (same namespace) the pod uses.
pub const GPURESOURCE_ANNOTATION: &str = "wasmgpu.io/gpuresource";
/// Pod annotation the controller writes: the chosen GPU UUIDs, comma-separated.
pub const DEVICES_ANNOTATION: &str = "wasmgpu.io/devices";
/// Pod annotation the controller writes: the node the GPUs are on.
pub const NODE_ANNOTATION: &str = "wasmgpu.io/node";
/// Finalizer the controller puts on GPUResources: their ledger is released
/// (and the holders told) before they go.
pub const RELEASE_FINALIZER: &str = "wasmgpu.io/release";
