//! # The node agent
//!
//! Reads the node's GPUs and keeps its `GPUNode` status current.
//!
//! ```text
//!  GpuSource ── Reading (raw facts) ──▶ convert::to_status ──▶ StatusPublisher
//!   nvml: NVML queries                     NVLink peers,          server-side
//!   file: --inventory FILE                 health rules,          apply of
//!     │                                    conditions             GPUNode/<node>
//!     └── Signal (XID / ECC event, file changed) ─▶ publish at once
//! ```
//!
//! * [`source`]: the [`GpuSource`] trait and the raw facts it reports.
//! * [`nvml`] and [`file`]: the two sources.
//! * [`health`]: which events make a GPU unhealthy.
//! * [`convert`]: raw facts to `GPUNodeStatus` (pure).
//! * [`publish`]: server-side apply, only on change.
//! * [`run`]: the loop.
//!
//! Crate `wasmgpu-agent`: below it only `wasmgpu-api` and `wasmgpu-support`; it
//! knows nothing of policies, the index or the controller.
#![forbid(unsafe_code)]

pub mod convert;
pub mod deviceplugin;
mod error;
pub mod file;
pub mod health;
pub mod nvml;
pub mod publish;
pub mod run;
pub mod source;

pub use health::{APPLICATION_XIDS, HealthRules};
pub use publish::{FIELD_MANAGER, PublishError, StatusPublisher};
pub use run::Agent;
pub use source::{GpuSource, Reading, SourceError};

pub use error::{Error, Result};
