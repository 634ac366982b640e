//! Ledgers of earlier versions (`status.allocations`): what their entries
//! hold, which are stale, and which move onto their pods.

use super::*;
use crate::PodCounts;
use crate::holdings::{Release, ReleaseReason};
use crate::key::ObjectKey;

fn gpu<'a>(
    snapshot: &'a wasmgpu_contract::HostSnapshot,
    uuid: &str,
) -> &'a wasmgpu_contract::types::Gpu {
    gpu_by_uuid(snapshot, uuid)
}

/// `(pod, GPUs held, shared MiB)` of each running pod, in order.
fn running(snapshot: &wasmgpu_contract::HostSnapshot) -> Vec<(String, usize, u64)> {
    snapshot
        .snapshot
        .running
        .iter()
        .map(|r| (r.pod.clone(), r.gpus.len(), r.shared_mib))
        .collect()
}

/// One node `n` with 4 GPUs, pod `ml/p1` bound there.
fn cluster() -> Index {
    let mut index = index();
    add_gpu_node(&mut index, "n", 4);
    index.apply_pod(&pod("ml", "p1").resource("r").bound("n").build());
    index
}

#[test]
fn an_exclusive_hold_takes_the_whole_gpu() {
    let mut index = cluster();
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .count(2)
            .holds("p1", "n", &["GPU-n-0", "GPU-n-1"], H100_MIB)
            .build(),
    );
    let snapshot = default_host(&index);
    for uuid in ["GPU-n-0", "GPU-n-1"] {
        let held = gpu(&snapshot, uuid);
        assert!(held.held);
        assert_eq!(held.allocated_mib, H100_MIB);
        assert_eq!(held.shared_owners, 0);
    }
    let free = gpu(&snapshot, "GPU-n-2");
    assert_eq!((free.held, free.allocated_mib), (false, 0));
    assert_eq!(running(&snapshot), [("ml/p1".to_owned(), 2, 0)]);
}

#[test]
fn shared_holds_add_up_their_memory() {
    let mut index = cluster();
    index.apply_pod(&pod("ml", "p2").resource("r").bound("n").build());
    index.apply_pod(&pod("lab", "q").resource("nb").bound("n").build());
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .shared(8192)
            .holds("p1", "n", &["GPU-n-0"], 8192)
            .holds("p2", "n", &["GPU-n-0"], 8192)
            .build(),
    );
    index.apply_gpuresource(
        &gpuresource("lab", "nb")
            .shared(4096)
            .holds("q", "n", &["GPU-n-0"], 4096)
            .build(),
    );
    let snapshot = default_host(&index);
    let shared = gpu(&snapshot, "GPU-n-0");
    assert_eq!(shared.allocated_mib, 8192 * 2 + 4096);
    assert_eq!(shared.shared_owners, 3);
    assert!(!shared.held);
    assert_eq!(
        running(&snapshot),
        [
            ("lab/q".to_owned(), 1, 4096),
            ("ml/p1".to_owned(), 1, 8192),
            ("ml/p2".to_owned(), 1, 8192)
        ],
        "by node, then pod"
    );
}

#[test]
fn entries_of_deleted_finished_or_recreated_pods_are_released_and_free() {
    let mut index = index();
    add_gpu_node(&mut index, "n", 4);
    index.apply_pod(
        &pod("ml", "done")
            .resource("r")
            .bound("n")
            .phase("Succeeded")
            .build(),
    );
    index.apply_pod(
        &pod("ml", "crashed")
            .resource("r")
            .bound("n")
            .phase("Failed")
            .build(),
    );
    index.apply_pod(&pod("ml", "again").resource("r").uid("uid-new").build());
    index.apply_pod(
        &pod("ml", "running")
            .resource("r")
            .bound("n")
            .phase("Running")
            .build(),
    );
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .holds("done", "n", &["GPU-n-0"], H100_MIB)
            .holds("crashed", "n", &["GPU-n-1"], H100_MIB)
            .holds("again", "n", &["GPU-n-2"], H100_MIB)
            .holds("gone", "n", &["GPU-n-3"], H100_MIB)
            .holds("running", "n", &["GPU-n-3"], H100_MIB)
            .build(),
    );

    let released: Vec<_> = index
        .releases()
        .into_iter()
        .map(|r| (r.pod, r.reason))
        .collect();
    assert_eq!(
        released,
        [
            ("done".to_string(), ReleaseReason::PodFinished),
            ("crashed".to_string(), ReleaseReason::PodFinished),
            ("again".to_string(), ReleaseReason::PodReplaced),
            ("gone".to_string(), ReleaseReason::PodDeleted),
        ]
    );
    let snapshot = default_host(&index);
    for uuid in ["GPU-n-0", "GPU-n-1", "GPU-n-2"] {
        assert!(!gpu(&snapshot, uuid).held, "{uuid}");
    }
    assert!(gpu(&snapshot, "GPU-n-3").held);
    assert_eq!(running(&snapshot).len(), 1);
    // The recreated pod is a different pod: it waits for GPUs of its own.
    assert_eq!(snapshot.snapshot.pending.len(), 1);
    assert_eq!(snapshot.snapshot.pending[0].pod, "ml/again");
}

#[test]
fn a_release_names_its_resource_and_uid() {
    let mut index = index();
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .holds("gone", "n", &["GPU-n-0"], 1)
            .build(),
    );
    assert_eq!(
        index.releases(),
        [Release {
            resource: ObjectKey::new("ml", "r"),
            pod: "gone".into(),
            pod_uid: "uid-gone".into(),
            reason: ReleaseReason::PodDeleted,
        }]
    );
}

#[test]
fn deleting_a_pod_releases_its_entry() {
    let mut index = cluster();
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .holds("p1", "n", &["GPU-n-0"], H100_MIB)
            .build(),
    );
    assert!(index.releases().is_empty());
    index.delete_pod("ml", "p1");
    assert_eq!(index.releases()[0].reason, ReleaseReason::PodDeleted);
}

#[test]
fn before_pods_are_listed_every_entry_holds_and_none_is_released() {
    let mut index = Index::new(DEFAULT_POLICY);
    add_gpu_node(&mut index, "n", 1);
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .holds("unseen", "n", &["GPU-n-0"], H100_MIB)
            .build(),
    );
    assert!(index.releases().is_empty());
    let snapshot = default_host(&index);
    assert!(gpu(&snapshot, "GPU-n-0").held);
    index.reset_pods(&[]);
    assert_eq!(index.releases().len(), 1);
}

#[test]
fn a_pod_holding_gpus_but_not_bound_is_not_pending_but_to_be_bound() {
    let mut index = index();
    add_gpu_node(&mut index, "n", 2);
    index.apply_pod(&pod("ml", "p1").resource("r").build());
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .holds("p1", "n", &["GPU-n-0"], H100_MIB)
            .build(),
    );
    assert!(default_snapshot(&index).pending.is_empty());
    let unbound = index.bindings_to_finish();
    assert_eq!(unbound.len(), 1);
    assert_eq!(unbound[0].pod, ObjectKey::new("ml", "p1"));
    assert_eq!(unbound[0].uid, "uid-p1");
    assert_eq!(unbound[0].allocation.node, "n");
    assert_eq!(unbound[0].allocation.resource, "r");
    // Bound pods are moved, not bound again.
    assert!(index.allocations_to_move().is_empty());
}

#[test]
fn a_bound_holder_moves_onto_its_pod_then_its_entry_goes() {
    let mut index = cluster();
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .holds("p1", "n", &["GPU-n-0"], H100_MIB)
            .build(),
    );
    let moves = index.allocations_to_move();
    assert_eq!(moves.len(), 1);
    assert_eq!(moves[0].pod, ObjectKey::new("ml", "p1"));
    assert_eq!(moves[0].allocation.devices[0].uuid, "GPU-n-0");
    assert!(index.releases().is_empty(), "kept until the pod carries it");
    assert!(index.bindings_to_finish().is_empty());
    // The pod now carries the same allocation: the entry goes, the GPU
    // stays held, once.
    index.apply_pod(
        &pod("ml", "p1")
            .resource("r")
            .holds("n", &["GPU-n-0"], Sharing::Exclusive, H100_MIB)
            .build(),
    );
    assert!(index.allocations_to_move().is_empty());
    let released: Vec<_> = index.releases().into_iter().map(|r| r.reason).collect();
    assert_eq!(released, [ReleaseReason::Moved]);
    let snapshot = default_host(&index);
    assert!(gpu(&snapshot, "GPU-n-0").held);
    assert_eq!(
        running(&snapshot),
        [("ml/p1".to_owned(), 1, 0)],
        "counted once"
    );
}

#[test]
fn entries_on_unknown_gpus_change_nothing() {
    let mut index = cluster();
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .holds("p1", "elsewhere", &["GPU-n-0"], H100_MIB)
            .build(),
    );
    assert!(!gpu(&default_host(&index), "GPU-n-0").held);
}

#[test]
fn pod_counts_for_status() {
    let mut index = cluster();
    index.apply_pod(&pod("ml", "p2").resource("r").build());
    index.apply_pod(&pod("ml", "old").resource("r").phase("Succeeded").build());
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .holds("p1", "n", &["GPU-n-0"], H100_MIB)
            .build(),
    );
    assert_eq!(
        index.pod_counts()[&ObjectKey::new("ml", "r")],
        PodCounts {
            holding: 1,
            referencing: 2
        }
    );
}

#[test]
fn a_written_ledger_survives_older_versions_from_the_watch() {
    let mut index = cluster();
    let before = gpuresource("ml", "r").version("5").build();
    index.apply_gpuresource(&before);
    let written = gpuresource("ml", "r")
        .holds("p1", "n", &["GPU-n-0"], H100_MIB)
        .version("7")
        .build();
    index.record_write(&written);
    let held = |index: &Index| {
        assert_eq!(
            gpu(&default_host(index), "GPU-n-0").held,
            holder(index, "GPU-n-0").is_some()
        );
        holder(index, "GPU-n-0")
    };
    assert_eq!(held(&index).as_deref(), Some("ml/p1"));
    // The watch still delivers versions from before the write: ignored.
    index.apply_gpuresource(&gpuresource("ml", "r").version("6").build());
    assert_eq!(held(&index).as_deref(), Some("ml/p1"));
    // The write's own version arrives; from then on the watch is followed.
    index.apply_gpuresource(&written);
    index.apply_gpuresource(&gpuresource("ml", "r").version("8").build());
    assert_eq!(held(&index), None);
}

#[test]
fn a_newer_version_ends_the_wait_for_a_written_version() {
    // A write that changed nothing returns a version the watch delivered
    // before and never delivers again: the next, newer version (e.g. the
    // deletion) must still be followed.
    let mut index = cluster();
    index.record_write(
        &gpuresource("ml", "r")
            .holds("p1", "n", &["GPU-n-0"], H100_MIB)
            .version("7")
            .build(),
    );
    index.apply_gpuresource(&gpuresource("ml", "r").version("10").build());
    assert!(!gpu(&default_host(&index), "GPU-n-0").held);
}

#[test]
fn a_relist_ends_the_wait_for_a_written_version() {
    let mut index = cluster();
    index.record_write(
        &gpuresource("ml", "r")
            .holds("p1", "n", &["GPU-n-0"], H100_MIB)
            .version("7")
            .build(),
    );
    index.reset_gpuresources(&[gpuresource("ml", "r").version("9").build()]);
    assert!(!gpu(&default_host(&index), "GPU-n-0").held);
}

#[test]
fn a_gpuresource_being_deleted_takes_no_new_pods_but_its_ledger_holds() {
    let mut index = cluster();
    index.apply_pod(&pod("ml", "p2").resource("r").build());
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .holds("p1", "n", &["GPU-n-0"], H100_MIB)
            .deleting()
            .build(),
    );
    let snapshot = default_host(&index);
    assert!(snapshot.snapshot.pending.is_empty());
    assert!(gpu(&snapshot, "GPU-n-0").held);
    let views = index.resources();
    assert_eq!(views.len(), 1);
    assert!(views[0].deleting);
    assert_eq!(views[0].allocations.len(), 1);
    assert_eq!(views[0].policy, DEFAULT_POLICY);
}

#[test]
fn gpu_states_count_held_free_and_unhealthy_gpus() {
    let mut index = cluster();
    index.apply_gpunode(&gpunode("n").with_gpus(4).unhealthy(3).build());
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .holds("p1", "n", &["GPU-n-0"], H100_MIB)
            .build(),
    );
    let states: Vec<(&str, u32)> = index
        .gpu_states()
        .iter()
        .map(|s| (s.state, s.count))
        .collect();
    assert_eq!(states, [("free", 2), ("allocated", 1), ("unhealthy", 1)]);
}

#[test]
fn a_gpu_whose_mig_instance_is_held_counts_as_allocated() {
    let mut index = index();
    index.apply_node(&node("n").build());
    index.apply_gpunode(
        &gpunode("n")
            .with_gpus(2)
            .mig(0, &[("3g.40gb", 40_192), ("3g.40gb", 40_192)])
            .build(),
    );
    index.apply_pod(
        &pod("ml", "m")
            .resource("r")
            .holds("n", &["MIG-n-0-1"], Sharing::Exclusive, 40_192)
            .build(),
    );
    let states: Vec<(&str, u32)> = index
        .gpu_states()
        .iter()
        .map(|s| (s.state, s.count))
        .collect();
    assert_eq!(states, [("free", 1), ("allocated", 1)]);
}
