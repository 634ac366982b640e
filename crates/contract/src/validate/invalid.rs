//! Why the host refused a decision: one variant per rule, worded for users,
//! with a stable code for metrics.

use std::fmt;

/// Why an assignment (or a decision) was refused.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Invalid {
    /// No pending pod at that position.
    UnknownPod { pod: u32 },
    /// The pod was already decided earlier in the round.
    DecidedTwice,
    /// No node at that position.
    UnknownNode { node: u32 },
    /// The node exists but the pod may not run there.
    NotEligible { node: String },
    /// An assignment of no GPUs at all.
    NoGpus,
    /// Wrong number of GPUs.
    WrongCount { got: usize, want: u32 },
    /// The same GPU named twice in one assignment.
    DuplicateGpu { gpu: String },
    /// No GPU at that position on the node.
    UnknownGpu { gpu: u32, node: String },
    /// The GPU is unhealthy.
    UnhealthyGpu { gpu: String },
    /// The GPU's model does not match the request's glob.
    ModelMismatch {
        gpu: String,
        model: String,
        pattern: String,
    },
    /// Exclusive: the GPU (or MIG instance) has less memory than asked.
    NotEnoughMemory {
        gpu: String,
        has_mib: u64,
        want_mib: u64,
    },
    /// Exclusive: somebody already holds (part of) the GPU.
    GpuTaken { gpu: String, by: String },
    /// Shared: not enough free memory left on the GPU.
    SharedFull {
        gpu: String,
        free_mib: u64,
        want_mib: u64,
    },
    /// A whole GPU for a MIG request, or a MIG instance for a whole-GPU one.
    WrongKind { gpu: String, want: String },
    /// A MIG instance of another profile than asked.
    ProfileMismatch {
        gpu: String,
        profile: String,
        want: String,
    },
    /// A GPUResource pod given a GPU only a DRA driver publishes.
    NotFromAgent { gpu: String },
    /// The device consumes more of a DRA shared counter than is left: it
    /// overlaps a device in use or taken earlier this round (a dynamic MIG
    /// placement and another one, or the whole GPU).
    CounterExhausted {
        gpu: String,
        counter: String,
        wants: u64,
        left: u64,
    },
    /// The assignment's shape does not fit the request's ask (GPUs for a
    /// DRA pod, claim choices for a GPUResource pod, a choice missing,
    /// repeated or out of range).
    WrongChoice { what: String },
    /// A DRA choice names a GPU that is not a candidate of its alternative.
    NotCandidate { gpu: String, request: String },
    /// A claim's matchAttribute/distinctAttribute constraint is broken.
    ConstraintBroken { claim: String, attribute: String },
    /// The assignment would take the pod's tenant past its limit.
    OverLimit {
        tenant: String,
        limit: u32,
        would_hold: u32,
    },
    /// A pod whose `preemptionPolicy` is `Never` asked to preempt.
    NeverPreempts,
    /// A preemption with no victims.
    NoVictims,
    /// A gang member asked to preempt (not supported: its gang would be
    /// placed piecemeal).
    GangPreemptor,
    /// No running pod at that position.
    UnknownVictim { victim: u32 },
    /// A victim named twice, in this decision or by an earlier one.
    VictimTwice { victim: String },
    /// A victim on another node than the preemptor's (and not a gang mate
    /// of a victim there).
    VictimElsewhere { victim: String },
    /// A victim of the same or higher priority, not reclaimable.
    VictimNotLower {
        victim: String,
        priority: i32,
        preemptor: i32,
    },
    /// A victim still within its minimum runtime.
    VictimProtected { victim: String, left_ms: u64 },
    /// A victim a PodDisruptionBudget does not let go now.
    VictimNotEvictable { victim: String },
    /// A gang member as victim without all its running gang mates.
    GangSplit { gang: String, missing: String },
    /// A victim whose GPUs the preemptor does not need.
    NeedlessVictim { victim: String },
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::UnknownPod { pod } => write!(f, "no pending pod at position {pod}"),
            Invalid::DecidedTwice => write!(f, "the pod was already decided in this round"),
            Invalid::UnknownNode { node } => write!(f, "no node at position {node}"),
            Invalid::NotEligible { node } => write!(
                f,
                "node {node:?} is not eligible for the pod (selector, affinity, taints or readiness)"
            ),
            Invalid::NoGpus => write!(f, "the assignment names no GPUs"),
            Invalid::WrongCount { got, want } => {
                write!(f, "{got} GPU(s) assigned, {want} requested")
            }
            Invalid::DuplicateGpu { gpu } => write!(f, "GPU {gpu} is named twice"),
            Invalid::UnknownGpu { gpu, node } => {
                write!(f, "node {node:?} has no GPU at position {gpu}")
            }
            Invalid::UnhealthyGpu { gpu } => write!(f, "GPU {gpu} is unhealthy"),
            Invalid::ModelMismatch {
                gpu,
                model,
                pattern,
            } => write!(
                f,
                "GPU {gpu} is a {model:?}, which does not match {pattern:?}"
            ),
            Invalid::NotEnoughMemory {
                gpu,
                has_mib,
                want_mib,
            } => write!(f, "GPU {gpu} has {has_mib} MiB, {want_mib} MiB requested"),
            Invalid::GpuTaken { gpu, by } => write!(f, "GPU {gpu} is already held by {by}"),
            Invalid::SharedFull {
                gpu,
                free_mib,
                want_mib,
            } => write!(
                f,
                "GPU {gpu} has {free_mib} MiB free to share, {want_mib} MiB requested"
            ),
            Invalid::WrongKind { gpu, want } => write!(f, "{gpu} is not {want}"),
            Invalid::ProfileMismatch { gpu, profile, want } => write!(
                f,
                "MIG instance {gpu} has profile {profile:?}, {want:?} requested"
            ),
            Invalid::NotFromAgent { gpu } => write!(
                f,
                "GPU {gpu} is published only by a DRA driver; a GPUResource pod needs a GPU \
                 the wasmgpu agent publishes"
            ),
            Invalid::CounterExhausted {
                gpu,
                counter,
                wants,
                left,
            } => write!(
                f,
                "GPU {gpu} consumes {wants} of the shared counter {counter}, of which {left} is left: \
                 it overlaps a device in use or taken earlier this round"
            ),
            Invalid::WrongChoice { what } => write!(f, "{what}"),
            Invalid::NotCandidate { gpu, request } => {
                write!(f, "GPU {gpu} is not a candidate of request {request:?}")
            }
            Invalid::ConstraintBroken { claim, attribute } => write!(
                f,
                "the devices chosen for claim {claim} break its constraint on {attribute:?}"
            ),
            Invalid::OverLimit {
                tenant,
                limit,
                would_hold,
            } => write!(
                f,
                "tenant {tenant:?} would hold {would_hold} GPU(s), past its limit of {limit}"
            ),
            Invalid::NeverPreempts => write!(
                f,
                "the pod's preemptionPolicy is Never: it may not preempt anyone"
            ),
            Invalid::NoVictims => write!(f, "a preemption names no victims"),
            Invalid::GangPreemptor => write!(
                f,
                "a gang member may not preempt: its gang is placed all at once"
            ),
            Invalid::UnknownVictim { victim } => {
                write!(f, "no running pod at position {victim}")
            }
            Invalid::VictimTwice { victim } => {
                write!(f, "{victim} is named as a victim twice in this round")
            }
            Invalid::VictimElsewhere { victim } => write!(
                f,
                "victim {victim} runs on another node than the one the preemptor is placed on"
            ),
            Invalid::VictimNotLower {
                victim,
                priority,
                preemptor,
            } => write!(
                f,
                "victim {victim} has priority {priority}, not lower than the preemptor's \
                 {preemptor}, and is not over its tenant's quota while the preemptor's tenant \
                 is under its own"
            ),
            Invalid::VictimProtected { victim, left_ms } => write!(
                f,
                "victim {victim} is within its minimum runtime ({left_ms} ms left)"
            ),
            Invalid::VictimNotEvictable { victim } => write!(
                f,
                "victim {victim} may not be evicted now: a PodDisruptionBudget forbids it"
            ),
            Invalid::GangSplit { gang, missing } => write!(
                f,
                "gang {gang} would be split: its running member {missing} is not a victim too"
            ),
            Invalid::NeedlessVictim { victim } => write!(
                f,
                "victim {victim} is needless: the preemptor fits without evicting it"
            ),
        }
    }
}

impl Invalid {
    /// A short, stable label for the reason (`gpu-taken`), for metrics and
    /// machine-readable output.
    pub fn code(&self) -> &'static str {
        match self {
            Invalid::UnknownPod { .. } => "unknown-pod",
            Invalid::DecidedTwice => "decided-twice",
            Invalid::UnknownNode { .. } => "unknown-node",
            Invalid::NotEligible { .. } => "not-eligible",
            Invalid::NoGpus => "no-gpus",
            Invalid::WrongCount { .. } => "wrong-count",
            Invalid::DuplicateGpu { .. } => "duplicate-gpu",
            Invalid::UnknownGpu { .. } => "unknown-gpu",
            Invalid::UnhealthyGpu { .. } => "unhealthy-gpu",
            Invalid::ModelMismatch { .. } => "model-mismatch",
            Invalid::NotEnoughMemory { .. } => "not-enough-memory",
            Invalid::GpuTaken { .. } => "gpu-taken",
            Invalid::SharedFull { .. } => "shared-full",
            Invalid::WrongKind { .. } => "wrong-kind",
            Invalid::ProfileMismatch { .. } => "profile-mismatch",
            Invalid::NotFromAgent { .. } => "not-from-agent",
            Invalid::CounterExhausted { .. } => "counter-exhausted",
            Invalid::WrongChoice { .. } => "wrong-choice",
            Invalid::NotCandidate { .. } => "not-candidate",
            Invalid::ConstraintBroken { .. } => "constraint-broken",
            Invalid::OverLimit { .. } => "over-limit",
            Invalid::NeverPreempts => "never-preempts",
            Invalid::NoVictims => "no-victims",
            Invalid::GangPreemptor => "gang-preemptor",
            Invalid::UnknownVictim { .. } => "unknown-victim",
            Invalid::VictimTwice { .. } => "victim-twice",
            Invalid::VictimElsewhere { .. } => "victim-elsewhere",
            Invalid::VictimNotLower { .. } => "victim-not-lower",
            Invalid::VictimProtected { .. } => "victim-protected",
            Invalid::VictimNotEvictable { .. } => "victim-not-evictable",
            Invalid::GangSplit { .. } => "gang-split",
            Invalid::NeedlessVictim { .. } => "needless-victim",
        }
    }
}
