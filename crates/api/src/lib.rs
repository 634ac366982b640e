//! # The wasmgpu API (group `wasmgpu.io`, version `v1alpha1`)
//!
//! ```text
//!  GPUResource (namespaced, `gpur`)          GPUNode (cluster-scoped, `gpun`)
//!  ┌──────────────────────────────┐          ┌───────────────────────────────┐
//!  │ spec: count, model, memoryMiB│          │ status (agent): driver, CUDA, │
//!  │       sharing, policy        │          │   gpus[uuid, model, memory,   │
//!  │ status (controller): phase,  │          │        NUMA, NVLink, health]  │
//!  │   holding/asking, conditions │          │ named after its Node          │
//!  └──────────────────────────────┘          └───────────────────────────────┘
//!        ▲ annotation wasmgpu.io/gpuresource        ▲ devices by uuid
//!  Pod (schedulerName: wasmgpu) ─── annotation wasmgpu.io/allocation
//!                                   (written with the binding: node, devices, policy)
//!        │ namespace matched by a glob
//!        ▼
//!  GPUTenant (cluster-scoped, `gput`): spec namespaces, quota, limit, weight;
//!            status (controller) holding, waiting, OverLimit / OverQuota
//! ```
//!
//! A GPU is held by the pod whose allocation names it, from the binding until
//! the pod is gone or finished: never by the GPUResource, which only
//! describes the shape (see [`PodAllocation`]).
//!
//! The CRDs are generated from these types ([`crds`]) and checked in under
//! `deploy/crds/` (`wasmgpu crd --write deploy/crds`).
//!
//! Crate `wasmgpu-api`: below it `wasmgpu-contract` (the bounds a request obeys)
//! and `wasmgpu-support`; the index, the controller, the agent and the CLI use it.
//! [`shadow`] keeps the record a shadow policy's comparison leaves on its ConfigMap.
#![forbid(unsafe_code)]

mod allocation;
pub mod conditions;
mod crd;
mod gpu_request;
mod gpunode;
mod gpuresource;
mod gputenant;
mod nomination;
mod podgroup;
pub mod policy;
mod selector;
pub mod shadow;

pub use allocation::{
    ALLOCATION_ANNOTATION, DEVICES_ANNOTATION, NODE_ANNOTATION, PodAllocation, UnreadableAllocation,
};
pub use crd::{Drift, check_dir, crds, files, kustomization, to_yaml, write_dir};
pub use gpu_request::{ContainerGpus, GPU_RESOURCE, UnreadableGpuLimit, container_gpus, pod_gpus};
pub use gpunode::{GPUNode, GPUNodeSpec, GPUNodeStatus, GpuInfo, MigInstanceInfo, MigMode};
pub use gpuresource::{
    Allocation, Device, GPUResource, GPUResourceSpec, GPUResourceStatus, InvalidSpec, MAX_COUNT,
    Phase, PolicyRef, Sharing,
};
pub use gputenant::{GPUTenant, GPUTenantSpec, GPUTenantStatus};
pub use nomination::{
    NOMINATION_ANNOTATION, NominatedClaim, NominatedDevice, Nomination, UnreadableNomination,
    Victim,
};
pub use podgroup::{
    GANG_RESERVATION_ANNOTATION, GangReservation, POD_GROUP_LABEL, PodGroup, PodGroupSpec,
    ReservedMember,
};
pub use selector::selects;

/// The API group of the wasmgpu CRDs.
pub const GROUP: &str = "wasmgpu.io";
/// The version of the wasmgpu CRDs.
pub const VERSION: &str = "v1alpha1";
/// `spec.schedulerName` of the pods wasmgpu places.
pub const SCHEDULER_NAME: &str = "wasmgpu";
/// Pod annotation the node's device plugin writes once the kubelet was
/// given the pod's devices: `{"node":…,"podUID":…,"devices":[…]}`.
pub const HANDOFF_ANNOTATION: &str = "wasmgpu.io/handoff";
/// Pod annotation naming the `GPUResource` (same namespace) the pod uses.
pub const GPURESOURCE_ANNOTATION: &str = "wasmgpu.io/gpuresource";
/// Pod annotation naming the policy that places a DRA pod (one asking
/// through `spec.resourceClaims`); without it, the controller's default.
pub const POLICY_ANNOTATION: &str = "wasmgpu.io/policy";
/// The finalizer kube-scheduler (and wasmgpu) puts on a ResourceClaim
/// before allocating it, so that it is not deleted while allocated.
pub const CLAIM_DELETE_PROTECTION: &str = "resource.kubernetes.io/delete-protection";
/// Finalizer earlier versions put on GPUResources to release their ledger
/// before they went; the controller now removes it (GPUs are held by pods,
/// not by GPUResources).
pub const RELEASE_FINALIZER: &str = "wasmgpu.io/release";
