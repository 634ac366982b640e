//! Per-call resource limits for policies.

use std::time::Duration;

/// What one `allocate` (or `describe`) call may use. Every call gets a fresh
/// store with these limits; exceeding one ends the call with a typed error.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    /// Fuel (about one unit per WebAssembly instruction). Deterministic: the
    /// same policy on the same snapshot always uses the same fuel. `0`: no
    /// fuel metering, the deadline alone bounds a call (faster; fuel used
    /// is then reported as 0).
    pub fuel: u64,
    /// Wall-clock deadline, enforced by epoch interruption.
    pub deadline: Duration,
    /// Largest linear memory, in bytes.
    pub memory_bytes: usize,
    /// Largest table, in elements.
    pub table_elements: usize,
    /// Most log lines kept per call (more are counted, not kept).
    pub log_lines: usize,
    /// Longest log line kept, in bytes (longer ones are cut).
    pub log_line_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: 20_000_000_000,
            deadline: Duration::from_secs(2),
            memory_bytes: 256 << 20,
            table_elements: 100_000,
            log_lines: 100,
            log_line_bytes: 1024,
        }
    }
}

/// How often the engine's ticker advances the epoch: the deadline's
/// granularity.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

impl Limits {
    /// Whether calls are metered with fuel (`fuel` > 0).
    pub fn metered(&self) -> bool {
        self.fuel > 0
    }

    /// The deadline in epoch ticks (at least one).
    pub(crate) fn deadline_ticks(&self) -> u64 {
        (self.deadline.as_nanos() / EPOCH_TICK.as_nanos()).max(1) as u64
    }
}
