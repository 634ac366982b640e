//! The snapshot as the host holds it: the policy's [`Snapshot`] plus what
//! stays on the host, per node: every label, and each GPU's UUID.
//!
//! ```text
//!   HostSnapshot ── snapshot: Snapshot ─────────── what a policy is given
//!              └── nodes[n]: HostNode { labels, uuids, counters }   (by node position)
//!                        │
//!   for_policy(label-keys) fills snapshot.label-keys and node.labels with
//!   the values of the keys the policy asked for, and nothing else
//! ```
//!
//! Snapshot files hold a `HostSnapshot` ([`crate::snapshot_file`]), so a
//! file exported from a cluster can be tried with any policy.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::types::{Node, Snapshot};

/// A snapshot with every label and UUID the host knows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostSnapshot {
    /// What a policy is given (its labels are those of the last
    /// [`HostSnapshot::for_policy`]).
    pub snapshot: Snapshot,
    /// What stays on the host, by position in `snapshot.nodes`.
    pub nodes: Vec<HostNode>,
    /// The GPUResource (`namespace/name`) of each pending request, by
    /// position in `snapshot.pending`; none for a DRA pod, and none in a
    /// snapshot read from a file.
    pub resources: Vec<Option<String>>,
}

/// What the host keeps of a node beyond what a policy sees. Labels and
/// UUIDs change only with the node and its inventory: they are shared
/// with the index that keeps them, not copied each round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostNode {
    /// Every label of the node.
    pub labels: Arc<BTreeMap<String, String>>,
    /// The UUID of each entry of the node's `gpus`, by position (`GPU-…`
    /// for a whole GPU, `MIG-…` for a MIG instance).
    pub uuids: Arc<[String]>,
    /// The DRA shared counters of the node's partitionable devices.
    pub counters: SharedCounters,
}

/// A node's DRA shared counters (`sharedCounters` / `consumesCounters`):
/// what is left of each counter once the devices in use consumed theirs,
/// and what each GPU position consumes. Devices whose consumption
/// overlaps (dynamic MIG placements of one GPU, a GPU and its placements)
/// cannot be held together: the validator refuses a decision that would
/// take a counter below zero, counting the round's earlier decisions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedCounters {
    /// Each counter, named `<driver>/<pool>/<counterSet>/<counter>`, and
    /// what is left of it.
    pub left: Vec<(String, u64)>,
    /// By GPU position (as `uuids`; shorter when the last GPUs consume
    /// nothing): (position in `left`, amount) for each counter it consumes.
    pub consumes: Vec<Vec<(u32, u64)>>,
}

impl SharedCounters {
    /// What the GPU at position `gpu` consumes.
    pub fn of(&self, gpu: u32) -> &[(u32, u64)] {
        self.consumes.get(gpu as usize).map_or(&[], Vec::as_slice)
    }
}

impl HostSnapshot {
    /// A host snapshot of a policy's snapshot: for tests and snapshots built
    /// by hand. Each node's labels are the values it has for the snapshot's
    /// label keys; UUIDs are made up from the node and the GPU's index
    /// (`GPU-{node}-{index}`, and `MIG-GPU-{node}-{index}-{k}` for the k-th
    /// MIG instance of a GPU).
    pub fn from_snapshot(snapshot: Snapshot) -> HostSnapshot {
        let nodes = snapshot
            .nodes
            .iter()
            .map(|node| HostNode {
                labels: Arc::new(
                    snapshot
                        .label_keys
                        .iter()
                        .zip(&node.labels)
                        .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
                        .collect(),
                ),
                uuids: (0..node.gpus.len() as u32)
                    .map(|g| made_up_uuid(node, g).unwrap_or_default())
                    .collect(),
                counters: SharedCounters::default(),
            })
            .collect();
        HostSnapshot {
            snapshot,
            nodes,
            resources: Vec::new(),
        }
    }

    /// The snapshot for a policy that reads `label_keys`: each node carries
    /// its value for each key, by position, and no other label.
    pub fn for_policy(&mut self, label_keys: &[String]) -> &Snapshot {
        if self.snapshot.label_keys != label_keys
            || self
                .snapshot
                .nodes
                .iter()
                .any(|n| n.labels.len() != label_keys.len())
        {
            self.snapshot.label_keys = label_keys.to_vec();
            for (node, host) in self.snapshot.nodes.iter_mut().zip(&self.nodes) {
                node.labels = label_keys
                    .iter()
                    .map(|key| host.labels.get(key).cloned())
                    .collect();
            }
        }
        &self.snapshot
    }

    /// The UUID of the GPU at position `gpu` of the node at position
    /// `node`, if both exist.
    pub fn uuid(&self, node: u32, gpu: u32) -> Option<&str> {
        self.nodes
            .get(node as usize)?
            .uuids
            .get(gpu as usize)
            .map(String::as_str)
    }

    /// The GPUResource of the pending request at position `pod`, if known.
    pub fn resource(&self, pod: usize) -> Option<&str> {
        self.resources.get(pod)?.as_deref()
    }

    /// The node's name at position `node`.
    pub fn node_name(&self, node: u32) -> Option<&str> {
        self.snapshot
            .nodes
            .get(node as usize)
            .map(|n| n.name.as_str())
    }
}

/// The UUID [`HostSnapshot::from_snapshot`] makes up for the GPU at
/// position `gpu` of `node`.
pub(crate) fn made_up_uuid(node: &Node, gpu: u32) -> Option<String> {
    let entry = node.gpus.get(gpu as usize)?;
    let whole = format!("GPU-{}-{}", node.name, entry.index);
    Some(match entry.mig {
        None => whole,
        Some(mig) => {
            let k = node.gpus[..gpu as usize]
                .iter()
                .filter(|g| g.mig.is_some_and(|m| m.parent == mig.parent))
                .count();
            format!("MIG-{whole}-{k}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, snapshot, with_mig};

    #[test]
    fn a_policy_gets_the_values_of_the_keys_it_asked_for_by_position() {
        let mut host = HostSnapshot::from_snapshot(snapshot(
            vec![
                node("a", 1, "NVIDIA L4", 23034),
                with_mig(
                    node("b", 2, "NVIDIA A100", 40960),
                    0,
                    &[("1g.5gb", 4864); 2],
                ),
            ],
            vec![],
        ));
        host.nodes[0].labels = Arc::new(
            [("zone", "z1"), ("rack", "r1")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into(),
        );
        host.nodes[1].labels = Arc::new([("zone".to_owned(), "z2".to_owned())].into());
        let keys = vec!["zone".to_owned(), "rack".to_owned()];
        let snap = host.for_policy(&keys);
        assert_eq!(snap.label_keys, keys);
        assert_eq!(snap.nodes[0].labels, [Some("z1".into()), Some("r1".into())]);
        assert_eq!(snap.nodes[1].labels, [Some("z2".into()), None]);
        assert!(
            host.for_policy(&[])
                .nodes
                .iter()
                .all(|n| n.labels.is_empty())
        );
        assert_eq!(host.uuid(1, 0), Some("GPU-b-0"));
        assert_eq!(host.uuid(1, 2), Some("MIG-GPU-b-0-1"));
        assert_eq!(host.uuid(1, 3), Some("GPU-b-1"));
        assert_eq!(host.uuid(1, 4), None);
    }
}
