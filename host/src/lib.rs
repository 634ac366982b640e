//! # wasmgpu
//!
//! GPU allocation for Kubernetes, decided by sandboxed WebAssembly policies.
//!
//! * [`engine`] loads and runs policy components (no Kubernetes in it).
//! * [`validate`] checks a policy's decisions against the snapshot it saw.
//! * [`cli`] is the `wasmgpu` command line.
#![forbid(unsafe_code)]

pub mod cli;
pub mod engine;
pub mod validate;

#[cfg(test)]
mod fixtures;
