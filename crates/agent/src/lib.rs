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

/// What can stop the agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The GPU source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Writing the GPUNode failed.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signal(std::io::Error),
}

impl Error {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Source(error) => error.kind(),
            Error::Publish(error) => error.kind(),
            Error::Signal(_) => "signal",
        }
    }
}

/// `Result` with the agent's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
