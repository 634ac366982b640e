//! The wall clock, in the unit snapshots and reports use.

use k8s_openapi::jiff::Timestamp;

/// Milliseconds since the Unix epoch, by this machine's clock.
pub(crate) fn now_ms() -> u64 {
    u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0)
}
