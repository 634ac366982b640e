//! A DRA driver's pools, by the consumer rules of `resource.k8s.io/v1`: per
//! (driver, pool) only the slices of the highest `generation` count; the
//! pool is incomplete (and unusable) until that generation has
//! `resourceSliceCount` slices; a device name repeated within the pool
//! makes the whole pool invalid.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::resource::v1::{Device, ResourceSliceSpec};

use super::quantity;

/// A pool: one driver's name for a set of devices (NVIDIA's driver: one per
/// node, named after it).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct PoolKey {
    pub driver: String,
    pub pool: String,
}

impl fmt::Display for PoolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pool {:?} of driver {}", self.pool, self.driver)
    }
}

/// A device as a claim allocation names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct DeviceId {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// Why a pool's devices are not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolProblem {
    /// Fewer slices of the newest generation than `resourceSliceCount`.
    Incomplete {
        /// The newest generation.
        generation: i64,
        /// Its slices seen.
        have: usize,
        /// `resourceSliceCount`.
        want: i64,
    },
    /// Two devices of the newest generation share a name.
    DuplicateDevice {
        /// The name.
        device: String,
    },
}

impl fmt::Display for PoolProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Incomplete {
                generation,
                have,
                want,
            } => write!(
                f,
                "incomplete: generation {generation} has {have} of its resourceSliceCount {want} slices; its devices are not used until the driver has published them all"
            ),
            Self::DuplicateDevice { device } => write!(
                f,
                "invalid: device name {device:?} appears twice in its newest generation; none of the pool's devices is used until the driver fixes it"
            ),
        }
    }
}

/// A device of a usable pool, with the node it is on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PoolDevice {
    /// Its node: the slice's `nodeName`, or the device's own under
    /// `perDeviceNodeSelection`; none for devices every node (or a node
    /// selector) reaches, which are not node-local GPUs.
    pub node: Option<String>,
    pub device: Device,
}

/// A usable pool: its newest generation's devices and counter sets.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Pool {
    pub generation: i64,
    pub devices: Vec<PoolDevice>,
    /// Counter set name → counter name → value.
    pub counter_sets: BTreeMap<String, BTreeMap<String, u128>>,
}

/// The pool the given slices (all of one driver and pool name) make.
pub(crate) fn pool_of<'a>(
    slices: impl IntoIterator<Item = &'a ResourceSliceSpec>,
) -> Result<Pool, PoolProblem> {
    let slices: Vec<&ResourceSliceSpec> = slices.into_iter().collect();
    let generation = slices.iter().map(|s| s.pool.generation).max().unwrap_or(0);
    let newest: Vec<&ResourceSliceSpec> = slices
        .into_iter()
        .filter(|s| s.pool.generation == generation)
        .collect();
    let want = newest
        .iter()
        .map(|s| s.pool.resource_slice_count)
        .max()
        .unwrap_or(0);
    if i64::try_from(newest.len()).unwrap_or(i64::MAX) < want || newest.is_empty() {
        return Err(PoolProblem::Incomplete {
            generation,
            have: newest.len(),
            want,
        });
    }
    let mut pool = Pool {
        generation,
        ..Pool::default()
    };
    let mut names = BTreeSet::new();
    for slice in newest {
        for set in slice.shared_counters.iter().flatten() {
            let counters = set
                .counters
                .iter()
                .filter_map(|(name, c)| Some((name.clone(), quantity::parse(&c.value.0)?)))
                .collect();
            pool.counter_sets.insert(set.name.clone(), counters);
        }
        for device in slice.devices.iter().flatten() {
            if !names.insert(device.name.as_str()) {
                return Err(PoolProblem::DuplicateDevice {
                    device: device.name.clone(),
                });
            }
            let node = if slice.per_device_node_selection == Some(true) {
                device.node_name.clone()
            } else {
                slice.node_name.clone()
            };
            pool.devices.push(PoolDevice {
                node,
                device: device.clone(),
            });
        }
    }
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::tests::{device, slice};

    #[test]
    fn only_the_newest_complete_generation_counts() {
        let old = slice("gpu.nvidia.com", "node-a", 1, 1, vec![device("gpu-0")]);
        let new_a = slice("gpu.nvidia.com", "node-a", 2, 2, vec![device("gpu-1")]);
        let new_b = slice("gpu.nvidia.com", "node-a", 2, 2, vec![device("gpu-2")]);

        let half = pool_of([&old.spec, &new_a.spec]);
        assert_eq!(
            half,
            Err(PoolProblem::Incomplete {
                generation: 2,
                have: 1,
                want: 2
            }),
            "an older complete generation does not stand in for a newer incomplete one"
        );

        let pool = pool_of([&old.spec, &new_a.spec, &new_b.spec]).unwrap();
        assert_eq!(pool.generation, 2);
        let names: Vec<&str> = pool
            .devices
            .iter()
            .map(|d| d.device.name.as_str())
            .collect();
        assert_eq!(names, ["gpu-1", "gpu-2"]);
        assert!(
            pool.devices
                .iter()
                .all(|d| d.node.as_deref() == Some("node-a"))
        );
    }

    #[test]
    fn a_repeated_device_name_invalidates_the_pool() {
        let a = slice("gpu.nvidia.com", "node-a", 1, 2, vec![device("gpu-0")]);
        let b = slice("gpu.nvidia.com", "node-a", 1, 2, vec![device("gpu-0")]);
        let problem = pool_of([&a.spec, &b.spec]).unwrap_err();
        assert_eq!(
            problem,
            PoolProblem::DuplicateDevice {
                device: "gpu-0".into()
            }
        );
        assert!(problem.to_string().contains("\"gpu-0\" appears twice"));
    }

    #[test]
    fn counter_sets_are_read_from_their_own_slice() {
        let mut counters = slice("gpu.nvidia.com", "node-a", 1, 2, vec![]);
        counters.spec.shared_counters = Some(vec![crate::dra::tests::counter_set(
            "gpu-0-counter-set",
            &[("memory", "80Gi"), ("multiprocessors", "132")],
        )]);
        let devices = slice("gpu.nvidia.com", "node-a", 1, 2, vec![device("gpu-0")]);
        let pool = pool_of([&counters.spec, &devices.spec]).unwrap();
        assert_eq!(pool.counter_sets["gpu-0-counter-set"]["memory"], 80 << 30);
        assert_eq!(
            pool.counter_sets["gpu-0-counter-set"]["multiprocessors"],
            132
        );
    }
}
