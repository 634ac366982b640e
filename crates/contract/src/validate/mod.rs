//! # The host's decision rules
//!
//! [`validate`] replays the decisions of one round, in order, against the
//! snapshot the policy was given, and keeps an assignment only when it is
//! possible: the pod is pending and decided once, the node exists and is
//! eligible for the pod, the GPUs are exactly `count` (and never none)
//! distinct, healthy GPUs of that node that match the model glob, the memory
//! and the kind asked for (whole GPU, share, or MIG instance of the
//! profile), and are free — counting what earlier decisions of the same
//! round already took, and counting a whole GPU and its MIG instances as
//! excluding each other. A gang's assignments are kept only when, with the
//! members already bound, they reach its `min-member`; otherwise its members
//! wait. Everything else comes back with the reason, in words.
//!
//! Decisions name pods, nodes and GPUs by position; the verdict names them
//! ([`Placement`]), so nothing after validation handles positions.
//!
//! One source for both sides: the controller validates every round with
//! it, and the policy SDK offers it to authors as
//! `wasmgpu_policy_sdk::testing::validate`, over the same [`crate::types`].
//! Pure and synchronous: no I/O, no clock.

mod claims;
mod gangs;
mod gpu_fit;
mod invalid;
mod names;
mod preempt;
mod replay;
mod verdict;

pub use invalid::Invalid;
pub use verdict::{Deferred, Placement, Preempting, Refused, Verdict};

use crate::host_snapshot::HostSnapshot;
use crate::types::{Decision, Snapshot};
use names::{describe_named, host_names, made_up};
use replay::Replay;

/// A decision in words, with names where its positions resolve.
pub fn describe(snapshot: &Snapshot, decision: &Decision) -> String {
    describe_named(snapshot, decision, &made_up(snapshot))
}

/// [`describe`], naming GPUs by their UUIDs.
pub fn describe_host(host: &HostSnapshot, decision: &Decision) -> String {
    describe_named(&host.snapshot, decision, &host_names(host))
}

/// Checks `decisions` against `snapshot`; see the module docs. GPUs are
/// named as [`HostSnapshot::from_snapshot`] names them.
pub fn validate(snapshot: &Snapshot, decisions: &[Decision]) -> Verdict {
    Replay::new(snapshot, &made_up(snapshot), &[]).run(decisions)
}

/// [`validate`] for the host: GPUs are named by their UUIDs, and DRA
/// shared counters are counted.
pub fn validate_host(host: &HostSnapshot, decisions: &[Decision]) -> Verdict {
    Replay::new(&host.snapshot, &host_names(host), &host.nodes).run(decisions)
}

#[cfg(test)]
mod tests;
