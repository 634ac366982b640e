//! The rules, one case each, on the contract's snapshot builders.

use super::*;
use crate::decision::wait;
use crate::host_snapshot::{HostSnapshot, SharedCounters};
use crate::testing::{gang, node, request, restrict, shape, snapshot, with_mig};
use crate::types::Sharing as S;
use crate::types::{Assignment, Decision, Deferral, Snapshot};

fn assign(pod: u32, node: u32, gpus: &[u32]) -> Decision {
    Decision::Assign(Assignment {
        pod,
        node,
        gpus: gpus.to_vec(),
        claims: Vec::new(),
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
            claims: Vec::new(),
        }]
    );
    assert_eq!(
        reasons(&verdict),
        [Invalid::GpuTaken {
            gpu: "GPU-a-0".into(),
            by: "ns/x1".into()
        }]
    );
    assert_eq!(
        verdict.refused[0].decision,
        "ns/x2 on a GPUs GPU-a-0,GPU-a-1"
    );
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
    shape(&mut snap.pending[0]).model = Some("NVIDIA H100*".into());
    shape(&mut snap.pending[1]).memory_mib = 50000;
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
    shape(&mut snap.pending[1]).memory_mib = 0;
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
            reason: "later".into(),
            gang: None,
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
    shape(&mut snap.pending[0]).count = 0;
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
fn mig_snapshot(pending: Vec<crate::types::Request>) -> Snapshot {
    let node = with_mig(
        node("m", 2, "NVIDIA A100 80GB PCIe", 81920),
        1,
        &[("1g.10gb", 9856), ("1g.10gb", 9856), ("2g.20gb", 19968)],
    );
    snapshot(vec![node], pending)
}

fn mig(pod: &str, profile: &str) -> crate::types::Request {
    let mut r = request(pod, 1, S::Exclusive, 0);
    shape(&mut r).mig_profile = Some(profile.into());
    r
}

#[test]
fn memory_asked_with_a_mig_profile_is_the_instances_own() {
    let mut wants = mig("ns/m", "2g.20gb");
    shape(&mut wants).memory_mib = 19968;
    let mut too_much = mig("ns/big", "1g.10gb");
    shape(&mut too_much).memory_mib = 20000;
    let snap = mig_snapshot(vec![wants, too_much]);
    let verdict = validate(&snap, &[assign(0, 0, &[4]), assign(1, 0, &[2])]);
    assert_eq!(verdict.accepted.len(), 1);
    assert_eq!(verdict.accepted[0].gpus, ["MIG-GPU-m-1-2"]);
    assert_eq!(
        reasons(&verdict),
        [Invalid::NotEnoughMemory {
            gpu: "MIG-GPU-m-1-0".into(),
            has_mib: 9856,
            want_mib: 20000
        }],
        "the parent's 81920 MiB do not count"
    );
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
    let verdict = validate(
        &snap,
        &[assign(1, 0, &[1]), assign(0, 0, &[2]), assign(2, 0, &[0])],
    );
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
    let verdict = validate(
        &snap,
        &[assign(0, 0, &[0]), assign(1, 0, &[1]), assign(3, 0, &[2])],
    );
    assert_eq!(verdict.accepted.len(), 1);
    assert_eq!(verdict.accepted[0].pod, "ns/w-3");
    assert_eq!(verdict.waiting.len(), 2);
    assert!(
        verdict.waiting[0]
            .reason
            .contains("gang ns/train: 2 member(s) placed this round and 0 bound, 3 needed"),
        "{:?}",
        verdict.waiting
    );
    assert!(
        verdict
            .waiting
            .iter()
            .all(|w| w.gang.as_deref() == Some("ns/train")),
        "{:?}",
        verdict.waiting
    );
    // A member the policy itself leaves waiting names its gang too; a pod
    // outside any gang names none.
    let verdict = validate(&snap, &[wait(2, "no room"), wait(3, "no room")]);
    assert_eq!(verdict.waiting[0].gang.as_deref(), Some("ns/train"));
    assert_eq!(verdict.waiting[1].gang, None);
    // With one member already bound, two are enough.
    snap.gangs[0].bound = 1;
    let verdict = validate(&snap, &[assign(0, 0, &[0]), assign(1, 0, &[1])]);
    assert_eq!(verdict.accepted.len(), 2);
}

#[test]
fn a_gang_bound_near_the_integer_limit_is_not_held_back() {
    let mut snap = snapshot(
        vec![node("a", 2, "NVIDIA H100", 81920)],
        vec![request("ns/w-0", 1, S::Exclusive, 0)],
    );
    gang(&mut snap, "ns/train", 3, &[0]);
    snap.gangs[0].bound = u32::MAX;
    let verdict = validate(&snap, &[assign(0, 0, &[0])]);
    assert_eq!(verdict.accepted.len(), 1, "{:?}", verdict.waiting);
    snap.gangs[0].bound = u32::MAX - 1;
    snap.gangs[0].min_member = u32::MAX;
    let verdict = validate(&snap, &[assign(0, 0, &[0])]);
    assert_eq!(verdict.accepted.len(), 1, "{:?}", verdict.waiting);
}

#[test]
fn a_mig_instance_of_an_unhealthy_gpu_is_unhealthy() {
    let mut snap = mig_snapshot(vec![mig("ns/m", "1g.10gb")]);
    snap.nodes[0].gpus[1].healthy = false;
    assert!(snap.nodes[0].gpus[2].healthy, "the snapshot says healthy");
    let verdict = validate(&snap, &[assign(0, 0, &[2])]);
    assert_eq!(
        reasons(&verdict),
        [Invalid::UnhealthyGpu {
            gpu: "MIG-GPU-m-1-0".into()
        }]
    );
}

proptest::proptest! {
    /// At the integer limits too: a gang's assignments are kept exactly
    /// when the members bound and placed reach `min_member`.
    #[test]
    fn a_gangs_assignments_are_kept_exactly_when_it_reaches_min_member(
        bound in proptest::prop_oneof![0u32..4, (u32::MAX - 4)..=u32::MAX],
        min_member in proptest::prop_oneof![1u32..6, (u32::MAX - 4)..=u32::MAX],
        placed in 1u32..=2,
    ) {
        let mut snap = snapshot(
            vec![node("a", 2, "NVIDIA H100", 81920)],
            (0..placed)
                .map(|i| request(&format!("ns/w-{i}"), 1, S::Exclusive, 0))
                .collect(),
        );
        let members: Vec<u32> = (0..placed).collect();
        gang(&mut snap, "ns/train", min_member, &members);
        snap.gangs[0].bound = bound;
        let decisions: Vec<Decision> = (0..placed).map(|i| assign(i, 0, &[i])).collect();
        let verdict = validate(&snap, &decisions);
        let reaches = u64::from(bound) + u64::from(placed) >= u64::from(min_member);
        proptest::prop_assert_eq!(verdict.accepted.len(), if reaches { placed as usize } else { 0 });
        proptest::prop_assert_eq!(verdict.held_back.len(), if reaches { 0 } else { placed as usize });
    }
}

#[test]
fn devices_sharing_a_dra_counter_are_not_taken_past_what_is_left() {
    let snap = snapshot(
        vec![node("a", 2, "NVIDIA A100-SXM4-40GB", 40960)],
        vec![
            request("ns/p", 1, S::Exclusive, 0),
            request("ns/q", 1, S::Exclusive, 0),
        ],
    );
    let counter = "gpu.nvidia.com/a/gpu-0-counter-set/memorySlice0";
    let host_with = |left: u64| {
        let mut host = HostSnapshot::from_snapshot(snap.clone());
        host.nodes[0].counters = SharedCounters {
            left: vec![(counter.to_owned(), left)],
            consumes: vec![vec![(0, 1)], vec![(0, 1)]],
        };
        host
    };
    let decisions = [assign(0, 0, &[0]), assign(1, 0, &[1])];

    // Both consume the one slice left: the second decision is refused.
    let host = host_with(1);
    let verdict = validate_host(&host, &decisions);
    assert_eq!(verdict.accepted.len(), 1);
    assert_eq!(
        reasons(&verdict),
        [Invalid::CounterExhausted {
            gpu: "GPU-a-1".into(),
            counter: counter.into(),
            wants: 1,
            left: 0,
        }]
    );
    assert_eq!(reasons(&verdict)[0].code(), "counter-exhausted");
    // Nothing left: neither.
    assert_eq!(validate_host(&host_with(0), &decisions).refused.len(), 2);
    // Room for both, and without counters nothing is counted.
    assert_eq!(validate_host(&host_with(2), &decisions).accepted.len(), 2);
    assert_eq!(validate(&snap, &decisions).accepted.len(), 2);

    // A snapshot file keeps the counters.
    let file = crate::snapshot_file::SnapshotFile::of(&host);
    let json = serde_json::to_value(&file).unwrap();
    assert_eq!(json["nodes"][0]["sharedCountersLeft"][counter], 1);
    assert_eq!(json["nodes"][0]["gpus"][1]["consumesCounters"][counter], 1);
    let back: crate::snapshot_file::SnapshotFile = serde_json::from_value(json).unwrap();
    assert_eq!(back.into_host().nodes[0].counters, host.nodes[0].counters);
}

#[test]
fn a_gpu_consumes_its_dra_counters_once_however_many_share_it() {
    let mut shared_before = node("a", 1, "NVIDIA A100-SXM4-40GB", 40960);
    shared_before.gpus[0].shared_owners = 1;
    shared_before.gpus[0].allocated_mib = 5000;
    let snap = snapshot(
        vec![shared_before],
        vec![
            request("ns/s1", 1, S::Shared, 5000),
            request("ns/s2", 1, S::Shared, 5000),
        ],
    );
    let mut host = HostSnapshot::from_snapshot(snap);
    // The first share (before the round) consumed the one slice there was.
    host.nodes[0].counters = SharedCounters {
        left: vec![(
            "gpu.nvidia.com/a/gpu-0-counter-set/memorySlice0".to_owned(),
            0,
        )],
        consumes: vec![vec![(0, 1)]],
    };
    let decisions = [assign(0, 0, &[0]), assign(1, 0, &[0])];
    let verdict = validate_host(&host, &decisions);
    assert_eq!(verdict.accepted.len(), 2, "{:?}", reasons(&verdict));

    // Unused before the round: the first share consumes the slice, the
    // second shares the GPU it is cut from.
    let snap = host.snapshot.clone();
    let mut fresh = HostSnapshot::from_snapshot(Snapshot {
        nodes: vec![node("a", 1, "NVIDIA A100-SXM4-40GB", 40960)],
        ..snap
    });
    fresh.nodes[0].counters = SharedCounters {
        left: vec![(
            "gpu.nvidia.com/a/gpu-0-counter-set/memorySlice0".to_owned(),
            1,
        )],
        consumes: vec![vec![(0, 1)]],
    };
    let verdict = validate_host(&fresh, &decisions);
    assert_eq!(verdict.accepted.len(), 2, "{:?}", reasons(&verdict));
}

mod preempt;
