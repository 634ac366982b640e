//! The running pods per node, for preemption: one flat list cut per node,
//! and each node's lowest priority, so that preemption by priority passes
//! over nodes where it could evict nothing.

use wasmgpu_contract::Snapshot;

/// Per node, the positions in `snapshot.running` of the pods there (one
/// flat list cut at `start`: two allocations, not one per node) and the
/// lowest priority among them, so that preemption by priority passes over
/// nodes with nothing it may evict without looking at their pods.
#[derive(Clone, Debug)]
pub(super) struct RunningOn {
    /// Node `n`'s pods are `pods[start[n]..start[n + 1]]`.
    start: Vec<u32>,
    pods: Vec<u32>,
    /// `i32::MAX` on a node where nothing runs.
    lowest_priority: Vec<i32>,
    /// The lowest over all nodes.
    pub(super) lowest_anywhere: i32,
}

impl RunningOn {
    pub(super) fn new(snapshot: &Snapshot) -> Self {
        let nodes = snapshot.nodes.len();
        let mut start = vec![0u32; nodes + 1];
        let mut lowest_priority = vec![i32::MAX; nodes];
        for pod in &snapshot.running {
            let n = pod.node as usize;
            if n < nodes {
                start[n + 1] += 1;
                lowest_priority[n] = lowest_priority[n].min(pod.priority);
            }
        }
        for n in 0..nodes {
            start[n + 1] += start[n];
        }
        let mut next = start.clone();
        let mut pods = vec![0u32; start[nodes] as usize];
        for (r, pod) in snapshot.running.iter().enumerate() {
            let n = pod.node as usize;
            if n < nodes {
                pods[next[n] as usize] = r as u32;
                next[n] += 1;
            }
        }
        let lowest_anywhere = lowest_priority.iter().copied().min().unwrap_or(i32::MAX);
        RunningOn {
            start,
            pods,
            lowest_priority,
            lowest_anywhere,
        }
    }

    /// The running pods on `node` (none for a node out of range).
    pub(super) fn on(&self, node: u32) -> &[u32] {
        let n = node as usize;
        match (self.start.get(n), self.start.get(n + 1)) {
            (Some(&from), Some(&to)) => &self.pods[from as usize..to as usize],
            _ => &[],
        }
    }

    /// Whether a pod of priority below `priority` runs on `node`.
    pub(super) fn lower_than(&self, node: u32, priority: i32) -> bool {
        self.lowest_priority
            .get(node as usize)
            .is_some_and(|&p| p < priority)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, running, snapshot};

    #[test]
    fn pods_are_listed_per_node_with_each_nodes_lowest_priority() {
        let h100 = |name| node(name, 2, "NVIDIA H100 80GB HBM3", 81559);
        let mut snap = snapshot(vec![h100("a"), h100("b"), h100("c")], Vec::new());
        running(&mut snap, "ml/c0", 500, 2, &[0], 0);
        running(&mut snap, "ml/a0", 100, 0, &[0], 0);
        running(&mut snap, "ml/c1", 300, 2, &[1], 0);
        let on = RunningOn::new(&snap);
        assert_eq!(on.on(0), [1]);
        assert!(on.on(1).is_empty());
        assert_eq!(on.on(2), [0, 2]);
        assert!(on.on(7).is_empty(), "a node out of range has none");
        assert!(on.lower_than(0, 101) && !on.lower_than(0, 100));
        assert!(!on.lower_than(1, i32::MAX), "nothing runs on b");
        assert!(on.lower_than(2, 301) && !on.lower_than(2, 300));
        assert_eq!(on.lowest_anywhere, 100);
    }
}
