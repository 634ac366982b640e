//! A published device read as a GPU: the attributes and capacities NVIDIA's
//! `gpu.nvidia.com` driver publishes (any driver that publishes the same
//! names is read the same way).
//!
//! | GPU field   | from the device                                              |
//! |-------------|--------------------------------------------------------------|
//! | whole / MIG | `type` (`gpu`, or absent: whole; `mig`: an instance; others are not GPUs) |
//! | UUID        | `uuid` (required)                                            |
//! | model       | `productName`                                                |
//! | memory      | capacity `memory` (bytes)                                    |
//! | index       | `index` or `minor`, else the `<n>` of a name `gpu-<n>`       |
//! | NUMA node   | `resource.kubernetes.io/numaNode`                            |
//! | PCI bus id  | `resource.kubernetes.io/pciBusID`                            |
//! | MIG parent  | `parentUUID`, else the whole GPU consuming the same counter set |
//! | MIG profile | `profile`                                                    |
//!
//! Unqualified attribute names belong to the driver's domain, so `uuid` and
//! `gpu.nvidia.com/uuid` are the same attribute.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{Device, DeviceAttribute};

use super::cel::DeviceInput;
use super::pools::{DeviceId, Pool, PoolKey};
use super::quantity;

/// The Kubernetes domain's NUMA node attribute.
const NUMA_NODE: &str = "resource.kubernetes.io/numaNode";
/// The Kubernetes domain's PCI bus id attribute.
const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";

/// A device read as a GPU (a whole one or a MIG instance).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DraGpu {
    pub id: DeviceId,
    pub uuid: String,
    /// Its index on the node, when the device says.
    pub index: Option<u32>,
    pub model: String,
    pub memory_mib: u64,
    pub numa_node: Option<u32>,
    pub pci_bus_id: String,
    /// Set for a MIG instance: its parent's UUID (when known) and profile.
    pub mig: Option<Mig>,
    /// The counter sets it consumes from (`consumesCounters[].counterSet`).
    pub counter_sets: Vec<String>,
    /// What it consumes of each shared counter of its pool, with the
    /// counter's value (filled in by [`gpus_of`], which knows the pool).
    pub consumes: Vec<Consumption>,
    /// The device as published (attributes, taints), for claims' selectors
    /// and constraints.
    pub published: Arc<Device>,
    /// The device as CEL selectors see it (`device`).
    pub selector_input: DeviceInput,
}

/// A device's use of one shared counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Consumption {
    /// `<driver>/<pool>/<counterSet>/<counter>`: unique on a node.
    pub counter: String,
    /// How much of it the device consumes (a value that does not parse
    /// counts as more than any counter holds).
    pub amount: u64,
    /// The counter's value in the pool (0 when the pool does not declare
    /// it: the device can never be allocated).
    pub capacity: u64,
}

/// Where a MIG instance sits.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Mig {
    pub parent_uuid: Option<String>,
    pub profile: String,
}

/// Why a device of a pool is not read as a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Its `type` is neither `gpu` nor `mig` (e.g. `vfio`).
    NotAGpu { device: String, kind: String },
    /// It has no `uuid` attribute.
    NoUuid { device: String },
    /// It is not on one node (`allNodes`, a node selector).
    NotNodeLocal { device: String },
}

/// The GPUs of a pool by node, and the devices that are not GPUs.
pub(crate) fn gpus_of(key: &PoolKey, pool: &Pool) -> (Vec<(String, DraGpu)>, Vec<Skip>) {
    let mut gpus = Vec::new();
    let mut skipped = Vec::new();
    for published in &pool.devices {
        let device = &published.device;
        let Some(node) = &published.node else {
            skipped.push(Skip::NotNodeLocal {
                device: device.name.clone(),
            });
            continue;
        };
        match read(&key.driver, device) {
            Ok(mut gpu) => {
                gpu.id = DeviceId {
                    driver: key.driver.clone(),
                    pool: key.pool.clone(),
                    device: device.name.clone(),
                };
                gpu.consumes = consumption(key, pool, device);
                gpus.push((node.clone(), gpu));
            }
            Err(skip) => skipped.push(skip),
        }
    }
    // A MIG instance without `parentUUID` belongs to the whole GPU on its
    // node that consumes the same counter set.
    let parents: BTreeMap<(&str, &str), String> = gpus
        .iter()
        .filter(|(_, g)| g.mig.is_none())
        .flat_map(|(node, g)| {
            g.counter_sets
                .iter()
                .map(move |set| ((node.as_str(), set.as_str()), g.uuid.clone()))
        })
        .collect();
    let found: Vec<Option<String>> = gpus
        .iter()
        .map(|(node, g)| {
            let mig = g.mig.as_ref()?;
            if mig.parent_uuid.is_some() {
                return None;
            }
            g.counter_sets
                .iter()
                .find_map(|set| parents.get(&(node.as_str(), set.as_str())).cloned())
        })
        .collect();
    for ((_, gpu), parent) in gpus.iter_mut().zip(found) {
        if let (Some(mig), Some(parent)) = (gpu.mig.as_mut(), parent) {
            mig.parent_uuid = Some(parent);
        }
    }
    (gpus, skipped)
}

/// What `device` consumes of its pool's shared counters.
fn consumption(key: &PoolKey, pool: &Pool, device: &Device) -> Vec<Consumption> {
    let saturate = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    device
        .consumes_counters
        .iter()
        .flatten()
        .flat_map(|uses| {
            let set = pool.counter_sets.get(&uses.counter_set);
            uses.counters
                .iter()
                .map(move |(name, counter)| Consumption {
                    counter: format!("{}/{}/{}/{name}", key.driver, key.pool, uses.counter_set),
                    amount: quantity::parse(&counter.value.0).map_or(u64::MAX, saturate),
                    capacity: set.and_then(|s| s.get(name)).map_or(0, |v| saturate(*v)),
                })
        })
        .collect()
}

/// One device as a GPU (its `id` is filled in by the caller).
fn read(driver: &str, device: &Device) -> Result<DraGpu, Skip> {
    let attribute = |name: &str| {
        let attributes = device.attributes.as_ref()?;
        attributes
            .get(name)
            .or_else(|| attributes.get(&format!("{driver}/{name}")))
    };
    let string = |name: &str| attribute(name).and_then(|a| a.string.clone());
    let int = |name: &str| attribute(name).and_then(int_of);
    let kind = string("type");
    let mig = match kind.as_deref() {
        None | Some("gpu") => None,
        Some("mig") => Some(Mig {
            parent_uuid: string("parentUUID"),
            profile: string("profile").unwrap_or_else(|| "unknown".into()),
        }),
        Some(other) => {
            return Err(Skip::NotAGpu {
                device: device.name.clone(),
                kind: other.into(),
            });
        }
    };
    let uuid = string("uuid")
        .filter(|u| !u.is_empty())
        .ok_or_else(|| Skip::NoUuid {
            device: device.name.clone(),
        })?;
    let memory_mib = device
        .capacity
        .as_ref()
        .and_then(|c| {
            c.get("memory")
                .or_else(|| c.get(&format!("{driver}/memory")))
        })
        .and_then(|c| quantity::mib(&c.value.0))
        .unwrap_or(0);
    let index = int("index")
        .or_else(|| int("minor"))
        .or_else(|| index_in_name(&device.name));
    Ok(DraGpu {
        id: DeviceId {
            driver: driver.into(),
            pool: String::new(),
            device: device.name.clone(),
        },
        uuid,
        index: if mig.is_some() { None } else { index },
        model: string("productName").unwrap_or_else(|| format!("{driver} device")),
        memory_mib,
        numa_node: attribute(NUMA_NODE).and_then(int_of),
        pci_bus_id: attribute(PCI_BUS_ID)
            .and_then(|a| a.string.clone())
            .unwrap_or_default(),
        mig,
        counter_sets: device
            .consumes_counters
            .iter()
            .flatten()
            .map(|c| c.counter_set.clone())
            .collect(),
        consumes: Vec::new(),
        published: Arc::new(device.clone()),
        selector_input: DeviceInput::of(driver, device),
    })
}

fn int_of(attribute: &DeviceAttribute) -> Option<u32> {
    attribute.int.and_then(|i| u32::try_from(i).ok())
}

/// `gpu-3` → 3 (NVIDIA's names for whole GPUs).
fn index_in_name(name: &str) -> Option<u32> {
    name.strip_prefix("gpu-")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::pools::pool_of;
    use crate::dra::tests::{h100_slice, mig_partitioned_slices, nvidia_gpu};

    fn key(pool: &str) -> PoolKey {
        PoolKey {
            driver: "gpu.nvidia.com".into(),
            pool: pool.into(),
        }
    }

    #[test]
    fn nvidias_attributes_become_the_gpus_fields() {
        let slice = h100_slice("node-a", 8);
        let pool = pool_of([&slice.spec]).unwrap();
        let (gpus, skipped) = gpus_of(&key("node-a"), &pool);
        assert!(skipped.is_empty());
        assert_eq!(gpus.len(), 8);
        let (node, gpu) = &gpus[3];
        assert_eq!(node, "node-a");
        assert_eq!(gpu.uuid, "GPU-node-a-3");
        assert_eq!(gpu.index, Some(3));
        assert_eq!(gpu.model, "NVIDIA H100 80GB HBM3");
        assert_eq!(gpu.memory_mib, 81_559);
        assert_eq!(gpu.numa_node, Some(0));
        assert_eq!(gpu.pci_bus_id, "0000:1d:00.0");
        assert_eq!(gpu.mig, None);
        assert_eq!(gpu.id.to_string(), "gpu.nvidia.com/node-a/gpu-3");
    }

    #[test]
    fn qualified_names_and_other_types() {
        let mut vfio = nvidia_gpu("gpu-1", "GPU-v", "NVIDIA A100-PCIE-40GB", "40Gi");
        let attributes = vfio.attributes.as_mut().unwrap();
        attributes.insert(
            "type".into(),
            DeviceAttribute {
                string: Some("vfio".into()),
                ..Default::default()
            },
        );
        let mut qualified = nvidia_gpu("gpu-0", "GPU-q", "NVIDIA A100-PCIE-40GB", "40Gi");
        let attributes = qualified.attributes.as_mut().unwrap();
        let uuid = attributes.remove("uuid").unwrap();
        attributes.insert("gpu.nvidia.com/uuid".into(), uuid);
        let mut no_uuid = nvidia_gpu("gpu-2", "", "NVIDIA A100-PCIE-40GB", "40Gi");
        no_uuid.attributes.as_mut().unwrap().remove("uuid");
        let slice = crate::dra::tests::slice(
            "gpu.nvidia.com",
            "node-b",
            1,
            1,
            vec![qualified, vfio, no_uuid],
        );
        let pool = pool_of([&slice.spec]).unwrap();
        let (gpus, skipped) = gpus_of(&key("node-b"), &pool);
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].1.uuid, "GPU-q");
        assert_eq!(
            skipped,
            [
                Skip::NotAGpu {
                    device: "gpu-1".into(),
                    kind: "vfio".into()
                },
                Skip::NoUuid {
                    device: "gpu-2".into()
                }
            ]
        );
    }

    #[test]
    fn a_mig_device_finds_its_parent_through_the_counter_set() {
        let slices = mig_partitioned_slices("node-m");
        let pool = pool_of(slices.iter().map(|s| &s.spec)).unwrap();
        let (gpus, _) = gpus_of(&key("node-m"), &pool);
        let whole = gpus.iter().find(|(_, g)| g.mig.is_none()).unwrap();
        let instances: Vec<&DraGpu> = gpus
            .iter()
            .filter_map(|(_, g)| g.mig.is_some().then_some(g))
            .collect();
        assert_eq!(instances.len(), 2);
        for instance in instances {
            let mig = instance.mig.as_ref().unwrap();
            assert_eq!(mig.parent_uuid.as_deref(), Some(whole.1.uuid.as_str()));
            assert_eq!(mig.profile, "3g.40gb");
            assert_eq!(instance.memory_mib, 40_960);
        }
    }
}
