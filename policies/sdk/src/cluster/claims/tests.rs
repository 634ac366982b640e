//! DRA placement, each round held to the host's validator.

use crate::placement::place_each;
use crate::testing::{
    candidate_set, claim, dra_request, node, request, restrict, snapshot, validate, with_mig,
};
use crate::{Cluster, Fit};
use wasmgpu_contract::{
    Alternative, AttributeValue, Claim, ClaimChoice, Constraint, Decision, GpuRef, Publisher,
    Request, Sharing, Snapshot, Tenant,
};

/// Decides the round with `place_each` and holds it to the host's rules.
fn decide(snap: &Snapshot, fit: Fit) -> Vec<Decision> {
    let decisions = place_each(snap, fit);
    let verdict = validate(snap, &decisions);
    assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
    assert_eq!(decisions.len(), snap.pending.len(), "{decisions:?}");
    decisions
}

/// The decision about pod `pod`.
fn of<'d>(snap: &Snapshot, decisions: &'d [Decision], pod: &str) -> &'d Decision {
    crate::testing::decision_for(snap, decisions, pod).expect("decided")
}

/// `(node, choices)` of an assignment.
fn choices(decision: &Decision) -> (u32, &[ClaimChoice]) {
    match decision {
        Decision::Assign(a) => {
            assert!(a.gpus.is_empty(), "a DRA assignment names no GPUs");
            (a.node, &a.claims)
        }
        other => panic!("not assigned: {other:?}"),
    }
}

fn reason(decision: &Decision) -> &str {
    match decision {
        Decision::Wait(d) | Decision::Reject(d) => &d.reason,
        other => panic!("placed: {other:?}"),
    }
}

/// Every GPU of `nodes` (positions `0..gpus` each) as one candidate set.
fn all_gpus(snap: &mut Snapshot, nodes: &[(u32, u32)]) -> u32 {
    let gpus = nodes
        .iter()
        .flat_map(|&(n, count)| (0..count).map(move |g| (n, g)));
    candidate_set(snap, gpus)
}

fn one_claim(pod: &str, requests: &[(&str, u32, u32)]) -> Request {
    dra_request(pod, vec![claim(pod, requests)])
}

fn h100(name: &str, gpus: u32) -> wasmgpu_contract::Node {
    node(name, gpus, "NVIDIA H100", 81920)
}

#[test]
fn two_of_eight_candidates_go_to_one_node_the_fullest_for_binpack() {
    let mut busy = h100("busy", 8);
    for gpu in &mut busy.gpus[..4] {
        gpu.held = true;
    }
    let mut snap = snapshot(vec![h100("idle", 8), busy], vec![]);
    let set = all_gpus(&mut snap, &[(0, 8), (1, 8)]);
    snap.pending
        .push(one_claim("ml/train", &[("gpus", 2, set)]));
    let packed = decide(&snap, Fit::Tightest);
    let (node, chosen) = choices(&packed[0]);
    assert_eq!(node, 1, "binpack fills the fuller node");
    assert_eq!(chosen.len(), 1);
    assert_eq!(
        (chosen[0].claim, chosen[0].request, chosen[0].alternative),
        (0, 0, 0)
    );
    assert_eq!(chosen[0].gpus, [4, 5], "the first free candidates");
    let spread = decide(&snap, Fit::Loosest);
    let (node, chosen) = choices(&spread[0]);
    assert_eq!((node, chosen[0].gpus.as_slice()), (0, &[0, 1][..]));
}

#[test]
fn dra_pods_of_one_round_never_share_a_device() {
    let mut snap = snapshot(vec![h100("a", 4)], vec![]);
    let set = all_gpus(&mut snap, &[(0, 4)]);
    for pod in ["ml/p0", "ml/p1", "ml/p2"] {
        snap.pending.push(one_claim(pod, &[("gpus", 2, set)]));
    }
    let decisions = decide(&snap, Fit::Tightest);
    assert_eq!(choices(&decisions[0]).1[0].gpus, [0, 1]);
    assert_eq!(choices(&decisions[1]).1[0].gpus, [2, 3]);
    assert_eq!(
        reason(&decisions[2]),
        "no eligible node has 2 device(s) for claim ml/p2 request \"gpus\" (4 candidate(s) on eligible nodes) free right now; at most 0 free on any eligible node"
    );
    assert!(matches!(decisions[2], Decision::Wait(_)));
}

#[test]
fn first_available_takes_the_first_alternative_that_can_be_satisfied() {
    let mut n = h100("a", 4);
    n.gpus[0].held = true;
    n.gpus[1].held = true;
    let mut snap = snapshot(vec![n], vec![]);
    let first = candidate_set(&mut snap, [(0, 0), (0, 1)]);
    let second = candidate_set(&mut snap, [(0, 2), (0, 3)]);
    let mut wants = claim("ml/c", &[("gpu", 1, first)]);
    wants.requests[0].alternatives.push(Alternative {
        subrequest: Some("fallback".into()),
        count: 2,
        candidates: second,
    });
    wants.requests[0].alternatives[0].subrequest = Some("preferred".into());
    snap.pending.push(dra_request("ml/p", vec![wants]));
    let decisions = decide(&snap, Fit::Tightest);
    let chosen = choices(&decisions[0]).1;
    assert_eq!(
        (chosen[0].alternative, chosen[0].gpus.as_slice()),
        (1, &[2, 3][..])
    );
    // With its candidates free, the first alternative wins.
    let mut idle = snap.clone();
    idle.nodes[0].gpus[0].held = false;
    let decisions = decide(&idle, Fit::Tightest);
    let chosen = choices(&decisions[0]).1;
    assert_eq!(
        (chosen[0].alternative, chosen[0].gpus.as_slice()),
        (0, &[0][..])
    );
}

/// A constraint over `requests` with `values[g]` for GPU `g` of node 0.
fn constraint(requests: &[u32], distinct: bool, values: &[Option<u32>]) -> Constraint {
    Constraint {
        requests: requests.to_vec(),
        distinct,
        attribute: "resource.kubernetes.io/pcieRoot".into(),
        values: values
            .iter()
            .enumerate()
            .filter_map(|(g, v)| {
                v.map(|value| AttributeValue {
                    device: GpuRef {
                        node: 0,
                        gpu: g as u32,
                    },
                    value,
                })
            })
            .collect(),
    }
}

/// One node of `values.len()` GPUs, every one a candidate of both requests
/// of claim `ml/c` (2 and 1 devices), bound by `constraint`.
fn constrained(distinct: bool, values: &[Option<u32>], counts: (u32, u32)) -> Snapshot {
    let gpus = values.len() as u32;
    let mut snap = snapshot(vec![h100("a", gpus)], vec![]);
    let set = all_gpus(&mut snap, &[(0, gpus)]);
    let mut c = claim("ml/c", &[("a", counts.0, set), ("b", counts.1, set)]);
    c.constraints.push(constraint(&[], distinct, values));
    snap.pending.push(dra_request("ml/p", vec![c]));
    snap
}

#[test]
fn match_attribute_tries_each_value_where_taking_the_first_devices_would_break_it() {
    // Values 0,1,1,2,1: the first three devices (0, 1, 1) break the match;
    // value 0 has one device, value 1 has three.
    let snap = constrained(
        false,
        &[Some(0), Some(1), Some(1), Some(2), Some(1)],
        (2, 1),
    );
    let decisions = decide(&snap, Fit::Tightest);
    let chosen = choices(&decisions[0]).1;
    assert_eq!(chosen[0].gpus, [1, 2]);
    assert_eq!(chosen[1].gpus, [4]);
    // Bound by position, across the two requests only.
    let mut snap = snap.clone();
    if let wasmgpu_contract::Ask::Claims(claims) = &mut snap.pending[0].ask {
        claims[0].constraints[0].requests = vec![0, 1];
    }
    assert_eq!(choices(&decide(&snap, Fit::Tightest)[0]).1[1].gpus, [4]);
    // Values 0,0,1,1: no value has three devices, ever.
    let never = constrained(false, &[Some(0), Some(0), Some(1), Some(1)], (2, 1));
    let decisions = decide(&never, Fit::Tightest);
    assert!(matches!(decisions[0], Decision::Reject(_)), "{decisions:?}");
    assert_eq!(
        reason(&decisions[0]),
        "no eligible node has 3 device(s) for claim ml/c within the claims' constraints, even when idle"
    );
}

#[test]
fn distinct_attribute_takes_devices_of_values_not_yet_used() {
    // GPU 0 has no value: it cannot be chosen for a bound request.
    let snap = constrained(true, &[None, Some(0), Some(0), Some(1), Some(2)], (2, 1));
    let decisions = decide(&snap, Fit::Tightest);
    let chosen = choices(&decisions[0]).1;
    assert_eq!(chosen[0].gpus, [1, 3]);
    assert_eq!(chosen[1].gpus, [4]);
    // Two values among four devices: three distinct ones never fit.
    let never = constrained(true, &[Some(0), Some(0), Some(1), Some(1)], (2, 1));
    assert!(matches!(
        decide(&never, Fit::Tightest)[0],
        Decision::Reject(_)
    ));
}

#[test]
fn a_request_asking_more_than_its_candidates_is_rejected_and_one_whose_candidates_are_held_waits() {
    let mut snap = snapshot(vec![h100("a", 4)], vec![]);
    let two = candidate_set(&mut snap, [(0, 0), (0, 1)]);
    snap.pending
        .push(one_claim("ml/train", &[("gpus", 3, two)]));
    let decisions = decide(&snap, Fit::Tightest);
    assert!(matches!(decisions[0], Decision::Reject(_)));
    assert_eq!(
        reason(&decisions[0]),
        "no eligible node has 3 device(s) for claim ml/train request \"gpus\" (2 candidate(s) on eligible nodes), even when idle"
    );
    // An empty candidate set can never be served either.
    let mut empty = snap.clone();
    empty.candidate_sets[0].clear();
    assert!(matches!(
        decide(&empty, Fit::Tightest)[0],
        Decision::Reject(_)
    ));
    // Its two candidates held: it waits.
    let mut held = snap.clone();
    if let wasmgpu_contract::Ask::Claims(claims) = &mut held.pending[0].ask {
        claims[0].requests[0].alternatives[0].count = 2;
    }
    held.nodes[0].gpus[1].held = true;
    held.pending[0].preemption = wasmgpu_contract::PreemptionPolicy::Never;
    let decisions = decide(&held, Fit::Tightest);
    assert!(matches!(decisions[0], Decision::Wait(_)));
    assert_eq!(
        reason(&decisions[0]),
        "no eligible node has 2 device(s) for claim ml/train request \"gpus\" (2 candidate(s) on eligible nodes) free right now; at most 1 free on any eligible node"
    );
    let cluster = Cluster::new(&held);
    let want = cluster.want(&held.pending[0]);
    assert!(!cluster.claims_shortfall(&want).is_permanent());
    assert!(
        !cluster.shortfall(&want).is_permanent(),
        "shortfall delegates"
    );
}

#[test]
fn a_pod_whose_claims_are_allocated_goes_to_its_eligible_node_without_devices() {
    let mut snap = snapshot(vec![h100("a", 2), h100("b", 2)], vec![]);
    snap.pending.push(dra_request("ml/ready", Vec::new()));
    restrict(&mut snap, 0, &[1]);
    let decisions = decide(&snap, Fit::Tightest);
    let (node, chosen) = choices(&decisions[0]);
    assert_eq!(node, 1);
    assert!(chosen.is_empty());
    assert_eq!(validate(&snap, &decisions).accepted.len(), 1);
    // No eligible node at all.
    restrict(&mut snap, 0, &[]);
    let decisions = decide(&snap, Fit::Tightest);
    assert!(matches!(decisions[0], Decision::Reject(_)));
    assert_eq!(reason(&decisions[0]), crate::reason::no_eligible_node());
}

#[test]
fn dra_and_gpuresource_pods_of_one_round_share_no_gpu_in_priority_order() {
    let mut snap = snapshot(
        vec![h100("a", 4)],
        vec![
            request("ml/old", 2, Sharing::Exclusive, 0),
            request("ml/late", 1, Sharing::Exclusive, 0),
        ],
    );
    let set = all_gpus(&mut snap, &[(0, 4)]);
    let mut dra = one_claim("ml/dra", &[("gpus", 3, set)]);
    dra.priority = 10;
    snap.pending.push(dra);
    snap.pending[1].created_ms = 5;
    let decisions = decide(&snap, Fit::Tightest);
    // The DRA pod goes first (priority), then the older GPU pod waits.
    assert_eq!(decisions[0].pod(), 2);
    assert_eq!(choices(&decisions[0]).1[0].gpus, [0, 1, 2]);
    assert!(matches!(of(&snap, &decisions, "ml/old"), Decision::Wait(_)));
    assert!(matches!(
        of(&snap, &decisions, "ml/late"),
        Decision::Assign(a) if a.gpus == [3]
    ));
}

#[test]
fn mig_instances_exclude_their_parent_within_a_pod_and_across_the_round() {
    // Positions: 0 = GPU 0, 1 and 2 its instances, 3 = GPU 1.
    let n = with_mig(
        node("a", 2, "NVIDIA A100", 81920),
        0,
        &[("1g.10gb", 9856), ("1g.10gb", 9856)],
    );
    let mut snap = snapshot(vec![n], vec![request("ml/whole", 2, Sharing::Exclusive, 0)]);
    let mig = candidate_set(&mut snap, [(0, 1), (0, 2)]);
    let mut dra = one_claim("ml/mig", &[("slice", 1, mig)]);
    dra.priority = 1;
    snap.pending.push(dra);
    let decisions = decide(&snap, Fit::Tightest);
    assert_eq!(choices(&decisions[0]).1[0].gpus, [1]);
    assert!(
        matches!(&decisions[1], Decision::Wait(_)),
        "GPU 0 has an instance held now: {decisions:?}"
    );
    // A whole GPU and its instance never go to one pod.
    let mut snap = snapshot(vec![snap.nodes[0].clone()], vec![]);
    let both = candidate_set(&mut snap, [(0, 0), (0, 1)]);
    snap.pending
        .push(one_claim("ml/both", &[("gpus", 2, both)]));
    let decisions = decide(&snap, Fit::Tightest);
    assert_eq!(
        reason(&decisions[0]),
        "no eligible node has 2 device(s) for claim ml/both, even when idle"
    );
}

#[test]
fn devices_only_a_dra_driver_publishes_go_to_dra_pods_only() {
    let mut n = h100("a", 2);
    for gpu in &mut n.gpus {
        gpu.published_by = Publisher::DraDriver;
    }
    let mut snap = snapshot(vec![n], vec![request("ml/gpu", 1, Sharing::Exclusive, 0)]);
    let set = all_gpus(&mut snap, &[(0, 2)]);
    snap.pending.push(one_claim("ml/dra", &[("gpus", 2, set)]));
    let decisions = decide(&snap, Fit::Tightest);
    assert!(matches!(
        of(&snap, &decisions, "ml/gpu"),
        Decision::Reject(_)
    ));
    assert_eq!(choices(of(&snap, &decisions, "ml/dra")).1[0].gpus, [0, 1]);
}

#[test]
fn the_tenant_limit_counts_dra_devices() {
    let mut snap = snapshot(vec![h100("a", 8)], vec![]);
    let set = all_gpus(&mut snap, &[(0, 8)]);
    snap.pending.push(one_claim("ml/p0", &[("gpus", 2, set)]));
    snap.pending
        .push(one_claim("ml/p1", &[("gpus", 1, set), ("more", 1, set)]));
    snap.pending
        .push(request("ml/p2", 1, Sharing::Exclusive, 0));
    for (i, r) in snap.pending.iter_mut().enumerate() {
        r.created_ms = i as u64;
        r.tenant = Some(0);
    }
    snap.tenants = vec![Tenant {
        name: "ml".into(),
        weight: 1,
        quota: 0,
        limit: Some(4),
        holding: 1,
        waiting: 5,
    }];
    let decisions = decide(&snap, Fit::Tightest);
    assert!(matches!(decisions[0], Decision::Assign(_)));
    assert_eq!(
        reason(&decisions[1]),
        "tenant ml holds 3 of its limit 4 GPUs (GPUTenant ml: spec.limit); this pod needs 2 more"
    );
    assert!(
        matches!(decisions[2], Decision::Assign(_)),
        "1 held + 2 + 1 = 4"
    );
    // place_claims checks what it picks too: a later alternative of 3.
    let mut snap = snap.clone();
    snap.pending.truncate(1);
    snap.nodes[0].gpus[0].held = true;
    let zero = candidate_set(&mut snap, [(0, 0)]);
    if let wasmgpu_contract::Ask::Claims(claims) = &mut snap.pending[0].ask {
        let alternatives = &mut claims[0].requests[0].alternatives;
        alternatives[0] = Alternative {
            subrequest: Some("one".into()),
            count: 1,
            candidates: zero,
        };
        alternatives.push(Alternative {
            subrequest: Some("four".into()),
            count: 4,
            candidates: set,
        });
    }
    let mut cluster = Cluster::new(&snap);
    let want = cluster.want(&snap.pending[0]);
    assert!(
        cluster.over_tenant_limit(&want).is_none(),
        "1 held + 1 asked"
    );
    assert!(
        cluster.place_claims(&want, Fit::Tightest).is_none(),
        "4 would pass it"
    );
}

#[test]
fn claims_of_one_pod_take_distinct_devices_and_commit_together() {
    let mut snap = snapshot(vec![h100("a", 4), h100("b", 4)], vec![]);
    let set = all_gpus(&mut snap, &[(0, 4), (1, 4)]);
    let claims: Vec<Claim> = vec![
        claim("ml/x", &[("gpus", 2, set)]),
        claim("ml/y", &[("gpus", 1, set), ("spare", 1, set)]),
    ];
    snap.pending.push(dra_request("ml/p", claims));
    snap.pending.push(one_claim("ml/q", &[("gpus", 1, set)]));
    snap.pending[1].created_ms = 1;
    let decisions = decide(&snap, Fit::Tightest);
    let (node, chosen) = choices(&decisions[0]);
    assert_eq!(node, 0);
    let picked: Vec<(u32, u32, &[u32])> = chosen
        .iter()
        .map(|c| (c.claim, c.request, c.gpus.as_slice()))
        .collect();
    assert_eq!(
        picked,
        [(0, 0, &[0, 1][..]), (1, 0, &[2][..]), (1, 1, &[3][..])]
    );
    // The node is full: the next pod goes to the other one.
    assert_eq!(
        choices(&decisions[1]),
        (
            1,
            &[ClaimChoice {
                claim: 0,
                request: 0,
                alternative: 0,
                gpus: vec![0],
            }][..]
        )
    );
    let cluster = Cluster::new(&snap);
    let want = cluster.want(&snap.pending[0]);
    assert_eq!(
        (want.devices(), crate::reason::asked(want.request)),
        (
            4,
            "2 device(s) for claim ml/x, 2 device(s) for claim ml/y".to_owned()
        )
    );
}

#[test]
fn gang_members_asking_through_claims_are_left_to_their_gang() {
    let mut snap = snapshot(
        vec![h100("a", 4)],
        vec![request("ml/g0", 1, Sharing::Exclusive, 0)],
    );
    let set = all_gpus(&mut snap, &[(0, 4)]);
    snap.pending.push(one_claim("ml/g1", &[("gpus", 1, set)]));
    crate::testing::gang(&mut snap, "ml/gang", 1, &[0, 1]);
    let decisions = place_each(&snap, Fit::Tightest);
    assert!(validate(&snap, &decisions).refused.is_empty());
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0].pod(), 0);
}

#[test]
fn positions_out_of_range_are_skipped() {
    let mut snap = snapshot(vec![h100("a", 2)], vec![]);
    let set = candidate_set(&mut snap, [(0, 1), (0, 7), (5, 0)]);
    snap.pending
        .push(one_claim("ml/p", &[("gpus", 1, set), ("no", 1, 99)]));
    let decisions = decide(&snap, Fit::Tightest);
    assert!(matches!(decisions[0], Decision::Reject(_)), "{decisions:?}");
    snap.pending[0] = one_claim("ml/p", &[("gpus", 1, set)]);
    assert_eq!(choices(&decide(&snap, Fit::Tightest)[0]).1[0].gpus, [1]);
}

/// A large round of GPUResource pods with DRA pods of every kind among
/// them: one decision each, and the host accepts all of them.
#[test]
fn a_large_mixed_round_is_accepted_whole() {
    let mut snap = crate::testing::large(60, 200);
    let every: Vec<(u32, u32)> = (0..snap.nodes.len() as u32)
        .flat_map(|n| (0..8).map(move |g| (n, g)))
        .collect();
    let set = candidate_set(&mut snap, every.iter().copied());
    let half = candidate_set(
        &mut snap,
        every.iter().copied().filter(|&(n, _)| n % 2 == 0),
    );
    // A value per device: its half of the node's GPUs.
    let values: Vec<AttributeValue> = every
        .iter()
        .map(|&(node, gpu)| AttributeValue {
            device: GpuRef { node, gpu },
            value: gpu / 4,
        })
        .collect();
    for i in 0..120u32 {
        let mut c = claim(
            &format!("ml/c{i}"),
            &[
                ("a", 1 + i % 4, if i % 3 == 0 { half } else { set }),
                ("b", i % 2, set),
            ],
        );
        if i % 5 == 0 {
            c.requests[0].alternatives.insert(
                0,
                Alternative {
                    subrequest: Some("big".into()),
                    count: 8,
                    candidates: set,
                },
            );
        }
        if i % 4 == 1 {
            c.constraints.push(Constraint {
                requests: vec![],
                distinct: i % 8 == 1,
                attribute: "numa".into(),
                values: values.clone(),
            });
        }
        let mut r = dra_request(&format!("ml/dra{i}"), vec![c]);
        r.priority = (i % 3) as i32;
        r.created_ms = u64::from(i);
        snap.pending.push(r);
    }
    for fit in [Fit::Tightest, Fit::Loosest] {
        let decisions = decide(&snap, fit);
        let verdict = validate(&snap, &decisions);
        let dra_placed = verdict
            .accepted
            .iter()
            .filter(|p| p.pod.starts_with("ml/dra"))
            .count();
        assert!(dra_placed > 20, "{dra_placed} DRA pods placed");
        assert!(verdict.accepted.len() > dra_placed);
    }
}
