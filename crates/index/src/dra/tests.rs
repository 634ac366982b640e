//! NVIDIA-shaped ResourceSlices and ResourceClaims (as `gpu.nvidia.com`
//! publishes them, see DRA-NOTES), and the inventory's tests on them.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    AllocationResult, Counter, CounterSet, Device, DeviceAllocationResult, DeviceAttribute,
    DeviceCapacity, DeviceCounterConsumption, DeviceRequestAllocationResult, ResourceClaim,
    ResourceClaimStatus, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

pub(crate) const DRIVER: &str = "gpu.nvidia.com";

fn string(value: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(value.into()),
        ..Default::default()
    }
}

fn int(value: i64) -> DeviceAttribute {
    DeviceAttribute {
        int: Some(value),
        ..Default::default()
    }
}

/// A device with only a name.
pub(crate) fn device(name: &str) -> Device {
    Device {
        name: name.into(),
        ..Default::default()
    }
}

/// A whole GPU as NVIDIA's driver publishes it.
pub(crate) fn nvidia_gpu(name: &str, uuid: &str, product: &str, memory: &str) -> Device {
    Device {
        name: name.into(),
        attributes: Some(BTreeMap::from([
            ("type".into(), string("gpu")),
            ("uuid".into(), string(uuid)),
            ("productName".into(), string(product)),
            ("brand".into(), string("Nvidia")),
            (
                "cudaComputeCapability".into(),
                DeviceAttribute {
                    version: Some("9.0.0".into()),
                    ..Default::default()
                },
            ),
        ])),
        capacity: Some(BTreeMap::from([(
            "memory".into(),
            DeviceCapacity {
                value: Quantity(memory.into()),
                request_policy: None,
            },
        )])),
        ..Default::default()
    }
}

/// A slice of `driver`'s pool `pool` on node `pool`.
pub(crate) fn slice(
    driver: &str,
    pool: &str,
    generation: i64,
    count: i64,
    devices: Vec<Device>,
) -> ResourceSlice {
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(format!("{pool}-{driver}-{generation}-{}", devices.len())),
            ..Default::default()
        },
        spec: ResourceSliceSpec {
            driver: driver.into(),
            node_name: Some(pool.into()),
            pool: ResourcePool {
                name: pool.into(),
                generation,
                resource_slice_count: count,
            },
            devices: Some(devices),
            ..Default::default()
        },
    }
}

/// A counter set of the given counters.
pub(crate) fn counter_set(name: &str, counters: &[(&str, &str)]) -> CounterSet {
    CounterSet {
        name: name.into(),
        counters: counters
            .iter()
            .map(|(n, v)| {
                (
                    (*n).into(),
                    Counter {
                        value: Quantity((*v).into()),
                    },
                )
            })
            .collect(),
    }
}

/// An 8×H100 node (one slice, one pool named after the node): devices
/// `gpu-<i>`, UUIDs `GPU-<node>-<i>`, NUMA 0 for 0–3 and 1 for 4–7.
pub(crate) fn h100_slice(node: &str, gpus: u32) -> ResourceSlice {
    let devices = (0..gpus)
        .map(|i| {
            let mut d = nvidia_gpu(
                &format!("gpu-{i}"),
                &format!("GPU-{node}-{i}"),
                "NVIDIA H100 80GB HBM3",
                "81559Mi",
            );
            let attributes = d.attributes.as_mut().unwrap();
            attributes.insert(
                "resource.kubernetes.io/numaNode".into(),
                int(i64::from(i / 4)),
            );
            attributes.insert(
                "resource.kubernetes.io/pciBusID".into(),
                string(&format!("0000:{:02x}:00.0", 0x1a + i)),
            );
            d
        })
        .collect();
    slice(DRIVER, node, 1, 1, devices)
}

/// A node with one A100 partitionable through counters (dynamic MIG): a
/// counter slice, then the whole GPU and two `3g.40gb` placements, all
/// consuming `gpu-0-counter-set`; the MIG devices name no parent.
pub(crate) fn mig_partitioned_slices(node: &str) -> Vec<ResourceSlice> {
    let mut counters = slice(DRIVER, node, 1, 2, vec![]);
    counters.metadata.name = Some(format!("{node}-counters"));
    counters.spec.shared_counters = Some(vec![counter_set(
        "gpu-0-counter-set",
        &[("memory", "80Gi"), ("multiprocessors", "98")],
    )]);
    let consume = |memory: &str| {
        Some(vec![DeviceCounterConsumption {
            counter_set: "gpu-0-counter-set".into(),
            counters: BTreeMap::from([(
                "memory".into(),
                Counter {
                    value: Quantity(memory.into()),
                },
            )]),
            compatibility_groups: None,
        }])
    };
    let mut whole = nvidia_gpu(
        "gpu-0",
        &format!("GPU-{node}-0"),
        "NVIDIA A100-SXM4-80GB",
        "80Gi",
    );
    whole.consumes_counters = consume("80Gi");
    let mig = |i: u32| {
        let mut d = nvidia_gpu(
            &format!("gpu-0-mig-3g40gb-{i}"),
            &format!("MIG-{node}-0-{i}"),
            "NVIDIA A100-SXM4-80GB",
            "40Gi",
        );
        let attributes = d.attributes.as_mut().unwrap();
        attributes.insert("type".into(), string("mig"));
        attributes.insert("profile".into(), string("3g.40gb"));
        d.consumes_counters = consume("40Gi");
        d
    };
    let mut devices = slice(DRIVER, node, 1, 2, vec![whole, mig(0), mig(4)]);
    devices.metadata.name = Some(format!("{node}-devices"));
    vec![counters, devices]
}

/// A static-MIG node: two `1g.10gb` instances of one A100 with
/// `parentUUID`, the parent itself not published.
pub(crate) fn static_mig_slice(node: &str) -> ResourceSlice {
    let mig = |i: u32| {
        let mut d = nvidia_gpu(
            &format!("gpu-0-mig-1g10gb-{i}"),
            &format!("MIG-{node}-{i}"),
            "NVIDIA A100-SXM4-80GB",
            "10Gi",
        );
        let attributes = d.attributes.as_mut().unwrap();
        attributes.insert("type".into(), string("mig"));
        attributes.insert("profile".into(), string("1g.10gb"));
        attributes.insert("parentUUID".into(), string(&format!("GPU-{node}-0")));
        d
    };
    slice(DRIVER, node, 1, 1, vec![mig(0), mig(1)])
}

/// A claim `namespace/name` allocated the given devices of `pool`
/// (`(device, adminAccess)`).
pub(crate) fn allocated_claim(
    namespace: &str,
    name: &str,
    pool: &str,
    devices: &[(&str, bool)],
) -> ResourceClaim {
    ResourceClaim {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Default::default(),
        status: Some(ResourceClaimStatus {
            allocation: Some(AllocationResult {
                devices: Some(DeviceAllocationResult {
                    results: Some(
                        devices
                            .iter()
                            .map(|(device, admin)| DeviceRequestAllocationResult {
                                request: "gpus".into(),
                                driver: DRIVER.into(),
                                pool: pool.into(),
                                device: (*device).into(),
                                admin_access: admin.then_some(true),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                    config: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

#[test]
fn an_h100_node_is_eight_gpus_by_index_with_their_devices() {
    let mut dra = DraInventory::default();
    let touched = dra.apply_slice(&h100_slice("node-a", 8));
    assert_eq!(touched, BTreeSet::from(["node-a".to_string()]));
    let node = dra.node("node-a").unwrap();
    let indices: Vec<u32> = node.gpus.iter().map(|g| g.index).collect();
    assert_eq!(indices, (0..8).collect::<Vec<_>>());
    assert_eq!(node.gpus[5].numa_node, Some(1));
    assert_eq!(node.uuid_to_device["GPU-node-a-5"].device, "gpu-5");
    assert!(node.unpublished.is_empty());
    let id = &node.uuid_to_device["GPU-node-a-5"];
    assert_eq!(dra.locate(id), Some(("node-a", "GPU-node-a-5")));
    assert!(dra.node("node-b").is_none());
}

#[test]
fn a_new_generation_replaces_the_old_and_an_incomplete_one_hides_the_pool() {
    let mut dra = DraInventory::default();
    dra.apply_slice(&h100_slice("node-a", 8));
    // The driver starts publishing generation 2 in two slices; only one is there.
    let mut half = h100_slice("node-a", 4);
    half.metadata.name = Some("node-a-gen2-a".into());
    half.spec.pool.generation = 2;
    half.spec.pool.resource_slice_count = 2;
    let touched = dra.apply_slice(&half);
    assert!(touched.contains("node-a"));
    assert!(
        dra.node("node-a").is_none(),
        "an incomplete pool is not used"
    );
    let problems = dra.problems();
    assert_eq!(problems.len(), 1);
    assert!(matches!(
        problems[0].1,
        PoolProblem::Incomplete {
            have: 1,
            want: 2,
            ..
        }
    ));
    assert!(
        dra.locate(&DeviceId {
            driver: DRIVER.into(),
            pool: "node-a".into(),
            device: "gpu-0".into()
        })
        .is_none()
    );

    let mut rest = slice(
        DRIVER,
        "node-a",
        2,
        2,
        vec![nvidia_gpu(
            "gpu-9",
            "GPU-node-a-9",
            "NVIDIA H100 80GB HBM3",
            "80Gi",
        )],
    );
    rest.metadata.name = Some("node-a-gen2-b".into());
    dra.apply_slice(&rest);
    let node = dra.node("node-a").unwrap();
    assert_eq!(node.gpus.len(), 5, "generation 2's devices only");
    assert!(dra.problems().is_empty());

    dra.delete_slice("node-a-gen2-a");
    dra.delete_slice("node-a-gen2-b");
    assert_eq!(
        dra.node("node-a").unwrap().gpus.len(),
        8,
        "back to generation 1"
    );
}

#[test]
fn dynamic_mig_puts_the_placements_under_their_whole_gpu() {
    let mut dra = DraInventory::default();
    for s in mig_partitioned_slices("node-m") {
        dra.apply_slice(&s);
    }
    let node = dra.node("node-m").unwrap();
    assert_eq!(node.gpus.len(), 1);
    let gpu = &node.gpus[0];
    assert_eq!(gpu.uuid, "GPU-node-m-0");
    assert_eq!(gpu.memory_total_mib, 80 * 1024);
    assert_eq!(gpu.mig_instances.len(), 2);
    assert!(gpu.mig_instances.iter().all(|m| m.profile == "3g.40gb"));
    assert!(node.unpublished.is_empty(), "the whole GPU is published");
}

#[test]
fn static_mig_lists_an_unpublished_parent() {
    let mut dra = DraInventory::default();
    dra.apply_slice(&static_mig_slice("node-s"));
    let node = dra.node("node-s").unwrap();
    assert_eq!(node.gpus.len(), 1);
    assert_eq!(node.gpus[0].uuid, "GPU-node-s-0");
    assert_eq!(node.gpus[0].mig_instances.len(), 2);
    assert!(node.unpublished.contains("GPU-node-s-0"));
    assert!(!node.uuid_to_device.contains_key("GPU-node-s-0"));
}

#[test]
fn claims_hold_their_devices_but_not_admin_access() {
    let mut dra = DraInventory::default();
    dra.apply_slice(&h100_slice("node-a", 8));
    dra.apply_claim(&allocated_claim(
        "team",
        "train",
        "node-a",
        &[("gpu-0", false), ("gpu-1", false), ("gpu-2", true)],
    ));
    let held: Vec<String> = dra.allocated().map(|(_, d)| d.device.clone()).collect();
    assert_eq!(held, ["gpu-0", "gpu-1"]);
    dra.delete_claim("team", "train");
    assert_eq!(dra.allocated().count(), 0);
    dra.reset_claims(&[allocated_claim("team", "a", "node-a", &[("gpu-3", false)])]);
    assert_eq!(dra.allocated().count(), 1);
}

#[test]
fn a_relist_forgets_what_is_gone() {
    let mut dra = DraInventory::default();
    dra.apply_slice(&h100_slice("node-a", 8));
    let touched = dra.reset_slices(&[h100_slice("node-b", 2)]);
    assert_eq!(
        touched,
        BTreeSet::from(["node-a".to_string(), "node-b".to_string()])
    );
    assert!(dra.node("node-a").is_none());
    assert_eq!(dra.node("node-b").unwrap().gpus.len(), 2);
}

#[test]
fn a_slice_that_moves_to_another_pool_leaves_the_old_one() {
    let mut dra = DraInventory::default();
    let mut moved = h100_slice("node-a", 2);
    moved.metadata.name = Some("slice".into());
    dra.apply_slice(&moved);
    let mut again = h100_slice("node-b", 2);
    again.metadata.name = Some("slice".into());
    let touched = dra.apply_slice(&again);
    assert_eq!(
        touched,
        BTreeSet::from(["node-a".to_string(), "node-b".to_string()])
    );
    assert!(dra.node("node-a").is_none());
    assert_eq!(dra.node("node-b").unwrap().gpus.len(), 2);
}
