//! # wasmgpu
//!
//! GPU allocation for Kubernetes, decided by sandboxed WebAssembly policies.
//! This crate is the `wasmgpu` binary's command line ([`cli`]) over the
//! crates below it, re-exported here under their short names:
//!
//! ```text
//!                         wasmgpu (cli, main)
//!                ┌─────────────┴──────────────────┐
//!          wasmgpu-controller                wasmgpu-agent
//!   ┌──────┬─────┴──────┬──────────┐       (NVML, device plugin)
//!   │   wasmgpu-index   │     wasmgpu-oci         │
//!   │   (pure state)    │   (registries)          │
//!   │       │      wasmgpu-engine                 │
//!   │   wasmgpu-api   (wasmtime)                  │
//!   │  (CRD types) ◀──────────────────────────────┘
//!   └──────┴──────────────┴──▶ wasmgpu-contract (types, rules, files)
//!                             wasmgpu-support (locks, error chains)
//! ```
//!
//! * [`contract`]: the WIT's types, the rules every decision is held to,
//!   snapshot files (shared with the policy SDK).
//! * [`api`]: the CRD types (`GPUResource`, `GPUNode`), annotations, conditions.
//! * [`index`]: cluster state in memory and the snapshots built from it (no I/O).
//! * [`engine`]: loads and runs policy components (no Kubernetes in it).
//! * [`oci`]: pulls and pushes policy components in OCI registries.
//! * [`controller`]: watches, the round loop, policy loading, API writes.
//! * [`agent`]: publishes a node's GPUs and is the kubelet's device plugin.
//! * [`cli`]: the `wasmgpu` command line.
#![forbid(unsafe_code)]

pub use wasmgpu_agent as agent;
pub use wasmgpu_api as api;
pub use wasmgpu_contract as contract;
pub use wasmgpu_controller as controller;
pub use wasmgpu_engine as engine;
pub use wasmgpu_index as index;
pub use wasmgpu_oci as oci;
pub use wasmgpu_support as support;

pub mod cli;
