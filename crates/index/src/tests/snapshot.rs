//! Snapshots: which pods wait, for which policy, and how they look.

use super::*;
use wasmgpu_contract::types::Sharing as WitSharing;

#[test]
fn a_request_carries_the_pod_and_its_resource() {
    let mut index = index();
    add_gpu_node(&mut index, "n", 8);
    index.apply_gpuresource(
        &gpuresource("ml", "nb")
            .shared(8192)
            .model("NVIDIA H100*")
            .build(),
    );
    index.apply_pod(
        &pod("ml", "p")
            .resource("nb")
            .priority(7)
            .created_ms(42_000)
            .build(),
    );
    let snapshot = index.snapshot(DEFAULT_POLICY, 9, 0).snapshot;
    assert_eq!(snapshot.round, 9);
    assert_eq!(snapshot.config, "");
    let request = &snapshot.pending[0];
    assert_eq!(request.pod, "ml/p");
    assert_eq!(snapshot.namespaces[request.namespace as usize], "ml");
    let wasmgpu_contract::Ask::Gpus(shape) = &request.ask else {
        panic!("a GPUResource request asks for GPUs");
    };
    assert_eq!(shape.count, 1);
    assert_eq!(shape.model.as_deref(), Some("NVIDIA H100*"));
    assert_eq!(shape.memory_mib, 8192);
    assert_eq!(shape.sharing, WitSharing::Shared);
    assert_eq!(request.priority, 7);
    assert_eq!(request.created_ms, 42_000);
    assert_eq!(snapshot.eligible_sets[request.eligible_set as usize], [1]);
}

#[test]
fn pending_is_oldest_first_then_by_name() {
    let mut index = index();
    add_gpu_node(&mut index, "n", 8);
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    for (name, created) in [("c", 3_000), ("b", 1_000), ("a", 3_000), ("d", 2_000)] {
        index.apply_pod(&pod("ml", name).resource("r").created_ms(created).build());
    }
    let order: Vec<_> = default_snapshot(&index)
        .pending
        .into_iter()
        .map(|r| r.pod)
        .collect();
    assert_eq!(order, ["ml/b", "ml/d", "ml/a", "ml/c"]);
}

#[test]
fn bound_finished_and_deleting_pods_do_not_wait() {
    let mut index = index();
    add_gpu_node(&mut index, "n", 8);
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(&pod("ml", "bound").resource("r").bound("n").build());
    index.apply_pod(&pod("ml", "done").resource("r").phase("Succeeded").build());
    index.apply_pod(&pod("ml", "leaving").resource("r").deleting().build());
    index.apply_pod(&pod("ml", "waiting").resource("r").build());
    let pending: Vec<_> = default_snapshot(&index)
        .pending
        .into_iter()
        .map(|r| r.pod)
        .collect();
    assert_eq!(pending, ["ml/waiting"]);
}

#[test]
fn one_snapshot_per_policy_with_the_same_nodes() {
    let mut index = index();
    add_gpu_node(&mut index, "n", 8);
    index.apply_gpuresource(&gpuresource("ml", "plain").build());
    index.apply_gpuresource(
        &gpuresource("ml", "topo")
            .count(4)
            .policy("topology")
            .build(),
    );
    index.apply_gpuresource(&gpuresource("idle", "unused").policy("spread").build());
    index.apply_pod(&pod("ml", "a").resource("plain").build());
    index.apply_pod(&pod("ml", "b").resource("topo").build());
    index.apply_pod(&pod("ml", "c").resource("topo").build());

    let snapshots = index.snapshots(3, 0);
    let policies: Vec<_> = snapshots.keys().map(String::as_str).collect();
    assert_eq!(policies, [DEFAULT_POLICY, "topology"]);
    let pods = |policy: &str| -> Vec<String> {
        snapshots[policy]
            .snapshot
            .pending
            .iter()
            .map(|r| r.pod.clone())
            .collect()
    };
    assert_eq!(pods(DEFAULT_POLICY), ["ml/a"]);
    assert_eq!(pods("topology"), ["ml/b", "ml/c"]);
    assert_eq!(snapshots[DEFAULT_POLICY].nodes, snapshots["topology"].nodes);
    assert!(snapshots.values().all(|s| s.snapshot.round == 3));
    assert!(index.snapshot("spread", 3, 0).snapshot.pending.is_empty());
}

#[test]
fn nodes_are_sorted_with_sorted_labels_and_gpus() {
    let mut index = index();
    index.apply_node(&node("b").label("zone", "x").label("arch", "amd64").build());
    index.apply_gpunode(&gpunode("b").with_gpus(3).reversed().unhealthy(0).build());
    add_gpu_node(&mut index, "a", 1);
    let host = default_host(&index);
    let snapshot = &host.snapshot;
    let names: Vec<_> = snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    let b = &snapshot.nodes[1];
    let labels: Vec<_> = host.nodes[1].labels.iter().collect();
    assert_eq!(
        labels,
        [
            (&"arch".into(), &"amd64".into()),
            (&"zone".into(), &"x".into())
        ]
    );
    assert!(
        b.labels.is_empty(),
        "a policy sees only the labels it asks for"
    );
    let indices: Vec<_> = b.gpus.iter().map(|g| g.index).collect();
    assert_eq!(indices, [0, 1, 2]);
    let healthy: Vec<_> = b.gpus.iter().map(|g| g.healthy).collect();
    assert_eq!(healthy, [false, true, true]);
    assert_eq!(b.gpus[0].memory_mib, H100_MIB);
}

#[test]
fn a_gpunode_without_status_or_deleted_removes_the_inventory() {
    let mut index = index();
    add_gpu_node(&mut index, "a", 2);
    assert_eq!(default_snapshot(&index).nodes.len(), 1);
    index.apply_gpunode(&GPUNode::new("a", GPUNodeSpec {}));
    assert!(default_snapshot(&index).nodes.is_empty());
    add_gpu_node(&mut index, "a", 2);
    index.delete_gpunode("a");
    assert!(default_snapshot(&index).nodes.is_empty());
}

#[test]
fn resets_replace_everything_of_their_kind() {
    let mut index = index();
    add_gpu_node(&mut index, "old", 2);
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(&pod("ml", "p").resource("r").build());
    index.reset_nodes(&[node("new").build()]);
    index.reset_gpunodes(&[gpunode("new").with_gpus(1).build()]);
    let snapshot = default_snapshot(&index);
    assert_eq!(snapshot.nodes.len(), 1);
    assert_eq!(snapshot.nodes[0].name, "new");
    index.reset_pods(&[]);
    assert!(default_snapshot(&index).pending.is_empty());
    index.reset_gpuresources(&[]);
    index.apply_pod(&pod("ml", "p").resource("r").build());
    assert!(matches!(
        index.problems()[0],
        crate::problem::Problem::MissingResource { .. }
    ));
}

#[test]
fn pods_with_the_same_constraints_share_an_eligible_set() {
    let mut index = index();
    index.apply_node(&node("a").label("zone", "x").build());
    index.apply_gpunode(&gpunode("a").with_gpus(2).build());
    add_gpu_node(&mut index, "b", 2);
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(&pod("ml", "p1").resource("r").created_ms(1).build());
    index.apply_pod(
        &pod("ml", "p2")
            .resource("r")
            .created_ms(2)
            .node_selector("zone", "x")
            .build(),
    );
    index.apply_pod(&pod("ml", "p3").resource("r").created_ms(3).build());
    let snapshot = default_snapshot(&index);
    assert_eq!(
        snapshot.eligible_sets,
        [vec![0b11], vec![0b01]],
        "bit sets of nodes"
    );
    let sets: Vec<_> = snapshot.pending.iter().map(|r| r.eligible_set).collect();
    assert_eq!(sets, [0, 1, 0]);
}

#[test]
fn nvlink_peers_are_positions_in_the_node() {
    let mut index = index();
    index.apply_node(&node("a").build());
    let mut gpunode = gpunode("a").with_gpus(3).nvlinked().reversed().build();
    // A peer the inventory does not list is dropped.
    gpunode.status.as_mut().unwrap().gpus[0]
        .nvlink_peers
        .push("GPU-elsewhere".into());
    index.apply_gpunode(&gpunode);
    let snapshot = default_snapshot(&index);
    let peers: Vec<_> = snapshot.nodes[0]
        .gpus
        .iter()
        .map(|g| wasmgpu_contract::bits::nvlink_indices(g.nvlink).collect::<Vec<_>>())
        .collect();
    assert_eq!(peers[0], [1, 2]);
    assert_eq!(peers[1], [0, 2]);
    assert_eq!(peers[2], [0, 1]);
}

/// What a generic watch loop does with the events of one kind.
fn feed<K>(index: &mut Index, listed: &[K], deleted: &K)
where
    Index: crate::watch::IndexResource<K>,
{
    use crate::watch::IndexResource;
    index.reset(listed);
    index.delete(deleted);
}

#[test]
fn every_kind_can_be_fed_through_one_generic_interface() {
    let mut index = Index::new(DEFAULT_POLICY);
    feed(
        &mut index,
        &[node("a").build(), node("b").build()],
        &node("b").build(),
    );
    feed(
        &mut index,
        &[
            gpunode("a").with_gpus(1).build(),
            gpunode("b").with_gpus(1).build(),
        ],
        &gpunode("b").build(),
    );
    feed(
        &mut index,
        &[
            gpuresource("ml", "r").build(),
            gpuresource("ml", "gone").build(),
        ],
        &gpuresource("ml", "gone").build(),
    );
    let pods = [
        pod("ml", "p").resource("r").build(),
        pod("ml", "q").resource("r").build(),
    ];
    feed(&mut index, &pods, &pods[1]);
    let snapshot = default_snapshot(&index);
    let nodes: Vec<_> = snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(nodes, ["a"]);
    let pending: Vec<_> = snapshot.pending.iter().map(|r| r.pod.as_str()).collect();
    assert_eq!(pending, ["ml/p"]);
    assert!(index.problems().is_empty());
}

#[test]
fn a_preemptor_backing_off_may_not_preempt_until_its_wait_is_over() {
    use wasmgpu_contract::types::PreemptionPolicy;
    let mut index = index();
    add_gpu_node(&mut index, "node-a", 1);
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(&pod("ml", "big").resource("r").build());
    let key = crate::key::ObjectKey::new("ml", "big");
    let preemption = |index: &Index, now_ms: u64| {
        index.snapshot(DEFAULT_POLICY, 1, now_ms).snapshot.pending[0].preemption
    };
    assert_eq!(
        preemption(&index, 1_000),
        PreemptionPolicy::PreemptLowerPriority
    );
    let wait = index.preemption_blocked(&key, 1_000);
    assert_eq!(wait.as_millis(), 10_000);
    assert_eq!(preemption(&index, 10_999), PreemptionPolicy::Never);
    assert_eq!(
        preemption(&index, 11_000),
        PreemptionPolicy::PreemptLowerPriority
    );
    // Deleted and made again: a fresh start.
    index.preemption_blocked(&key, 20_000);
    index.delete_pod("ml", "big");
    index.apply_pod(&pod("ml", "big").resource("r").build());
    assert_eq!(
        preemption(&index, 20_001),
        PreemptionPolicy::PreemptLowerPriority
    );
}
