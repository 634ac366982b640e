//! # wasmgpu
//!
//! GPU allocation for Kubernetes, decided by sandboxed WebAssembly policies.
//!
//! * [`api`] holds the CRD types (`GPUResource`, `GPUNode`).
//! * [`index`] keeps cluster state in memory and builds policy snapshots (no I/O).
//! * [`engine`] loads and runs policy components (no Kubernetes in it).
//! * [`oci`] pulls and pushes policy components in OCI registries (no Kubernetes in it).
//! * [`shadow`] compares a shadow policy's verdict with its primary's (no I/O).
//! * [`controller`] wires watches, index, policies and API writes together.
//! * [`agent`] publishes a node's GPUs as its `GPUNode` (NVML or an inventory file).
//! * [`cli`] is the `wasmgpu` command line.
#![forbid(unsafe_code)]

pub mod agent;
pub mod api;
pub mod cli;
pub mod controller;
pub mod engine;
pub mod error_chain;
pub mod index;
pub mod oci;
pub mod shadow;
mod sync;

#[cfg(test)]
mod fixtures;
