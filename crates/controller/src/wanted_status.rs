//! The status a GPUResource should show: decided by the reporter
//! (`report.rs`), written by the status writer (`status.rs`).

use wasmgpu_api::Phase;
use wasmgpu_index::PodCounts;

/// The status a GPUResource should show.
#[derive(Clone, Debug, PartialEq)]
pub struct WantedStatus {
    pub phase: Phase,
    pub counts: PodCounts,
    pub observed_generation: Option<i64>,
    /// `(type, status, reason, message)`.
    pub conditions: Vec<(&'static str, bool, String, String)>,
}
