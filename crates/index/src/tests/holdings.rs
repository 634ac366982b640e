//! Holdings: pods carry their allocation; bindings in flight hold their
//! GPUs until the pod watch shows them; nothing but the pod frees a GPU.

use super::*;
use crate::PodCounts;
use crate::facts::binding::PendingBinding;
use crate::key::ObjectKey;
use wasmgpu_api::PodAllocation;

fn owner(index: &Index, uuid: &str) -> Option<String> {
    let held = gpu_by_uuid(&default_host(index), uuid).held;
    let holder = holder(index, uuid);
    assert_eq!(
        held,
        holder.is_some(),
        "the snapshot and the holdings agree on {uuid}"
    );
    holder
}

fn pending(index: &Index) -> Vec<String> {
    default_snapshot(index)
        .pending
        .into_iter()
        .map(|r| r.pod)
        .collect()
}

fn binding(pod: &str, node: &str, uuids: &[&str]) -> PendingBinding {
    PendingBinding {
        pod: ObjectKey::new("ml", pod),
        uid: format!("uid-{pod}"),
        allocation: PodAllocation {
            resource: "r".into(),
            node: node.into(),
            sharing: Sharing::Exclusive,
            devices: devices(uuids, H100_MIB),
            policy: PolicyRef {
                name: DEFAULT_POLICY.into(),
                digest: "sha256:00".into(),
            },
        },
        claims: Vec::new(),
    }
}

/// One node `n` with 2 GPUs; GPUResource `ml/r` (1 exclusive GPU); pod
/// `ml/run` bound holding `GPU-n-0`.
fn cluster() -> Index {
    let mut index = index();
    add_gpu_node(&mut index, "n", 2);
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(
        &pod("ml", "run")
            .resource("r")
            .holds("n", &["GPU-n-0"], Sharing::Exclusive, H100_MIB)
            .build(),
    );
    index
}

#[test]
fn a_bound_pod_holds_what_its_annotation_records() {
    let index = cluster();
    assert_eq!(owner(&index, "GPU-n-0").as_deref(), Some("ml/run"));
    assert_eq!(owner(&index, "GPU-n-1"), None);
    assert_eq!(
        index.pod_counts()[&ObjectKey::new("ml", "r")],
        PodCounts {
            holding: 1,
            referencing: 1
        }
    );
}

#[test]
fn shared_pods_add_up_their_shares() {
    let mut index = index();
    add_gpu_node(&mut index, "n", 1);
    for name in ["a", "b"] {
        index.apply_pod(
            &pod("ml", name)
                .resource("nb")
                .holds("n", &["GPU-n-0"], Sharing::Shared, 10_000)
                .build(),
        );
    }
    let snapshot = default_snapshot(&index);
    let gpu = &snapshot.nodes[0].gpus[0];
    assert_eq!((gpu.allocated_mib, gpu.shared_owners), (20_000, 2));
    assert!(!gpu.held);
    let shares: Vec<_> = snapshot.running.iter().map(|r| r.shared_mib).collect();
    assert_eq!(shares, [10_000, 10_000]);
}

#[test]
fn deleting_the_gpuresource_frees_nothing_its_pods_hold() {
    let mut index = cluster();
    index.delete_gpuresource("ml", "r");
    // A new pod with a new GPUResource may take only the free GPU.
    index.apply_gpuresource(&gpuresource("ml", "other").build());
    index.apply_pod(&pod("ml", "next").resource("other").build());
    assert_eq!(owner(&index, "GPU-n-0").as_deref(), Some("ml/run"));
    assert_eq!(pending(&index), ["ml/next"]);
    // The bound pod is no problem of anyone's: it holds, it does not wait.
    assert!(index.problems().is_empty(), "{:?}", index.problems());
}

#[test]
fn a_terminating_pod_holds_until_it_is_gone_or_finished() {
    let mut index = cluster();
    let terminating = pod("ml", "run")
        .resource("r")
        .holds("n", &["GPU-n-0"], Sharing::Exclusive, H100_MIB)
        .deleting();
    index.apply_pod(&terminating.build());
    assert_eq!(owner(&index, "GPU-n-0").as_deref(), Some("ml/run"));
    index.apply_pod(
        &pod("ml", "run")
            .resource("r")
            .holds("n", &["GPU-n-0"], Sharing::Exclusive, H100_MIB)
            .deleting()
            .phase("Failed")
            .build(),
    );
    assert_eq!(owner(&index, "GPU-n-0"), None);
    let mut index = cluster();
    index.delete_pod("ml", "run");
    assert_eq!(owner(&index, "GPU-n-0"), None);
}

#[test]
fn an_unreadable_allocation_holds_nothing_and_is_not_pending() {
    let mut index = index();
    add_gpu_node(&mut index, "n", 1);
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(
        &pod("ml", "odd")
            .resource("r")
            .annotation("wasmgpu.io/allocation", "{not json")
            .bound("n")
            .build(),
    );
    assert_eq!(owner(&index, "GPU-n-0"), None);
    assert!(pending(&index).is_empty());
}

#[test]
fn a_binding_in_flight_holds_its_gpus_until_the_watch_shows_the_pod() {
    let mut index = cluster();
    index.apply_pod(&pod("ml", "new").resource("r").build());
    assert_eq!(pending(&index), ["ml/new"]);
    index.begin_binding(&binding("new", "n", &["GPU-n-1"]));
    assert_eq!(owner(&index, "GPU-n-1").as_deref(), Some("ml/new"));
    assert!(pending(&index).is_empty(), "decided once");
    assert!(!index.pod_unplaced(&ObjectKey::new("ml", "new")));
    // A version from before the binding (a status update) changes nothing.
    index.apply_pod(&pod("ml", "new").resource("r").build());
    assert_eq!(owner(&index, "GPU-n-1").as_deref(), Some("ml/new"));
    // The bound pod arrives: it holds the GPU itself.
    index.apply_pod(
        &pod("ml", "new")
            .resource("r")
            .holds("n", &["GPU-n-1"], Sharing::Exclusive, H100_MIB)
            .build(),
    );
    assert_eq!(owner(&index, "GPU-n-1").as_deref(), Some("ml/new"));
    assert!(index.bindings_to_finish().is_empty());
    // Ending the binding now changes nothing: the pod holds.
    index.end_binding(&ObjectKey::new("ml", "new"), "uid-new");
    assert_eq!(owner(&index, "GPU-n-1").as_deref(), Some("ml/new"));
}

#[test]
fn a_binding_that_did_not_happen_frees_its_gpus() {
    let mut index = cluster();
    index.apply_pod(&pod("ml", "new").resource("r").build());
    index.begin_binding(&binding("new", "n", &["GPU-n-1"]));
    // Another UID's end changes nothing.
    index.end_binding(&ObjectKey::new("ml", "new"), "uid-other");
    assert_eq!(owner(&index, "GPU-n-1").as_deref(), Some("ml/new"));
    index.end_binding(&ObjectKey::new("ml", "new"), "uid-new");
    assert_eq!(owner(&index, "GPU-n-1"), None);
    assert_eq!(pending(&index), ["ml/new"]);
}

#[test]
fn a_binding_of_unknown_outcome_stays_held_and_is_sent_again() {
    let mut index = cluster();
    index.apply_pod(&pod("ml", "new").resource("r").build());
    let sent = binding("new", "n", &["GPU-n-1"]);
    index.begin_binding(&sent);
    assert!(index.bindings_to_finish().is_empty(), "still in flight");
    index.retry_binding(&ObjectKey::new("ml", "new"), "uid-new");
    assert_eq!(owner(&index, "GPU-n-1").as_deref(), Some("ml/new"));
    assert_eq!(index.bindings_to_finish(), std::slice::from_ref(&sent));
    // Sent again: in flight, not to be sent a third time.
    index.begin_binding(&sent);
    assert!(index.bindings_to_finish().is_empty());
    // Stopped (the lead was lost): to be sent again.
    index.retry_all_bindings();
    assert_eq!(index.bindings_to_finish(), [sent]);
}

#[test]
fn a_pod_deleted_or_recreated_while_its_binding_is_in_flight_frees_the_gpus() {
    let mut index = cluster();
    index.apply_pod(&pod("ml", "new").resource("r").build());
    index.begin_binding(&binding("new", "n", &["GPU-n-1"]));
    index.delete_pod("ml", "new");
    assert_eq!(owner(&index, "GPU-n-1"), None);

    index.apply_pod(&pod("ml", "new").resource("r").build());
    index.begin_binding(&binding("new", "n", &["GPU-n-1"]));
    index.apply_pod(&pod("ml", "new").resource("r").uid("uid-again").build());
    assert_eq!(owner(&index, "GPU-n-1"), None);
    assert_eq!(pending(&index), ["ml/new"]);
}

#[test]
fn a_relist_keeps_bindings_whose_pod_is_still_unbound() {
    let mut index = cluster();
    let waiting = pod("ml", "new").resource("r").build();
    index.apply_pod(&waiting);
    index.begin_binding(&binding("new", "n", &["GPU-n-1"]));
    let run = pod("ml", "run")
        .resource("r")
        .holds("n", &["GPU-n-0"], Sharing::Exclusive, H100_MIB)
        .build();
    index.reset_pods(&[run.clone(), waiting]);
    assert_eq!(owner(&index, "GPU-n-1").as_deref(), Some("ml/new"));
    index.reset_pods(&[run]);
    assert_eq!(owner(&index, "GPU-n-1"), None);
}

#[test]
fn a_deleted_gpunode_keeps_held_gpus_held_and_its_pods_waiting() {
    let mut index = index();
    add_gpu_node(&mut index, "n", 1);
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(
        &pod("ml", "run")
            .resource("r")
            .holds("n", &["GPU-n-0"], Sharing::Exclusive, H100_MIB)
            .build(),
    );
    index.apply_pod(&pod("ml", "next").resource("r").build());
    index.delete_gpunode("n");
    // No node to offer, but nothing is declared impossible.
    assert!(default_snapshot(&index).nodes.is_empty());
    assert!(index.problems().is_empty(), "{:?}", index.problems());
    // The agent publishes it again: the held GPU is still held.
    index.apply_gpunode(&gpunode("n").with_gpus(1).build());
    assert_eq!(owner(&index, "GPU-n-0").as_deref(), Some("ml/run"));
    assert_eq!(pending(&index), ["ml/next"]);
    // A relist without it counts as a deletion too.
    index.reset_gpunodes(&[]);
    assert!(index.problems().is_empty(), "{:?}", index.problems());
}

#[test]
fn held_gpus_that_turn_unhealthy_are_found() {
    let mut index = cluster();
    assert!(index.unhealthy_holdings().is_empty());
    index.apply_gpunode(&gpunode("n").with_gpus(2).unhealthy(0).build());
    let found = index.unhealthy_holdings();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].pod, ObjectKey::new("ml", "run"));
    assert_eq!((found[0].gpu.as_str(), found[0].index), ("GPU-n-0", 0));
    assert_eq!(found[0].resource, ObjectKey::new("ml", "r"));
    // Still held.
    assert_eq!(owner(&index, "GPU-n-0").as_deref(), Some("ml/run"));
}

#[test]
fn pods_holding_an_earlier_shape_are_found() {
    let mut index = cluster();
    assert!(index.outdated_holdings().is_empty());
    index.apply_gpuresource(&gpuresource("ml", "r").count(2).build());
    let outdated = &index.outdated_holdings()[&ObjectKey::new("ml", "r")];
    assert_eq!(outdated.now, "2 exclusive GPU(s)");
    assert_eq!(outdated.pod_to_shape["run"], "1 exclusive GPU(s)");
    index.apply_gpuresource(&gpuresource("ml", "r").shared(1000).build());
    let outdated = &index.outdated_holdings()[&ObjectKey::new("ml", "r")];
    assert_eq!(outdated.now, "1 shared GPU(s), 1000 MiB each");
}

/// `ml/urgent`, nominated for `GPU-n-0` while `ml/run` (its victim) goes.
fn nominated(index: &mut Index) {
    let nomination = wasmgpu_api::Nomination {
        uid: "uid-urgent".into(),
        allocation: binding("urgent", "n", &["GPU-n-0"]).allocation,
        victims: vec![wasmgpu_api::Victim {
            namespace: "ml".into(),
            name: "run".into(),
            uid: "uid-run".into(),
        }],
        claims: Vec::new(),
    };
    let (key, value) = nomination.annotation();
    index.apply_pod(
        &pod("ml", "urgent")
            .uid("uid-urgent")
            .resource("r")
            .annotation(&key, &value)
            .build(),
    );
}

#[test]
fn nominated_gpus_are_the_preemptors_until_its_victims_are_gone_then_it_is_bound() {
    let mut index = cluster();
    index.apply_pod(
        &pod("ml", "run")
            .uid("uid-run")
            .resource("r")
            .holds("n", &["GPU-n-0"], Sharing::Exclusive, H100_MIB)
            .build(),
    );
    nominated(&mut index);
    // Not pending: it waits for its victim, not for a policy.
    assert!(pending(&index).is_empty(), "{:?}", pending(&index));
    // Its victim is to be evicted, and nothing is bound yet.
    let evictions = index.evictions();
    assert_eq!(evictions.len(), 1);
    assert_eq!(evictions[0].victim, ObjectKey::new("ml", "run"));
    assert_eq!(evictions[0].preemptor, ObjectKey::new("ml", "urgent"));
    assert!(index.bindings_to_finish().is_empty());
    // The victim going away is evicted no more, but still holds the GPU.
    index.apply_pod(
        &pod("ml", "run")
            .uid("uid-run")
            .resource("r")
            .holds("n", &["GPU-n-0"], Sharing::Exclusive, H100_MIB)
            .deleting()
            .build(),
    );
    assert!(index.evictions().is_empty());
    assert!(index.bindings_to_finish().is_empty());
    assert!(owner(&index, "GPU-n-0").is_some());
    // Gone: the preemptor is bound to the nominated GPU.
    index.delete_pod("ml", "run");
    let bindings = index.bindings_to_finish();
    assert_eq!(bindings.len(), 1);
    assert_eq!(bindings[0].pod, ObjectKey::new("ml", "urgent"));
    assert_eq!(bindings[0].allocation.devices[0].uuid, "GPU-n-0");
    // Meanwhile nobody else was given it.
    index.apply_pod(&pod("ml", "other").resource("r").build());
    let snapshot = default_host(&index);
    assert!(gpu_by_uuid(&snapshot, "GPU-n-0").held);
}

#[test]
fn a_victim_already_named_or_going_is_not_evictable_again() {
    let mut index = cluster();
    let run = || {
        pod("ml", "run").uid("uid-run").resource("r").holds(
            "n",
            &["GPU-n-0"],
            Sharing::Exclusive,
            H100_MIB,
        )
    };
    index.apply_pod(&run().build());
    index.apply_pod(&pod("ml", "other").resource("r").build());
    let evictable = |index: &Index| {
        let snapshot = default_snapshot(index);
        let running = snapshot.running.iter().find(|r| r.pod == "ml/run");
        running.unwrap().evictable
    };
    assert!(evictable(&index), "a plain running pod may be evicted");
    nominated(&mut index);
    assert!(
        !evictable(&index),
        "named by a nomination: its GPU is promised to the preemptor"
    );
    // A namesake (another UID) is another pod.
    index.apply_pod(
        &pod("ml", "run")
            .uid("uid-run-2")
            .resource("r")
            .holds("n", &["GPU-n-0"], Sharing::Exclusive, H100_MIB)
            .build(),
    );
    assert!(
        evictable(&index),
        "a namesake of a victim is not its victim"
    );
    let mut index = cluster();
    index.apply_pod(&run().deleting().build());
    index.apply_pod(&pod("ml", "other").resource("r").build());
    assert!(!evictable(&index), "already going");
}
