//! The status a GPUResource should show: decided by the reporter
//! (`report.rs`), written by the status writer (`status.rs`).

use crate::api::Phase;
use crate::index::PodCounts;

/// The status a GPUResource should show.
#[derive(Clone, Debug, PartialEq)]
pub struct WantedStatus {
    pub phase: Phase,
    pub counts: PodCounts,
    pub observed_generation: Option<i64>,
    /// `(type, status, reason, message)`.
    pub conditions: Vec<(&'static str, bool, String, String)>,
}
