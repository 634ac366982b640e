//! Gangs in the index: what the snapshot says of each, and what the
//! validator then does with a round's assignments for it.

use wasmgpu_api::Sharing;
use wasmgpu_contract::types::{Assignment, Decision, Gang};
use wasmgpu_contract::validate::validate;

use super::*;
use crate::problem::Problem;

/// Node `n` of 8 GPUs, GPUResource ml/r of one GPU (policy `policy`), and
/// gang ml/train of `min_member`.
fn cluster(min_member: i32) -> Index {
    let mut index = index();
    add_gpu_node(&mut index, "n", 8);
    index.apply_gpuresource(&gpuresource("ml", "r").count(1).build());
    index.apply_gpuresource(&gpuresource("ml", "s").count(1).policy("spread").build());
    index.apply_podgroup(&podgroup("ml", "train", min_member, None));
    index
}

fn member(name: &str) -> TestPod {
    pod("ml", name).resource("r").gang("train")
}

fn gang_of<'s>(snapshot: &'s wasmgpu_contract::types::Snapshot, name: &str) -> &'s Gang {
    snapshot
        .gangs
        .iter()
        .find(|g| g.name == name)
        .unwrap_or_else(|| panic!("no gang {name} in {:?}", snapshot.gangs))
}

/// An assignment of each pending member to its own GPU of node 0.
fn each_on_its_gpu(snapshot: &wasmgpu_contract::types::Snapshot) -> Vec<Decision> {
    (0..snapshot.pending.len() as u32)
        .map(|pod| {
            Decision::Assign(Assignment {
                pod,
                node: 0,
                gpus: vec![pod],
                claims: Vec::new(),
            })
        })
        .collect()
}

#[test]
fn a_gang_that_reaches_min_member_is_placed_whole_and_one_that_does_not_waits() {
    let mut index = cluster(3);
    for name in ["a", "b", "c"] {
        index.apply_pod(&member(name).build());
    }
    let snapshot = default_snapshot(&index);
    let gang = gang_of(&snapshot, "ml/train");
    assert_eq!((gang.min_member, gang.bound, gang.pending.len()), (3, 0, 3));
    assert!(snapshot.pending.iter().all(|r| r.gang == Some(0)));
    let verdict = validate(&snapshot, &each_on_its_gpu(&snapshot));
    assert_eq!(verdict.accepted.len(), 3);

    // Two of three: held back whole, each member told why and that it
    // belongs to the gang.
    let mut index = cluster(3);
    for name in ["a", "b"] {
        index.apply_pod(&member(name).build());
    }
    let snapshot = default_snapshot(&index);
    let verdict = validate(&snapshot, &each_on_its_gpu(&snapshot));
    assert!(verdict.accepted.is_empty());
    assert_eq!(verdict.held_back, [0, 1]);
    assert!(
        verdict
            .waiting
            .iter()
            .all(|w| w.gang.as_deref() == Some("ml/train") && w.reason.contains("3 needed")),
        "{:?}",
        verdict.waiting
    );
}

#[test]
fn members_bound_earlier_count_toward_min_member() {
    let mut index = cluster(3);
    index.apply_pod(
        &member("a")
            .holds("n", &["GPU-n-0"], Sharing::Exclusive, 0)
            .build(),
    );
    index.apply_pod(&member("b").build());
    index.apply_pod(&member("c").build());
    let snapshot = default_snapshot(&index);
    let gang = gang_of(&snapshot, "ml/train");
    assert_eq!((gang.bound, gang.pending.len()), (1, 2));
    // The two waiting members on free GPUs (1 and 2) reach three with the
    // bound one.
    let decisions: Vec<Decision> = (0..2u32)
        .map(|pod| {
            Decision::Assign(Assignment {
                pod,
                node: 0,
                gpus: vec![pod + 1],
                claims: Vec::new(),
            })
        })
        .collect();
    assert_eq!(validate(&snapshot, &decisions).accepted.len(), 2);
}

#[test]
fn a_member_deleted_between_rounds_leaves_the_gang_short() {
    let mut index = cluster(3);
    for name in ["a", "b", "c"] {
        index.apply_pod(&member(name).build());
    }
    assert_eq!(
        gang_of(&default_snapshot(&index), "ml/train").pending.len(),
        3
    );
    index.delete_pod("ml", "b");
    let snapshot = default_snapshot(&index);
    let gang = gang_of(&snapshot, "ml/train");
    assert_eq!((gang.bound, gang.pending.len()), (0, 2));
    let verdict = validate(&snapshot, &each_on_its_gpu(&snapshot));
    assert!(verdict.accepted.is_empty(), "{:?}", verdict.accepted);
}

#[test]
fn a_gang_across_two_policies_shows_each_its_own_members_and_counts_every_bound_one() {
    let mut index = cluster(3);
    index.apply_pod(&member("a").build());
    index.apply_pod(&pod("ml", "s1").resource("s").gang("train").build());
    index.apply_pod(
        &pod("ml", "s0")
            .resource("s")
            .gang("train")
            .holds("n", &["GPU-n-0"], Sharing::Exclusive, 0)
            .build(),
    );
    let binpack = index.snapshot("binpack", 1, 0).snapshot;
    let spread = index.snapshot("spread", 1, 0).snapshot;
    let pods = |s: &wasmgpu_contract::types::Snapshot| -> Vec<String> {
        s.pending.iter().map(|r| r.pod.clone()).collect()
    };
    assert_eq!(pods(&binpack), ["ml/a"]);
    assert_eq!(pods(&spread), ["ml/s1"]);
    // Bound members count whatever policy placed them.
    assert_eq!(gang_of(&binpack, "ml/train").bound, 1);
    assert_eq!(gang_of(&spread, "ml/train").bound, 1);
}

#[test]
fn a_pod_of_a_missing_podgroup_is_no_gang_member_and_says_so() {
    let mut index = cluster(2);
    index.apply_pod(&pod("ml", "x").resource("r").gang("nope").build());
    let snapshot = default_snapshot(&index);
    assert!(snapshot.gangs.is_empty(), "{:?}", snapshot.gangs);
    assert!(
        index
            .problems()
            .iter()
            .any(|p| matches!(p, Problem::MissingPodGroup { .. })),
        "{:?}",
        index.problems()
    );
}
