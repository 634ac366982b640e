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

use std::fmt;

use crate::glob_match;
use crate::types::{Assignment, Decision, Gpu, Node, Request, Sharing, Snapshot};

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
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::UnknownPod { pod } => write!(f, "no pending pod at position {pod}"),
            Invalid::DecidedTwice => write!(f, "the pod was already decided in this round"),
            Invalid::UnknownNode { node } => write!(f, "no node at position {node}"),
            Invalid::NotEligible { node } => {
                write!(
                    f,
                    "node {node:?} is not eligible for the pod (selector, affinity, taints or readiness)"
                )
            }
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
            } => {
                write!(
                    f,
                    "GPU {gpu} is a {model:?}, which does not match {pattern:?}"
                )
            }
            Invalid::NotEnoughMemory {
                gpu,
                has_mib,
                want_mib,
            } => {
                write!(f, "GPU {gpu} has {has_mib} MiB, {want_mib} MiB requested")
            }
            Invalid::GpuTaken { gpu, by } => write!(f, "GPU {gpu} is already held by {by}"),
            Invalid::SharedFull {
                gpu,
                free_mib,
                want_mib,
            } => {
                write!(
                    f,
                    "GPU {gpu} has {free_mib} MiB free to share, {want_mib} MiB requested"
                )
            }
            Invalid::WrongKind { gpu, want } => write!(f, "{gpu} is not {want}"),
            Invalid::ProfileMismatch { gpu, profile, want } => write!(
                f,
                "MIG instance {gpu} has profile {profile:?}, {want:?} requested"
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
        }
    }
}

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

/// One GPU during the replay: what it has left.
#[derive(Clone, Copy)]
struct GpuLeft {
    free_mib: u64,
    /// Held exclusively: by a running pod (`None` inside) or by the pod at
    /// this position of `pending` in this round.
    held: Option<Option<usize>>,
    shares: u32,
    /// For a whole GPU: its MIG instances held.
    mig_held: u32,
}

/// The pod of a decision, by name, when its position names one.
fn pod_name(snapshot: &Snapshot, position: u32) -> Option<&str> {
    snapshot
        .pending
        .get(position as usize)
        .map(|r| r.pod.as_str())
}

/// A decision in words, with names where its positions resolve.
pub fn describe(snapshot: &Snapshot, decision: &Decision) -> String {
    let pod = |p: u32| pod_name(snapshot, p).map_or(format!("pod #{p}"), str::to_owned);
    match decision {
        Decision::Assign(a) => {
            let node = snapshot.nodes.get(a.node as usize);
            let gpus: Vec<String> = a
                .gpus
                .iter()
                .map(|&g| {
                    node.and_then(|n| n.gpus.get(g as usize))
                        .map_or(format!("#{g}"), |g| g.uuid.clone())
                })
                .collect();
            format!(
                "{} on {} GPUs {}",
                pod(a.pod),
                node.map_or(format!("node #{}", a.node), |n| n.name.clone()),
                gpus.join(",")
            )
        }
        Decision::Wait(d) => format!("wait for {}", pod(d.pod)),
        Decision::Reject(d) => format!("reject {}", pod(d.pod)),
    }
}

/// Checks `decisions` against `snapshot`; see the module docs.
///
/// Built for rounds of thousands of GPUs: decisions name positions, so the
/// replay indexes vectors and hashes nothing.
pub fn validate(snapshot: &Snapshot, decisions: &[Decision]) -> Verdict {
    let node_start: Vec<usize> = snapshot
        .nodes
        .iter()
        .scan(0, |next, node| {
            let start = *next;
            *next += node.gpus.len();
            Some(start)
        })
        .collect();
    let mut gpus: Vec<GpuLeft> = Vec::with_capacity(
        node_start.last().copied().unwrap_or(0) + snapshot.nodes.last().map_or(0, |n| n.gpus.len()),
    );
    for node in &snapshot.nodes {
        let first = gpus.len();
        for gpu in &node.gpus {
            gpus.push(GpuLeft {
                free_mib: gpu.memory_mib.saturating_sub(gpu.allocated_mib),
                held: gpu.held.then_some(None),
                shares: gpu.shared_owners,
                mig_held: 0,
            });
        }
        for gpu in &node.gpus {
            if let Some(mig) = &gpu.mig
                && gpu.held
                && (mig.parent as usize) < node.gpus.len()
            {
                gpus[first + mig.parent as usize].mig_held += 1;
            }
        }
    }

    let mut verdict = Verdict::default();
    let mut decided = vec![false; snapshot.pending.len()];
    let mut accepted_requests: Vec<usize> = Vec::new();
    for (index, decision) in decisions.iter().enumerate() {
        let position = decision.pod();
        let refuse = |reason| Refused {
            index,
            pod: pod_name(snapshot, position).map(str::to_owned),
            decision: describe(snapshot, decision),
            reason,
        };
        let Some(request) = snapshot.pending.get(position as usize) else {
            verdict
                .refused
                .push(refuse(Invalid::UnknownPod { pod: position }));
            continue;
        };
        let position = position as usize;
        if std::mem::replace(&mut decided[position], true) {
            verdict.refused.push(refuse(Invalid::DecidedTwice));
            continue;
        }
        match decision {
            Decision::Wait(d) => verdict.waiting.push(Deferred {
                pod: request.pod.clone(),
                reason: d.reason.clone(),
                gang: gang_of(snapshot, request),
            }),
            Decision::Reject(d) => verdict.rejected.push(Deferred {
                pod: request.pod.clone(),
                reason: d.reason.clone(),
                gang: gang_of(snapshot, request),
            }),
            Decision::Assign(a) => match check(snapshot, a, request, &node_start, &gpus) {
                Err(reason) => verdict.refused.push(refuse(reason)),
                Ok(()) => {
                    let node = &snapshot.nodes[a.node as usize];
                    let first = node_start[a.node as usize];
                    for &g in &a.gpus {
                        let gpu = &node.gpus[g as usize];
                        if let Some(mig) = &gpu.mig {
                            gpus[first + mig.parent as usize].mig_held += 1;
                        }
                        let left = &mut gpus[first + g as usize];
                        match request.sharing {
                            Sharing::Exclusive => {
                                left.held = Some(Some(position));
                                left.free_mib = 0;
                            }
                            Sharing::Shared => {
                                left.shares += 1;
                                left.free_mib -= request.memory_mib;
                            }
                        }
                    }
                    accepted_requests.push(position);
                    verdict.accepted.push(Placement {
                        pod: request.pod.clone(),
                        node: node.name.clone(),
                        gpus: a
                            .gpus
                            .iter()
                            .map(|&g| node.gpus[g as usize].uuid.clone())
                            .collect(),
                        request: position,
                        at: (a.node as usize, a.gpus.clone()),
                    });
                }
            },
        }
    }
    hold_back_short_gangs(snapshot, &mut verdict);
    verdict
}

/// The name of `request`'s gang, when it is a member of one.
fn gang_of(snapshot: &Snapshot, request: &Request) -> Option<String> {
    let gang = snapshot.gangs.get(request.gang? as usize)?;
    Some(gang.name.clone())
}

/// Moves the assignments of every gang that, with its members already
/// bound, stays short of its `min-member` from `accepted` to `waiting`.
fn hold_back_short_gangs(snapshot: &Snapshot, verdict: &mut Verdict) {
    if snapshot.gangs.is_empty() {
        return;
    }
    let mut placed = vec![0u32; snapshot.gangs.len()];
    for p in &verdict.accepted {
        if let Some(g) = snapshot.pending[p.request].gang
            && let Some(count) = placed.get_mut(g as usize)
        {
            *count = count.saturating_add(1);
        }
    }
    let short = |gang: Option<u32>| {
        gang.and_then(|g| {
            let info = snapshot.gangs.get(g as usize)?;
            let have = info.bound.saturating_add(placed[g as usize]);
            (have < info.min_member).then(|| {
                let reason = format!(
                    "gang {}: {} member(s) placed this round and {} bound, {} needed (minMember); all or nothing, so none is bound yet",
                    info.name, placed[g as usize], info.bound, info.min_member
                );
                (reason, info.name.clone())
            })
        })
    };
    let mut kept = Vec::with_capacity(verdict.accepted.len());
    for p in std::mem::take(&mut verdict.accepted) {
        match short(snapshot.pending[p.request].gang) {
            Some((reason, gang)) => {
                verdict.held_back.push(p.request);
                verdict.waiting.push(Deferred {
                    pod: p.pod,
                    reason,
                    gang: Some(gang),
                });
            }
            None => kept.push(p),
        }
    }
    verdict.accepted = kept;
}

fn check(
    snapshot: &Snapshot,
    a: &Assignment,
    request: &Request,
    node_start: &[usize],
    gpus: &[GpuLeft],
) -> Result<(), Invalid> {
    let node = snapshot
        .nodes
        .get(a.node as usize)
        .ok_or(Invalid::UnknownNode { node: a.node })?;
    let eligible = snapshot.eligible_sets.get(request.eligible_set as usize);
    if eligible.is_none_or(|set| set.binary_search(&a.node).is_err()) {
        return Err(Invalid::NotEligible {
            node: node.name.clone(),
        });
    }
    if a.gpus.is_empty() {
        return Err(Invalid::NoGpus);
    }
    if a.gpus.len() != request.count as usize {
        return Err(Invalid::WrongCount {
            got: a.gpus.len(),
            want: request.count,
        });
    }
    let first = node_start[a.node as usize];
    for (k, &g) in a.gpus.iter().enumerate() {
        let Some(info) = node.gpus.get(g as usize) else {
            return Err(Invalid::UnknownGpu {
                gpu: g,
                node: node.name.clone(),
            });
        };
        let gpu = || info.uuid.clone();
        // At most 16 GPUs: comparing with the earlier ones beats hashing.
        if a.gpus[..k].contains(&g) {
            return Err(Invalid::DuplicateGpu { gpu: gpu() });
        }
        let left = &gpus[first + g as usize];
        check_gpu(snapshot, node, request, info, left, |position| {
            &gpus[first + position as usize]
        })
        .map_err(|reason| reason(gpu()))?;
    }
    Ok(())
}

type Reason = Box<dyn FnOnce(String) -> Invalid>;

/// A whole GPU or MIG instance has the memory `request` asks of each
/// (`memoryMiB` with a MIG profile is the instance's own).
fn has_memory(info: &Gpu, request: &Request) -> Result<(), Reason> {
    if info.memory_mib < request.memory_mib {
        let (has_mib, want_mib) = (info.memory_mib, request.memory_mib);
        return Err(Box::new(move |gpu| Invalid::NotEnoughMemory {
            gpu,
            has_mib,
            want_mib,
        }));
    }
    Ok(())
}

/// Whether one GPU (or MIG instance) can serve `request` now; the error
/// takes the GPU's UUID.
fn check_gpu<'g>(
    snapshot: &Snapshot,
    node: &Node,
    request: &Request,
    info: &Gpu,
    left: &GpuLeft,
    sibling: impl Fn(u32) -> &'g GpuLeft,
) -> Result<(), Reason> {
    // A MIG instance takes its parent's health, whatever the snapshot says.
    let parent_unhealthy = info
        .mig
        .as_ref()
        .and_then(|m| node.gpus.get(m.parent as usize))
        .is_some_and(|p| !p.healthy);
    if !info.healthy || parent_unhealthy {
        return Err(Box::new(|gpu| Invalid::UnhealthyGpu { gpu }));
    }
    let model = snapshot
        .models
        .get(info.model as usize)
        .map_or("?", String::as_str);
    if let Some(pattern) = &request.model
        && !glob_match(pattern, model)
    {
        let (model, pattern) = (model.to_owned(), pattern.clone());
        return Err(Box::new(move |gpu| Invalid::ModelMismatch {
            gpu,
            model,
            pattern,
        }));
    }
    if let Some(holder) = left.held {
        let by = match holder {
            Some(p) => snapshot.pending[p].pod.clone(),
            None => "a running pod".to_owned(),
        };
        return Err(Box::new(move |gpu| Invalid::GpuTaken { gpu, by }));
    }
    match (&request.mig_profile, &info.mig) {
        (Some(want), Some(mig)) => {
            let profile = snapshot
                .mig_profiles
                .get(mig.profile as usize)
                .map_or("?", String::as_str);
            if profile != want {
                let (profile, want) = (profile.to_owned(), want.clone());
                return Err(Box::new(move |gpu| Invalid::ProfileMismatch {
                    gpu,
                    profile,
                    want,
                }));
            }
            has_memory(info, request)?;
            let parent = sibling(mig.parent);
            if parent.held.is_some() || parent.shares > 0 {
                return Err(Box::new(|gpu| Invalid::GpuTaken {
                    gpu,
                    by: "the holder of its parent GPU".into(),
                }));
            }
            return Ok(());
        }
        (Some(_), None) => {
            return Err(Box::new(|gpu| Invalid::WrongKind {
                gpu,
                want: "a MIG instance".into(),
            }));
        }
        (None, Some(_)) => {
            return Err(Box::new(|gpu| Invalid::WrongKind {
                gpu,
                want: "a whole GPU".into(),
            }));
        }
        (None, None) => {}
    }
    if left.mig_held > 0 {
        let by = format!("{} of its MIG instance(s)", left.mig_held);
        return Err(Box::new(move |gpu| Invalid::GpuTaken { gpu, by }));
    }
    match request.sharing {
        Sharing::Exclusive => {
            has_memory(info, request)?;
            if left.shares > 0 || left.free_mib < info.memory_mib {
                let by = format!("{} shared allocation(s)", left.shares.max(1));
                return Err(Box::new(move |gpu| Invalid::GpuTaken { gpu, by }));
            }
        }
        Sharing::Shared => {
            if left.free_mib < request.memory_mib {
                let (free_mib, want_mib) = (left.free_mib, request.memory_mib);
                return Err(Box::new(move |gpu| Invalid::SharedFull {
                    gpu,
                    free_mib,
                    want_mib,
                }));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
