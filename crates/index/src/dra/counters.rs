//! Shared counters of partitionable devices (`sharedCounters` in a pool,
//! `consumesCounters` on its devices): NVIDIA's dynamic MIG publishes a GPU
//! and every placement that can be cut from it, each consuming memory
//! slices of the GPU's counter set. Placements that share a slice overlap:
//! whatever the allocation, a counter never goes below zero.
//!
//! ```text
//!  device ─ consumes ─▶ counter (<driver>/<pool>/<set>/<name>) ◀─ value in the pool
//!  left(counter) = value − Σ consumed by the devices in use
//!  a free device is blocked when it consumes more of a counter than is left
//! ```

use std::collections::{BTreeMap, HashMap};

use wasmgpu_contract::SharedCounters;

use super::device::Consumption;

/// A node's shared counters: each one's value, and what each device
/// consumes.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NodeCounters {
    /// Counter → its value.
    pub capacity: BTreeMap<String, u64>,
    /// UUID → (counter, amount) for each counter the device consumes.
    pub uuid_to_consumes: HashMap<String, Vec<(String, u64)>>,
}

impl NodeCounters {
    /// Records what the device `uuid` consumes.
    pub fn add(&mut self, uuid: &str, consumes: &[Consumption]) {
        if consumes.is_empty() {
            return;
        }
        for c in consumes {
            self.capacity.insert(c.counter.clone(), c.capacity);
        }
        self.uuid_to_consumes.insert(
            uuid.to_owned(),
            consumes
                .iter()
                .map(|c| (c.counter.clone(), c.amount))
                .collect(),
        );
    }

    /// The counters as a snapshot carries them for a node whose entries
    /// are `uuids` (by position), those `in_use` having consumed theirs;
    /// and, by position, whether a device not in use is blocked (it
    /// consumes more of some counter than is left).
    pub fn for_snapshot(
        &self,
        uuids: &[String],
        in_use: impl Fn(&str) -> bool,
    ) -> (SharedCounters, Vec<bool>) {
        if self.capacity.is_empty() {
            return (SharedCounters::default(), vec![false; uuids.len()]);
        }
        let names: Vec<&String> = self.capacity.keys().collect();
        let mut left: Vec<u64> = self.capacity.values().copied().collect();
        let position = |counter: &str| names.binary_search_by(|n| n.as_str().cmp(counter)).ok();
        let consumes: Vec<Vec<(u32, u64)>> = uuids
            .iter()
            .map(|uuid| {
                self.uuid_to_consumes
                    .get(uuid)
                    .into_iter()
                    .flatten()
                    .filter_map(|(counter, amount)| Some((position(counter)? as u32, *amount)))
                    .collect()
            })
            .collect();
        for (uuid, uses) in uuids.iter().zip(&consumes) {
            if in_use(uuid) {
                for &(c, amount) in uses {
                    left[c as usize] = left[c as usize].saturating_sub(amount);
                }
            }
        }
        let blocked = uuids
            .iter()
            .zip(&consumes)
            .map(|(uuid, uses)| {
                !in_use(uuid) && uses.iter().any(|&(c, amount)| amount > left[c as usize])
            })
            .collect();
        let counters = SharedCounters {
            left: names.into_iter().cloned().zip(left).collect(),
            consumes,
        };
        (counters, blocked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uses(counter: &str, amount: u64, capacity: u64) -> Consumption {
        Consumption {
            counter: counter.into(),
            amount,
            capacity,
        }
    }

    /// An A100 cut as NVIDIA publishes it: the whole GPU consumes both
    /// memory slices, each half placement one of them, and a placement
    /// spanning both overlaps each half.
    fn a100() -> NodeCounters {
        let mut counters = NodeCounters::default();
        counters.add("GPU-0", &[uses("s/0", 1, 1), uses("s/1", 1, 1)]);
        counters.add("MIG-lo", &[uses("s/0", 1, 1)]);
        counters.add("MIG-hi", &[uses("s/1", 1, 1)]);
        counters.add("MIG-both", &[uses("s/0", 1, 1), uses("s/1", 1, 1)]);
        counters
    }

    fn uuids() -> Vec<String> {
        ["GPU-0", "MIG-lo", "MIG-hi", "MIG-both", "GPU-1"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn a_placement_in_use_blocks_those_it_overlaps_and_no_other() {
        let (counters, blocked) = a100().for_snapshot(&uuids(), |u| u == "MIG-lo");
        assert_eq!(blocked, [true, false, false, true, false]);
        assert_eq!(
            counters.left,
            [("s/0".to_string(), 0), ("s/1".to_string(), 1)]
        );
        assert_eq!(counters.of(3), [(0, 1), (1, 1)]);
        assert!(counters.of(4).is_empty(), "a GPU consuming nothing");
    }

    #[test]
    fn nothing_in_use_blocks_nothing_and_no_counters_is_no_record() {
        let (_, blocked) = a100().for_snapshot(&uuids(), |_| false);
        assert!(blocked.iter().all(|b| !b));
        let (counters, blocked) = NodeCounters::default().for_snapshot(&uuids(), |_| true);
        assert_eq!(counters, SharedCounters::default());
        assert_eq!(blocked.len(), 5);
    }
}
