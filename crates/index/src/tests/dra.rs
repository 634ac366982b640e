//! DRA as a second inventory: a node's ResourceSlices merged with its
//! GPUNode by UUID (one GPU, counted once), devices a ResourceClaim holds
//! held for everyone, and GPUResource pods told the truth about DRA-only GPUs.

use super::*;
use crate::dra::tests::{allocated_claim, h100_slice, mig_partitioned_slices, static_mig_slice};
use wasmgpu_contract::types::Publisher;

fn publishers(index: &Index, node: &str) -> Vec<Publisher> {
    let snapshot = default_snapshot(index);
    let node = snapshot.nodes.iter().find(|n| n.name == node).unwrap();
    node.gpus.iter().map(|g| g.published_by).collect()
}

/// A pending pod of `ml/r` (one exclusive GPU), so that snapshots are built.
fn waiting(index: &mut Index) {
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(&pod("ml", "wait").resource("r").build());
}

#[test]
fn a_gpu_both_inventories_list_is_one_gpu() {
    let mut index = index();
    waiting(&mut index);
    add_gpu_node(&mut index, "node-a", 8);
    index.apply_resourceslice(&h100_slice("node-a", 8));
    assert_eq!(publishers(&index, "node-a"), vec![Publisher::Both; 8]);
    let states = index.gpu_states();
    assert_eq!(states.iter().map(|s| s.count).sum::<u32>(), 8, "{states:?}");

    // The slice goes: the agent's GPUs stay.
    index.reset_resourceslices(&[]);
    assert_eq!(publishers(&index, "node-a"), vec![Publisher::Agent; 8]);
}

#[test]
fn a_node_only_a_dra_driver_publishes_appears_with_its_gpus() {
    let mut index = index();
    waiting(&mut index);
    index.apply_node(&node("node-d").build());
    index.apply_resourceslice(&h100_slice("node-d", 4));
    assert_eq!(publishers(&index, "node-d"), vec![Publisher::DraDriver; 4]);
    let problems = index.problems();
    assert!(
        problems
            .iter()
            .any(|p| p.to_string().contains("can never be placed")),
        "a GPUResource pod cannot take DRA-only GPUs, and is told so: {problems:?}"
    );

    // Its GPUNode appears with two of the four: those two are both.
    index.apply_gpunode(&gpunode("node-d").with_gpus(2).build());
    assert_eq!(
        publishers(&index, "node-d"),
        [
            Publisher::Both,
            Publisher::Both,
            Publisher::DraDriver,
            Publisher::DraDriver
        ]
    );
    assert!(index.problems().is_empty(), "{:?}", index.problems());
}

#[test]
fn devices_a_claim_holds_are_held_even_for_gpuresource_pods() {
    let mut index = index();
    waiting(&mut index);
    add_gpu_node(&mut index, "node-a", 2);
    index.apply_resourceslice(&h100_slice("node-a", 2));
    index.apply_resourceclaim(&allocated_claim(
        "other",
        "c",
        "node-a",
        &[("gpu-1", false)],
    ));
    let host = default_host(&index);
    assert!(!gpu_by_uuid(&host, "GPU-node-a-0").held);
    assert!(
        gpu_by_uuid(&host, "GPU-node-a-1").held,
        "kube-scheduler's claim holds it"
    );
    assert_eq!(holder(&index, "GPU-node-a-1").as_deref(), Some("other/c"));

    index.delete_resourceclaim("other", "c");
    assert!(!gpu_by_uuid(&default_host(&index), "GPU-node-a-1").held);

    // adminAccess watches a device without holding it.
    index.apply_resourceclaim(&allocated_claim("other", "m", "node-a", &[("gpu-1", true)]));
    assert!(!gpu_by_uuid(&default_host(&index), "GPU-node-a-1").held);
}

#[test]
fn a_static_mig_parent_the_driver_does_not_publish_is_never_free() {
    let mut index = index();
    waiting(&mut index);
    index.apply_node(&node("node-s").build());
    index.apply_resourceslice(&static_mig_slice("node-s"));
    let host = default_host(&index);
    let parent = gpu_by_uuid(&host, "GPU-node-s-0");
    assert!(parent.held, "listed only as the instances' parent");
    let instance = gpu_by_uuid(&host, "MIG-node-s-0");
    assert!(!instance.held);
    assert_eq!(instance.mig.as_ref().map(|m| m.parent), Some(0));
    assert_eq!(instance.published_by, Publisher::DraDriver);
    assert_eq!(index.gpu_states().iter().map(|s| s.count).sum::<u32>(), 0);
}

#[test]
fn a_broken_pool_is_reported_and_its_gpus_are_gone() {
    let mut index = index();
    waiting(&mut index);
    index.apply_node(&node("node-d").build());
    let mut slice = h100_slice("node-d", 2);
    slice.spec.pool.resource_slice_count = 3;
    index.apply_resourceslice(&slice);
    let problems = index.resourceslice_problems();
    assert_eq!(problems.len(), 1);
    let message = problems[0].to_string();
    assert!(
        message.starts_with("ResourceSlice pool \"node-d\" of driver gpu.nvidia.com is incomplete: generation 1 has 1 of its resourceSliceCount 3 slices"),
        "{message}"
    );
    assert_eq!(
        problems[0].subject(),
        crate::problem::Subject::ResourceSlice("node-d-gpu.nvidia.com-1-2")
    );
    assert!(
        index.problems().contains(&problems[0]),
        "reported with the others"
    );
    assert!(default_snapshot(&index).nodes.is_empty());
}

#[test]
fn dynamic_mig_devices_overlapping_one_in_use_are_held() {
    let mut index = index();
    waiting(&mut index);
    index.apply_node(&node("node-m").build());
    for slice in mig_partitioned_slices("node-m") {
        index.apply_resourceslice(&slice);
    }
    let held = |index: &Index| {
        let host = default_host(index);
        ["GPU-node-m-0", "MIG-node-m-0-0", "MIG-node-m-0-4"].map(|u| gpu_by_uuid(&host, u).held)
    };
    assert_eq!(held(&index), [false; 3]);

    // One 3g.40gb placement in use: the whole GPU (80Gi of the counter)
    // no longer fits, the other placement (40Gi) does.
    index.apply_resourceclaim(&allocated_claim(
        "other",
        "half",
        "node-m",
        &[("gpu-0-mig-3g40gb-0", false)],
    ));
    assert_eq!(held(&index), [true, true, false]);
    let host = default_host(&index);
    let n = host
        .snapshot
        .nodes
        .iter()
        .position(|n| n.name == "node-m")
        .unwrap();
    let memory = "gpu.nvidia.com/node-m/gpu-0-counter-set/memory";
    assert!(
        host.nodes[n]
            .counters
            .left
            .contains(&(memory.into(), 40 << 30)),
        "{:?}",
        host.nodes[n].counters
    );

    // The whole GPU in use: neither placement fits.
    index.delete_resourceclaim("other", "half");
    index.apply_resourceclaim(&allocated_claim(
        "other",
        "whole",
        "node-m",
        &[("gpu-0", false)],
    ));
    assert_eq!(held(&index), [true, true, true]);
}
