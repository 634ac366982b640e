//! Snapshot builders and the controller's own validator, for a policy's
//! unit tests and benchmarks: [`wasmgpu_contract::testing`], re-exported.

pub use wasmgpu_contract::testing::*;
