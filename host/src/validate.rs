//! # Decision validation
//!
//! The host never trusts a policy. [`validate`] replays the decisions of one
//! round, in order, against the snapshot the policy was given, and keeps an
//! assignment only when it is possible: the pod is pending and decided once,
//! the node exists and is eligible for the pod, the GPUs are exactly `count`
//! (and never none) distinct, healthy GPUs of that node that match the model
//! glob, the memory and the kind asked for (whole GPU, share, or MIG instance
//! of the profile), and are free — counting what earlier decisions of the
//! same round already took, and counting a whole GPU and its MIG instances
//! as excluding each other. A gang's assignments are kept only when, with
//! the members already bound, they reach its `min-member`; otherwise its
//! members wait. Everything else comes back with the reason, in words.
//!
//! Decisions name pods, nodes and GPUs by position; the verdict names them
//! ([`Placement`]), so nothing after validation handles positions.
//!
//! [`snapshot::check`] holds a snapshot read from a file to the rules the
//! controller's own snapshots obey, before a policy sees it.
//!
//! Pure and synchronous: no I/O, no clock.

pub mod snapshot;

use std::fmt;

use wasmgpu_policy_sdk::glob_match;

use crate::engine::types::{Assignment, Decision, Gpu, Request, Sharing, Snapshot};

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
    /// Exclusive: the GPU has less memory than asked.
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
        node_start.last().copied().unwrap_or(0)
            + snapshot.nodes.last().map_or(0, |n| n.gpus.len()),
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
            }),
            Decision::Reject(d) => verdict.rejected.push(Deferred {
                pod: request.pod.clone(),
                reason: d.reason.clone(),
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
            *count += 1;
        }
    }
    let short = |gang: Option<u32>| {
        gang.and_then(|g| {
            let info = snapshot.gangs.get(g as usize)?;
            let have = info.bound + placed[g as usize];
            (have < info.min_member).then(|| {
                format!(
                    "gang {}: {} member(s) placed this round and {} bound, {} needed (minMember); all or nothing, so none is bound yet",
                    info.name, placed[g as usize], info.bound, info.min_member
                )
            })
        })
    };
    let mut kept = Vec::with_capacity(verdict.accepted.len());
    for p in std::mem::take(&mut verdict.accepted) {
        match short(snapshot.pending[p.request].gang) {
            Some(reason) => {
                verdict.held_back.push(p.request);
                verdict.waiting.push(Deferred { pod: p.pod, reason });
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
        check_gpu(snapshot, request, info, left, |position| {
            &gpus[first + position as usize]
        })
        .map_err(|reason| reason(gpu()))?;
    }
    Ok(())
}

type Reason = Box<dyn FnOnce(String) -> Invalid>;

/// Whether one GPU (or MIG instance) can serve `request` now; the error
/// takes the GPU's UUID.
fn check_gpu<'g>(
    snapshot: &Snapshot,
    request: &Request,
    info: &Gpu,
    left: &GpuLeft,
    sibling: impl Fn(u32) -> &'g GpuLeft,
) -> Result<(), Reason> {
    if !info.healthy {
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
            if info.memory_mib < request.memory_mib {
                let (has_mib, want_mib) = (info.memory_mib, request.memory_mib);
                return Err(Box::new(move |gpu| Invalid::NotEnoughMemory {
                    gpu,
                    has_mib,
                    want_mib,
                }));
            }
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
mod tests {
    use super::*;
    use crate::engine::types::Deferral;
    use crate::fixtures::{gang, node, request, restrict, snapshot};
    use wasmgpu_policy_sdk::Sharing as S;
    use wasmgpu_policy_sdk::testing::with_mig;

    fn assign(pod: u32, node: u32, gpus: &[u32]) -> Decision {
        Decision::Assign(Assignment {
            pod,
            node,
            gpus: gpus.to_vec(),
        })
    }

    /// Node 0 "a": 2 × H100 80GB; node 1 "b": 2 × A100 40GB, GPU 1 unhealthy.
    /// Pending: 0 x1 (1 exclusive), 1 x2 (2 exclusive), 2-4 s1-s3 (shares of
    /// 30000 MiB).
    fn two_nodes() -> Snapshot {
        let mut b = node("b", 2, "NVIDIA A100-SXM4-40GB", 40960);
        b.gpus[1].healthy = false;
        snapshot(
            vec![node("a", 2, "NVIDIA H100 80GB HBM3", 81920), b],
            vec![
                request("ns/x1", 1, S::Exclusive, 0),
                request("ns/x2", 2, S::Exclusive, 0),
                request("ns/s1", 1, S::Shared, 30000),
                request("ns/s2", 1, S::Shared, 30000),
                request("ns/s3", 1, S::Shared, 30000),
            ],
        )
    }

    fn reasons(verdict: &Verdict) -> Vec<Invalid> {
        verdict.refused.iter().map(|r| r.reason.clone()).collect()
    }

    #[test]
    fn accepts_what_fits_and_counts_earlier_decisions() {
        let snap = two_nodes();
        let verdict = validate(&snap, &[assign(0, 0, &[0]), assign(1, 0, &[0, 1])]);
        assert_eq!(
            verdict.accepted,
            [Placement {
                pod: "ns/x1".into(),
                node: "a".into(),
                gpus: vec!["GPU-a-0".into()],
                request: 0,
                at: (0, vec![0]),
            }]
        );
        assert_eq!(
            reasons(&verdict),
            [Invalid::GpuTaken {
                gpu: "GPU-a-0".into(),
                by: "ns/x1".into()
            }]
        );
        assert_eq!(verdict.refused[0].decision, "ns/x2 on a GPUs GPU-a-0,GPU-a-1");
    }

    #[test]
    fn refuses_unknown_pods_nodes_and_gpus() {
        let snap = two_nodes();
        // One decision per round: a pod's second decision is refused as such.
        let decisions = [
            assign(9, 0, &[0]),
            assign(0, 7, &[0]),
            assign(0, 0, &[5]),
            assign(1, 0, &[0]),
            assign(1, 0, &[1, 1]),
            assign(2, 1, &[1]),
        ];
        let verdicts: Vec<Verdict> = decisions
            .iter()
            .map(|d| validate(&snap, std::slice::from_ref(d)))
            .collect();
        assert!(verdicts.iter().all(|v| v.accepted.is_empty()));
        assert_eq!(
            verdicts.iter().flat_map(reasons).collect::<Vec<_>>(),
            [
                Invalid::UnknownPod { pod: 9 },
                Invalid::UnknownNode { node: 7 },
                Invalid::UnknownGpu {
                    gpu: 5,
                    node: "a".into()
                },
                Invalid::WrongCount { got: 1, want: 2 },
                Invalid::DuplicateGpu {
                    gpu: "GPU-a-1".into()
                },
                Invalid::UnhealthyGpu {
                    gpu: "GPU-b-1".into()
                },
            ]
        );
        assert_eq!(verdicts[0].refused[0].pod, None);
        assert_eq!(verdicts[0].refused[0].decision, "pod #9 on a GPUs GPU-a-0");
    }

    #[test]
    fn shared_memory_is_counted_and_blocks_exclusive_use() {
        let snap = two_nodes();
        let verdict = validate(
            &snap,
            &[
                assign(2, 1, &[0]),
                assign(3, 1, &[0]),
                assign(4, 0, &[0]),
                assign(0, 0, &[0]),
            ],
        );
        assert_eq!(verdict.accepted.len(), 2);
        assert_eq!(
            reasons(&verdict),
            [
                Invalid::SharedFull {
                    gpu: "GPU-b-0".into(),
                    free_mib: 10960,
                    want_mib: 30000
                },
                Invalid::GpuTaken {
                    gpu: "GPU-a-0".into(),
                    by: "1 shared allocation(s)".into()
                },
            ]
        );
    }

    #[test]
    fn model_memory_and_eligibility_are_enforced() {
        let mut snap = two_nodes();
        snap.pending[0].model = Some("NVIDIA H100*".into());
        snap.pending[1].memory_mib = 50000;
        restrict(&mut snap, 1, &[1]);
        let verdict = validate(&snap, &[assign(0, 1, &[0]), assign(1, 0, &[0, 1])]);
        assert_eq!(
            reasons(&verdict),
            [
                Invalid::ModelMismatch {
                    gpu: "GPU-b-0".into(),
                    model: "NVIDIA A100-SXM4-40GB".into(),
                    pattern: "NVIDIA H100*".into()
                },
                Invalid::NotEligible { node: "a".into() },
            ]
        );
        snap.pending[1].eligible_set = 0;
        let verdict = validate(&snap, &[assign(1, 1, &[0, 1])]);
        assert_eq!(
            verdict.refused[0].reason,
            Invalid::NotEnoughMemory {
                gpu: "GPU-b-0".into(),
                has_mib: 40960,
                want_mib: 50000
            }
        );
        snap.pending[1].memory_mib = 0;
        let verdict = validate(&snap, &[assign(1, 1, &[0, 1])]);
        assert_eq!(
            verdict.refused[0].reason,
            Invalid::UnhealthyGpu {
                gpu: "GPU-b-1".into()
            }
        );
    }

    #[test]
    fn a_pod_is_decided_once_and_existing_owners_count() {
        let mut snap = two_nodes();
        snap.nodes[0].gpus[1].held = true;
        snap.nodes[0].gpus[1].allocated_mib = 81920;
        let verdict = validate(
            &snap,
            &[
                Decision::Wait(Deferral {
                    pod: 0,
                    reason: "later".into(),
                }),
                assign(0, 0, &[0]),
                assign(2, 0, &[1]),
                Decision::Reject(Deferral {
                    pod: 1,
                    reason: "never".into(),
                }),
            ],
        );
        assert_eq!(
            verdict.waiting,
            [Deferred {
                pod: "ns/x1".into(),
                reason: "later".into()
            }]
        );
        assert_eq!(verdict.rejected.len(), 1);
        assert_eq!(
            reasons(&verdict),
            [
                Invalid::DecidedTwice,
                Invalid::GpuTaken {
                    gpu: "GPU-a-1".into(),
                    by: "a running pod".into()
                }
            ]
        );
        assert!(
            verdict.refused[0]
                .reason
                .to_string()
                .contains("already decided")
        );
    }

    #[test]
    fn an_assignment_of_no_gpus_is_refused_even_for_a_count_of_zero() {
        let mut snap = two_nodes();
        snap.pending[0].count = 0;
        let verdict = validate(&snap, &[assign(0, 0, &[]), assign(1, 0, &[])]);
        assert!(verdict.accepted.is_empty());
        assert_eq!(reasons(&verdict), [Invalid::NoGpus, Invalid::NoGpus]);
        assert_eq!(
            verdict.refused.iter().map(|r| r.index).collect::<Vec<_>>(),
            [0, 1]
        );
    }

    #[test]
    fn a_refused_assignment_still_counts_as_the_decision() {
        let snap = two_nodes();
        let verdict = validate(&snap, &[assign(0, 0, &[7]), assign(0, 0, &[0])]);
        assert!(verdict.accepted.is_empty());
        assert_eq!(reasons(&verdict)[1], Invalid::DecidedTwice);
    }

    /// Node "m": GPU 0 whole, GPU 1 with instances at positions 2 and 3
    /// (`1g.10gb`) and 4 (`2g.20gb`).
    fn mig_snapshot(pending: Vec<wasmgpu_policy_sdk::Request>) -> Snapshot {
        let node = with_mig(
            node("m", 2, "NVIDIA A100 80GB PCIe", 81920),
            1,
            &[("1g.10gb", 9856), ("1g.10gb", 9856), ("2g.20gb", 19968)],
        );
        snapshot(vec![node], pending)
    }

    fn mig(pod: &str, profile: &str) -> wasmgpu_policy_sdk::Request {
        wasmgpu_policy_sdk::Request {
            mig_profile: Some(profile.into()),
            ..request(pod, 1, S::Exclusive, 0)
        }
    }

    #[test]
    fn a_whole_gpu_and_its_mig_instances_exclude_each_other() {
        let snap = mig_snapshot(vec![
            mig("ns/m1", "1g.10gb"),
            request("ns/whole", 1, S::Exclusive, 0),
            mig("ns/m2", "1g.10gb"),
            request("ns/share", 1, S::Shared, 1000),
        ]);
        let verdict = validate(
            &snap,
            &[
                assign(0, 0, &[2]),
                assign(1, 0, &[1]),
                assign(2, 0, &[4]),
                assign(3, 0, &[3]),
            ],
        );
        assert_eq!(verdict.accepted.len(), 1);
        assert_eq!(verdict.accepted[0].gpus, ["MIG-GPU-m-1-0"]);
        assert_eq!(
            reasons(&verdict),
            [
                Invalid::GpuTaken {
                    gpu: "GPU-m-1".into(),
                    by: "1 of its MIG instance(s)".into()
                },
                Invalid::ProfileMismatch {
                    gpu: "MIG-GPU-m-1-2".into(),
                    profile: "2g.20gb".into(),
                    want: "1g.10gb".into()
                },
                Invalid::WrongKind {
                    gpu: "MIG-GPU-m-1-1".into(),
                    want: "a whole GPU".into()
                },
            ]
        );

        // The parent taken first blocks its instances; a MIG request is not
        // served by a whole GPU.
        let verdict = validate(&snap, &[assign(1, 0, &[1]), assign(0, 0, &[2]), assign(2, 0, &[0])]);
        assert_eq!(verdict.accepted.len(), 1);
        assert_eq!(
            reasons(&verdict),
            [
                Invalid::GpuTaken {
                    gpu: "MIG-GPU-m-1-0".into(),
                    by: "the holder of its parent GPU".into()
                },
                Invalid::WrongKind {
                    gpu: "GPU-m-0".into(),
                    want: "a MIG instance".into()
                },
            ]
        );

        // An instance held before the round blocks the parent too.
        let mut snap = snap;
        snap.nodes[0].gpus[3].held = true;
        let verdict = validate(&snap, &[assign(1, 0, &[1])]);
        assert_eq!(verdict.refused[0].reason.code(), "gpu-taken");
    }

    #[test]
    fn a_gang_short_of_min_member_is_held_back_whole() {
        let mut snap = snapshot(
            vec![node("a", 4, "NVIDIA H100", 81920)],
            (0..4)
                .map(|i| request(&format!("ns/w-{i}"), 1, S::Exclusive, 0))
                .collect(),
        );
        gang(&mut snap, "ns/train", 3, &[0, 1, 2]);
        // Two of three members: both wait; the pod outside the gang is bound.
        let verdict = validate(&snap, &[assign(0, 0, &[0]), assign(1, 0, &[1]), assign(3, 0, &[2])]);
        assert_eq!(verdict.accepted.len(), 1);
        assert_eq!(verdict.accepted[0].pod, "ns/w-3");
        assert_eq!(verdict.waiting.len(), 2);
        assert!(
            verdict.waiting[0].reason.contains("gang ns/train: 2 member(s) placed this round and 0 bound, 3 needed"),
            "{:?}",
            verdict.waiting
        );
        // With one member already bound, two are enough.
        snap.gangs[0].bound = 1;
        let verdict = validate(&snap, &[assign(0, 0, &[0]), assign(1, 0, &[1])]);
        assert_eq!(verdict.accepted.len(), 2);
    }
}
