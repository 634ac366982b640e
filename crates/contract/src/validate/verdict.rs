//! The host's verdict on one round: what it accepted (by name), what waits
//! or is rejected, and what it refused and why.

use super::invalid::Invalid;

/// An accepted assignment, by name.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Placement {
    /// The pod, `namespace/name`.
    pub pod: String,
    /// The node.
    pub node: String,
    /// UUIDs of the GPUs (or MIG instances) it gets.
    pub gpus: Vec<String>,
    /// The request's position in the snapshot's `pending`.
    #[serde(skip)]
    pub request: usize,
    /// The node's position in the snapshot's `nodes`, and the GPUs'
    /// positions in its `gpus`: where to read what the devices are.
    #[serde(skip)]
    pub at: (usize, Vec<u32>),
    /// For a DRA pod, the policy's choices (their GPUs are in `at` too, in
    /// the same order).
    #[serde(skip)]
    pub claims: Vec<crate::types::ClaimChoice>,
}

/// A pod left waiting (or rejected), by name, with the reason.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Deferred {
    /// The pod, `namespace/name`.
    pub pod: String,
    /// Why, in words.
    pub reason: String,
    /// The gang the pod is a member of (`namespace/name`), when it is one:
    /// what it waits for is its gang, all or nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gang: Option<String>,
}

/// An accepted preemption: where the preemptor goes once its victims are
/// gone, and who they are.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Preempting {
    /// The preemptor's placement (its GPUs are nominated for it).
    pub placement: Placement,
    /// The pods to evict, `namespace/name`.
    pub victims: Vec<String>,
    /// Their positions in the snapshot's `running`.
    #[serde(skip)]
    pub victim_positions: Vec<usize>,
}

/// A decision the host refused, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Refused {
    /// The decision's position in the policy's list.
    pub index: usize,
    /// The pod it names, when the position names one.
    pub pod: Option<String>,
    /// The decision as the policy made it, in words (names where the
    /// positions resolve).
    pub decision: String,
    /// Why it was refused.
    pub reason: Invalid,
}

/// The host's verdict on one round.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// Assignments to apply, in the policy's order.
    pub accepted: Vec<Placement>,
    /// Preemptions to carry out, in the policy's order.
    pub preempting: Vec<Preempting>,
    /// Pods the policy chose to leave pending this round, and gang members
    /// held back because their gang did not reach its `min-member`.
    pub waiting: Vec<Deferred>,
    /// Pods the policy says can never be placed as requested.
    pub rejected: Vec<Deferred>,
    /// Decisions the host refused.
    pub refused: Vec<Refused>,
    /// Positions in `pending` of the gang members whose valid assignments
    /// were held back (their reason is in `waiting`).
    #[serde(skip)]
    pub held_back: Vec<usize>,
}
