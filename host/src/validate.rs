//! # Decision validation
//!
//! The host never trusts a policy. [`validate`] replays the decisions of one
//! round, in order, against the snapshot the policy was given, and keeps an
//! assignment only when it is possible: the pod is pending and decided once,
//! the node exists and is eligible for the pod, the GPUs are exactly `count`
//! (and never none) distinct, healthy GPUs of that node that match the model
//! glob and the memory, and are free — counting what earlier decisions of the
//! same round already took. Everything else comes back with the reason, in
//! words.
//!
//! [`snapshot::check`] holds a snapshot read from a file to the rules the
//! controller's own snapshots obey, before a policy sees it.
//!
//! Pure and synchronous: no I/O, no clock.

pub mod snapshot;

use std::collections::{HashMap, HashSet};
use std::fmt;

use ahash::RandomState;

use wasmgpu_policy_sdk::glob_match;

use crate::engine::types::{Assignment, Decision, Deferral, Gpu, Request, Sharing, Snapshot};

/// Why an assignment (or a decision) was refused.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Invalid {
    /// The pod is not pending in this snapshot.
    UnknownPod,
    /// The pod was already decided earlier in the round.
    DecidedTwice,
    /// No node of that name in the snapshot.
    UnknownNode { node: String },
    /// The node exists but the pod may not run there.
    NotEligible { node: String },
    /// An assignment of no GPUs at all.
    NoGpus,
    /// Wrong number of GPUs.
    WrongCount { got: usize, want: u32 },
    /// The same GPU named twice in one assignment.
    DuplicateGpu { gpu: String },
    /// No GPU with that UUID in the snapshot.
    UnknownGpu { gpu: String },
    /// The GPU exists, but on another node.
    GpuOnOtherNode { gpu: String, node: String },
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
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::UnknownPod => write!(f, "the pod is not pending"),
            Invalid::DecidedTwice => write!(f, "the pod was already decided in this round"),
            Invalid::UnknownNode { node } => write!(f, "node {node:?} is not in the snapshot"),
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
            Invalid::UnknownGpu { gpu } => write!(f, "GPU {gpu} does not exist"),
            Invalid::GpuOnOtherNode { gpu, node } => {
                write!(f, "GPU {gpu} is on node {node:?}, not the chosen node")
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
        }
    }
}

impl Invalid {
    /// A short, stable label for the reason (`gpu-taken`), for metrics and
    /// machine-readable output.
    pub fn code(&self) -> &'static str {
        match self {
            Invalid::UnknownPod => "unknown-pod",
            Invalid::DecidedTwice => "decided-twice",
            Invalid::UnknownNode { .. } => "unknown-node",
            Invalid::NotEligible { .. } => "not-eligible",
            Invalid::NoGpus => "no-gpus",
            Invalid::WrongCount { .. } => "wrong-count",
            Invalid::DuplicateGpu { .. } => "duplicate-gpu",
            Invalid::UnknownGpu { .. } => "unknown-gpu",
            Invalid::GpuOnOtherNode { .. } => "gpu-on-other-node",
            Invalid::UnhealthyGpu { .. } => "unhealthy-gpu",
            Invalid::ModelMismatch { .. } => "model-mismatch",
            Invalid::NotEnoughMemory { .. } => "not-enough-memory",
            Invalid::GpuTaken { .. } => "gpu-taken",
            Invalid::SharedFull { .. } => "shared-full",
        }
    }
}

/// A decision the host refused, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Refused {
    /// The decision's position in the policy's list.
    pub index: usize,
    /// The decision as the policy made it.
    pub decision: Decision,
    /// Why it was refused.
    pub reason: Invalid,
}

/// The host's verdict on one round.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// Assignments to apply, in the policy's order.
    pub accepted: Vec<Assignment>,
    /// Pods the policy chose to leave pending this round.
    pub waiting: Vec<Deferral>,
    /// Pods the policy says can never be placed as requested.
    pub rejected: Vec<Deferral>,
    /// Decisions the host refused.
    pub refused: Vec<Refused>,
}

/// The maps of the replay hash with aHash: fast, and seeded at random, so
/// tenants cannot pick pod or node names that collide.
type Map<K, V> = HashMap<K, V, RandomState>;

fn map<K, V>(capacity: usize) -> Map<K, V> {
    HashMap::with_capacity_and_hasher(capacity, RandomState::new())
}

/// One GPU during the replay: what it is and what it has left.
struct GpuLeft<'a> {
    gpu: &'a Gpu,
    node: usize,
    free_mib: u64,
    holder: Option<&'a str>,
    shares: u32,
}

/// Checks `decisions` against `snapshot`; see the module docs.
///
/// Built for rounds of thousands of GPUs: the maps hash with aHash, the
/// per-GPU state lives in one vector indexed by position and borrows its
/// strings instead of copying them.
pub fn validate(snapshot: &Snapshot, decisions: &[Decision]) -> Verdict {
    let mut pod_to_request: Map<&str, usize> = map(snapshot.pending.len());
    for (i, r) in snapshot.pending.iter().enumerate() {
        pod_to_request.insert(r.pod.as_str(), i);
    }
    let mut node_by_name: Map<&str, usize> = map(snapshot.nodes.len());
    for (i, n) in snapshot.nodes.iter().enumerate() {
        node_by_name.insert(n.name.as_str(), i);
    }
    let gpu_count = snapshot.nodes.iter().map(|n| n.gpus.len()).sum();
    let mut gpus: Vec<GpuLeft> = Vec::with_capacity(gpu_count);
    let mut uuid_to_gpu: Map<&str, usize> = map(gpu_count);
    for (n, node) in snapshot.nodes.iter().enumerate() {
        for gpu in &node.gpus {
            // A UUID is one GPU: the first occurrence stands for all.
            uuid_to_gpu.entry(gpu.uuid.as_str()).or_insert(gpus.len());
            gpus.push(GpuLeft {
                gpu,
                node: n,
                free_mib: gpu.memory_mib.saturating_sub(gpu.allocated_mib),
                holder: gpu.exclusive_owner.as_deref(),
                shares: gpu.shared_owners,
            });
        }
    }

    let mut verdict = Verdict::default();
    let mut decided = vec![false; snapshot.pending.len()];
    for (index, decision) in decisions.iter().enumerate() {
        let pod = decision.pod();
        let refuse = |reason| Refused {
            index,
            decision: decision.clone(),
            reason,
        };
        let Some(&position) = pod_to_request.get(pod) else {
            verdict.refused.push(refuse(Invalid::UnknownPod));
            continue;
        };
        if std::mem::replace(&mut decided[position], true) {
            verdict.refused.push(refuse(Invalid::DecidedTwice));
            continue;
        }
        let request = &snapshot.pending[position];
        match decision {
            Decision::Wait(d) => verdict.waiting.push(d.clone()),
            Decision::Reject(d) => verdict.rejected.push(d.clone()),
            Decision::Assign(a) => {
                match check(snapshot, a, request, &node_by_name, &uuid_to_gpu, &gpus) {
                    Err(reason) => verdict.refused.push(refuse(reason)),
                    Ok(()) => {
                        for uuid in &a.gpus {
                            let left = &mut gpus[uuid_to_gpu[uuid.as_str()]];
                            match request.sharing {
                                Sharing::Exclusive => {
                                    left.holder = Some(a.pod.as_str());
                                    left.free_mib = 0;
                                }
                                Sharing::Shared => {
                                    left.shares += 1;
                                    left.free_mib -= request.memory_mib;
                                }
                            }
                        }
                        verdict.accepted.push(a.clone());
                    }
                }
            }
        }
    }
    verdict
}

fn check(
    snapshot: &Snapshot,
    a: &Assignment,
    request: &Request,
    node_by_name: &Map<&str, usize>,
    uuid_to_gpu: &Map<&str, usize>,
    gpus: &[GpuLeft],
) -> Result<(), Invalid> {
    let node = *node_by_name
        .get(a.node.as_str())
        .ok_or_else(|| Invalid::UnknownNode {
            node: a.node.clone(),
        })?;
    let eligible = snapshot.eligible_sets.get(request.eligible_set as usize);
    if eligible.is_none_or(|set| set.binary_search(&(node as u32)).is_err()) {
        return Err(Invalid::NotEligible {
            node: a.node.clone(),
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
    let mut seen: HashSet<&str, RandomState> = HashSet::default();
    for (k, uuid) in a.gpus.iter().enumerate() {
        // A handful of GPUs: comparing with the earlier ones beats hashing.
        let duplicate = if a.gpus.len() <= 16 {
            a.gpus[..k].contains(uuid)
        } else {
            !seen.insert(uuid.as_str())
        };
        if duplicate {
            return Err(Invalid::DuplicateGpu { gpu: uuid.clone() });
        }
        let Some(left) = uuid_to_gpu.get(uuid.as_str()).map(|&g| &gpus[g]) else {
            return Err(Invalid::UnknownGpu { gpu: uuid.clone() });
        };
        let info = left.gpu;
        let gpu = || uuid.clone();
        if left.node != node {
            let node = snapshot.nodes[left.node].name.clone();
            return Err(Invalid::GpuOnOtherNode { gpu: gpu(), node });
        }
        if !info.healthy {
            return Err(Invalid::UnhealthyGpu { gpu: gpu() });
        }
        if let Some(pattern) = &request.model
            && !glob_match(pattern, &info.model)
        {
            return Err(Invalid::ModelMismatch {
                gpu: gpu(),
                model: info.model.clone(),
                pattern: pattern.clone(),
            });
        }
        if let Some(holder) = left.holder {
            return Err(Invalid::GpuTaken {
                gpu: gpu(),
                by: holder.to_owned(),
            });
        }
        match request.sharing {
            Sharing::Exclusive => {
                if info.memory_mib < request.memory_mib {
                    return Err(Invalid::NotEnoughMemory {
                        gpu: gpu(),
                        has_mib: info.memory_mib,
                        want_mib: request.memory_mib,
                    });
                }
                if left.shares > 0 || left.free_mib < info.memory_mib {
                    let by = format!("{} shared allocation(s)", left.shares.max(1));
                    return Err(Invalid::GpuTaken { gpu: gpu(), by });
                }
            }
            Sharing::Shared => {
                if left.free_mib < request.memory_mib {
                    return Err(Invalid::SharedFull {
                        gpu: gpu(),
                        free_mib: left.free_mib,
                        want_mib: request.memory_mib,
                    });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{node, request, restrict, snapshot};
    use wasmgpu_policy_sdk::Sharing as S;

    fn assign(pod: &str, node: &str, gpus: &[&str]) -> Decision {
        Decision::Assign(Assignment {
            pod: pod.into(),
            node: node.into(),
            gpus: gpus.iter().map(|g| g.to_string()).collect(),
        })
    }

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
        let verdict = validate(
            &snap,
            &[
                assign("ns/x1", "a", &["GPU-a-0"]),
                assign("ns/x2", "a", &["GPU-a-0", "GPU-a-1"]),
            ],
        );
        assert_eq!(verdict.accepted.len(), 1);
        assert_eq!(
            reasons(&verdict),
            [Invalid::GpuTaken {
                gpu: "GPU-a-0".into(),
                by: "ns/x1".into()
            }]
        );
    }

    #[test]
    fn refuses_unknown_pods_nodes_and_gpus() {
        let snap = two_nodes();
        // One decision per round: a pod's second decision is refused as such.
        let decisions = [
            assign("ns/ghost", "a", &["GPU-a-0"]),
            assign("ns/x1", "nowhere", &["GPU-a-0"]),
            assign("ns/x1", "a", &["GPU-nope"]),
            assign("ns/x1", "a", &["GPU-b-0"]),
            assign("ns/x2", "a", &["GPU-a-0"]),
            assign("ns/x2", "a", &["GPU-a-1", "GPU-a-1"]),
            assign("ns/s1", "b", &["GPU-b-1"]),
        ];
        let verdicts: Vec<Verdict> = decisions
            .iter()
            .map(|d| validate(&snap, std::slice::from_ref(d)))
            .collect();
        assert!(verdicts.iter().all(|v| v.accepted.is_empty()));
        assert_eq!(
            verdicts.iter().flat_map(reasons).collect::<Vec<_>>(),
            [
                Invalid::UnknownPod,
                Invalid::UnknownNode {
                    node: "nowhere".into()
                },
                Invalid::UnknownGpu {
                    gpu: "GPU-nope".into()
                },
                Invalid::GpuOnOtherNode {
                    gpu: "GPU-b-0".into(),
                    node: "b".into()
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
    }

    #[test]
    fn shared_memory_is_counted_and_blocks_exclusive_use() {
        let snap = two_nodes();
        let verdict = validate(
            &snap,
            &[
                assign("ns/s1", "b", &["GPU-b-0"]),
                assign("ns/s2", "b", &["GPU-b-0"]),
                assign("ns/s3", "a", &["GPU-a-0"]),
                assign("ns/x1", "a", &["GPU-a-0"]),
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
        let verdict = validate(
            &snap,
            &[
                assign("ns/x1", "b", &["GPU-b-0"]),
                assign("ns/x2", "a", &["GPU-a-0", "GPU-a-1"]),
            ],
        );
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
        let verdict = validate(&snap, &[assign("ns/x2", "b", &["GPU-b-0", "GPU-b-1"])]);
        assert_eq!(
            verdict.refused[0].reason,
            Invalid::NotEnoughMemory {
                gpu: "GPU-b-0".into(),
                has_mib: 40960,
                want_mib: 50000
            }
        );
        snap.pending[1].memory_mib = 0;
        let verdict = validate(&snap, &[assign("ns/x2", "b", &["GPU-b-0", "GPU-b-1"])]);
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
        snap.nodes[0].gpus[1].exclusive_owner = Some("other/running".into());
        snap.nodes[0].gpus[1].allocated_mib = 81920;
        let verdict = validate(
            &snap,
            &[
                Decision::Wait(Deferral {
                    pod: "ns/x1".into(),
                    reason: "later".into(),
                }),
                assign("ns/x1", "a", &["GPU-a-0"]),
                assign("ns/s1", "a", &["GPU-a-1"]),
                Decision::Reject(Deferral {
                    pod: "ns/x2".into(),
                    reason: "never".into(),
                }),
            ],
        );
        assert_eq!(verdict.waiting.len(), 1);
        assert_eq!(verdict.rejected.len(), 1);
        assert_eq!(
            reasons(&verdict),
            [
                Invalid::DecidedTwice,
                Invalid::GpuTaken {
                    gpu: "GPU-a-1".into(),
                    by: "other/running".into()
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
        let verdict = validate(
            &snap,
            &[assign("ns/x1", "a", &[]), assign("ns/x2", "a", &[])],
        );
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
        let verdict = validate(
            &snap,
            &[
                assign("ns/x1", "a", &["GPU-nope"]),
                assign("ns/x1", "a", &["GPU-a-0"]),
            ],
        );
        assert!(verdict.accepted.is_empty());
        assert_eq!(reasons(&verdict)[1], Invalid::DecidedTwice);
    }
}
