//! The preemption, tenant-limit and DRA-choice rules, one case each.

use crate::decision::{assign, preempt};
use crate::testing::{gang, node, request, running_on_each_gpu, snapshot};
use crate::types::Sharing as S;
use crate::types::{
    Alternative, Ask, Assignment, AttributeValue, Claim, ClaimChoice, ClaimRequest, Constraint,
    GpuRef, PreemptionPolicy, Tenant,
};
use crate::validate::*;

/// One node "n" of 8 GPUs, each held by a pod of priority 100 (running 0–7,
/// started 0–7), and a pending pod of priority 1000 asking 4.
fn full() -> Snapshot {
    let mut snap = snapshot(
        vec![node("n", 8, "NVIDIA H100 80GB HBM3", 81920)],
        vec![request("ml/urgent", 4, S::Exclusive, 0)],
    );
    snap.pending[0].priority = 1000;
    running_on_each_gpu(&mut snap, 0, "batch/p", 100);
    snap
}

fn code(verdict: &Verdict) -> Vec<&'static str> {
    verdict.refused.iter().map(|r| r.reason.code()).collect()
}

#[test]
fn a_higher_priority_pod_takes_the_gpus_of_exactly_the_victims_it_needs() {
    let snap = full();
    let verdict = validate(&snap, &[preempt(0, 0, vec![0, 1, 2, 3], vec![0, 1, 2, 3])]);
    assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
    let p = &verdict.preempting[0];
    assert_eq!(p.victims, ["batch/p0", "batch/p1", "batch/p2", "batch/p3"]);
    assert_eq!(
        p.placement.gpus,
        ["GPU-n-0", "GPU-n-1", "GPU-n-2", "GPU-n-3"]
    );
    assert!(
        verdict.accepted.is_empty(),
        "a preemptor is not bound in its round"
    );
}

#[test]
fn victims_must_be_lower_needed_on_the_node_and_named_once() {
    let mut snap = full();
    snap.running[2].priority = 1000;
    let cases = [
        (
            preempt(0, 0, vec![0, 1, 2, 3], vec![0, 1, 2, 3]),
            "victim-not-lower",
        ),
        (
            preempt(0, 0, vec![0, 1, 4, 5], vec![0, 1, 4, 5, 6]),
            "needless-victim",
        ),
        (preempt(0, 0, vec![0, 1, 4, 5], vec![0, 1, 4]), "gpu-taken"),
        (
            preempt(0, 0, vec![0, 1, 4, 5], vec![0, 0, 4, 5]),
            "victim-twice",
        ),
        (preempt(0, 0, vec![0, 1, 4, 5], vec![]), "no-victims"),
        (
            preempt(0, 0, vec![0, 1, 4, 5], vec![0, 1, 4, 9]),
            "unknown-victim",
        ),
    ];
    for (decision, want) in cases {
        let verdict = validate(&snap, std::slice::from_ref(&decision));
        assert_eq!(code(&verdict), [want], "{decision:?}");
        assert!(verdict.preempting.is_empty());
    }
}

#[test]
fn never_protected_and_unevictable_pods_are_refused_with_the_reason() {
    let mut snap = full();
    snap.pending[0].preemption = PreemptionPolicy::Never;
    let d = preempt(0, 0, vec![0, 1, 2, 3], vec![0, 1, 2, 3]);
    assert_eq!(
        code(&validate(&snap, std::slice::from_ref(&d))),
        ["never-preempts"]
    );

    let mut snap = full();
    snap.running[1].protected_ms = 5_000;
    assert_eq!(
        code(&validate(&snap, std::slice::from_ref(&d))),
        ["victim-protected"]
    );

    let mut snap = full();
    snap.running[3].evictable = false;
    let verdict = validate(&snap, std::slice::from_ref(&d));
    assert_eq!(code(&verdict), ["victim-not-evictable"]);
    assert!(
        verdict.refused[0]
            .reason
            .to_string()
            .contains("PodDisruptionBudget"),
        "{}",
        verdict.refused[0].reason
    );
}

#[test]
fn a_gang_member_as_victim_means_its_whole_gang() {
    let mut snap = full();
    gang(&mut snap, "batch/g", 2, &[]);
    for r in [0, 5] {
        snap.running[r].gang = Some(0);
        snap.gangs[0].running.push(r as u32);
    }
    let split = preempt(0, 0, vec![0, 1, 2, 3], vec![0, 1, 2, 3]);
    assert_eq!(code(&validate(&snap, &[split])), ["gang-split"]);
    let whole = preempt(0, 0, vec![0, 1, 2, 3], vec![0, 1, 2, 3, 5]);
    let verdict = validate(&snap, &[whole]);
    assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
    assert_eq!(verdict.preempting[0].victims.len(), 5);
}

#[test]
fn a_gang_no_gpu_of_which_is_needed_is_a_needless_victim() {
    let mut snap = full();
    gang(&mut snap, "batch/g", 2, &[]);
    for r in [6, 7] {
        snap.running[r].gang = Some(0);
        snap.gangs[0].running.push(r as u32);
    }
    // GPUs 0–3 are enough: the gang on GPUs 6 and 7 need not go.
    let needless = preempt(0, 0, vec![0, 1, 2, 3], vec![0, 1, 2, 3, 6, 7]);
    assert_eq!(code(&validate(&snap, &[needless])), ["needless-victim"]);
    // Taking GPUs 4–7, the gang is needed (as a whole).
    let needed = preempt(0, 0, vec![4, 5, 6, 7], vec![4, 5, 6, 7]);
    let verdict = validate(&snap, &[needed]);
    assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
}

#[test]
fn nominated_gpus_are_taken_for_the_rest_of_the_round() {
    let mut snap = full();
    snap.pending.push(request("ml/second", 1, S::Exclusive, 0));
    snap.pending[1].priority = 1000;
    let verdict = validate(
        &snap,
        &[
            preempt(0, 0, vec![0, 1, 2, 3], vec![0, 1, 2, 3]),
            preempt(1, 0, vec![0], vec![0]),
        ],
    );
    assert_eq!(code(&verdict), ["victim-twice"]);
    // Once victims are gone their GPUs are the preemptor's: no later
    // decision of the round takes them, though a free one is fine.
    snap.nodes[0].gpus[6].held = false;
    snap.nodes[0].gpus[6].allocated_mib = 0;
    snap.running.truncate(6);
    let verdict = validate(
        &snap,
        &[
            preempt(0, 0, vec![0, 1, 2, 3], vec![0, 1, 2, 3]),
            assign(1, 0, vec![1]),
        ],
    );
    assert_eq!(
        verdict.refused[0].reason,
        Invalid::GpuTaken {
            gpu: "GPU-n-1".into(),
            by: "ml/urgent".into()
        }
    );
    let verdict = validate(
        &snap,
        &[
            preempt(0, 0, vec![0, 1, 2, 3], vec![0, 1, 2, 3]),
            assign(1, 0, vec![6]),
        ],
    );
    assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
}

fn tenants(snap: &mut Snapshot) {
    snap.tenants = vec![
        Tenant {
            name: "a".into(),
            weight: 1,
            quota: 4,
            limit: None,
            holding: 8,
            waiting: 0,
        },
        Tenant {
            name: "b".into(),
            weight: 1,
            quota: 4,
            limit: Some(4),
            holding: 0,
            waiting: 4,
        },
    ];
    for r in &mut snap.running {
        r.tenant = Some(0);
    }
    snap.pending[0].tenant = Some(1);
}

#[test]
fn a_tenant_under_its_quota_reclaims_from_one_over_its_own_of_any_priority() {
    let mut snap = full();
    tenants(&mut snap);
    snap.pending[0].priority = 0;
    let d = preempt(0, 0, vec![0, 1, 2, 3], vec![0, 1, 2, 3]);
    let verdict = validate(&snap, std::slice::from_ref(&d));
    assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
    // Not once the reclaimer would pass its quota.
    snap.tenants[1].holding = 1;
    assert_eq!(code(&validate(&snap, &[d])), ["victim-not-lower"]);
}

#[test]
fn an_assignment_past_the_tenants_limit_is_refused() {
    let mut snap = snapshot(
        vec![node("n", 8, "NVIDIA H100 80GB HBM3", 81920)],
        vec![
            request("ml/a", 3, S::Exclusive, 0),
            request("ml/b", 2, S::Exclusive, 0),
        ],
    );
    snap.tenants = vec![Tenant {
        name: "ml".into(),
        weight: 1,
        quota: 2,
        limit: Some(4),
        holding: 0,
        waiting: 5,
    }];
    snap.pending[0].tenant = Some(0);
    snap.pending[1].tenant = Some(0);
    let verdict = validate(
        &snap,
        &[assign(0, 0, vec![0, 1, 2]), assign(1, 0, vec![3, 4])],
    );
    assert_eq!(verdict.accepted.len(), 1);
    assert_eq!(
        verdict.refused[0].reason.to_string(),
        "tenant \"ml\" would hold 5 GPU(s), past its limit of 4"
    );
}

/// A node of 4 GPUs and a DRA pod with one claim of two requests (1 GPU
/// each) whose devices must share a `pcieRoot`: GPUs 0–1 are on root 0,
/// 2–3 on root 1.
fn dra() -> Snapshot {
    let mut snap = snapshot(vec![node("n", 4, "NVIDIA H100 80GB HBM3", 81920)], vec![]);
    let mut r = request("ml/dra", 1, S::Exclusive, 0);
    let alt = || Alternative {
        subrequest: None,
        count: 1,
        candidates: 0,
    };
    r.ask = Ask::Claims(vec![Claim {
        name: "ml/pair".into(),
        requests: vec![
            ClaimRequest {
                name: "a".into(),
                alternatives: vec![alt()],
            },
            ClaimRequest {
                name: "b".into(),
                alternatives: vec![alt()],
            },
        ],
        constraints: vec![Constraint {
            requests: vec![0, 1],
            distinct: false,
            attribute: "resource.kubernetes.io/pcieRoot".into(),
            values: (0..4)
                .map(|g| AttributeValue {
                    device: GpuRef { node: 0, gpu: g },
                    value: g / 2,
                })
                .collect(),
        }],
    }]);
    snap.pending.push(r);
    snap.candidate_sets = vec![(0..4).map(|gpu| GpuRef { node: 0, gpu }).collect()];
    snap
}

fn choose(gpus: [u32; 2]) -> Decision {
    Decision::Assign(Assignment {
        pod: 0,
        node: 0,
        gpus: vec![],
        claims: (0..2)
            .map(|r| ClaimChoice {
                claim: 0,
                request: r,
                alternative: 0,
                gpus: vec![gpus[r as usize]],
            })
            .collect(),
    })
}

#[test]
fn dra_choices_are_candidates_within_the_claims_constraints() {
    let snap = dra();
    let verdict = validate(&snap, &[choose([0, 1])]);
    assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
    assert_eq!(verdict.accepted[0].gpus, ["GPU-n-0", "GPU-n-1"]);
    assert_eq!(
        code(&validate(&snap, &[choose([0, 2])])),
        ["constraint-broken"]
    );
    assert_eq!(code(&validate(&snap, &[choose([1, 1])])), ["duplicate-gpu"]);
    let mut narrow = dra();
    narrow.candidate_sets[0].truncate(2);
    assert_eq!(
        code(&validate(&narrow, &[choose([2, 3])])),
        ["not-candidate"]
    );
    assert_eq!(
        code(&validate(&snap, &[assign(0, 0, vec![0])])),
        ["wrong-choice"]
    );
}

#[test]
fn reclaim_never_takes_a_tenant_below_its_quota_over_the_round() {
    let mut snap = full();
    tenants(&mut snap);
    snap.tenants[1].quota = 8;
    snap.tenants[1].limit = None;
    snap.pending[0].priority = 0;
    // Alone: a, holding 8 of quota 4, may lose 4.
    let four = preempt(0, 0, vec![0, 1, 2, 3], vec![0, 1, 2, 3]);
    assert!(
        validate(&snap, std::slice::from_ref(&four))
            .refused
            .is_empty()
    );
    // Not with a quota of 5: it would hold 4.
    snap.tenants[0].quota = 5;
    assert_eq!(code(&validate(&snap, &[four])), ["victim-not-lower"]);
    // Two decisions of 2: the first leaves a at 6, the second would leave 4.
    let mut second = snap.pending[0].clone();
    second.pod = "ml/urgent-2".into();
    if let Ask::Gpus(shape) = &mut second.ask {
        shape.count = 2;
    }
    if let Ask::Gpus(shape) = &mut snap.pending[0].ask {
        shape.count = 2;
    }
    snap.pending.push(second);
    let verdict = validate(
        &snap,
        &[
            preempt(0, 0, vec![0, 1], vec![0, 1]),
            preempt(1, 0, vec![2, 3], vec![2, 3]),
        ],
    );
    assert_eq!(verdict.preempting.len(), 1, "{:?}", verdict.refused);
    assert_eq!(code(&verdict), ["victim-not-lower"]);
}
