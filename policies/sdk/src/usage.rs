//! What each namespace holds, counted from the snapshot's running pods: the
//! shape fair-share policies weigh tenants by.

use wasmgpu_contract::Snapshot;

/// GPUs currently held by one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// The namespace.
    pub namespace: String,
    /// Whole GPUs held exclusively by its pods.
    pub exclusive_gpus: u32,
    /// Memory held through shared GPUs, in MiB.
    pub shared_mib: u64,
    /// MIG instances held by its pods.
    pub mig_instances: u32,
}

/// The usage of each namespace with running pods, sorted by namespace.
///
/// ```
/// use wasmgpu_policy_sdk::testing::{node, running, snapshot};
/// use wasmgpu_policy_sdk::usage;
///
/// let mut snap = snapshot(vec![node("a", 4, "NVIDIA L4", 23034)], vec![]);
/// running(&mut snap, "ml/train", 0, 0, &[0, 1], 0);
/// let held = usage(&snap);
/// assert_eq!((held[0].namespace.as_str(), held[0].exclusive_gpus), ("ml", 2));
/// ```
pub fn usage(snapshot: &Snapshot) -> Vec<Usage> {
    let mut by_namespace: Vec<Usage> = snapshot
        .namespaces
        .iter()
        .map(|ns| Usage {
            namespace: ns.clone(),
            ..Usage::default()
        })
        .collect();
    for pod in &snapshot.running {
        let Some(usage) = by_namespace.get_mut(pod.namespace as usize) else {
            continue;
        };
        let node = snapshot.nodes.get(pod.node as usize);
        for &g in &pod.gpus {
            let mig = node
                .and_then(|n| n.gpus.get(g as usize))
                .is_some_and(|gpu| gpu.mig.is_some());
            if pod.shared_mib > 0 {
                usage.shared_mib = usage.shared_mib.saturating_add(pod.shared_mib);
            } else if mig {
                usage.mig_instances = usage.mig_instances.saturating_add(1);
            } else {
                usage.exclusive_gpus = usage.exclusive_gpus.saturating_add(1);
            }
        }
    }
    by_namespace.retain(|u| u.exclusive_gpus + u.mig_instances > 0 || u.shared_mib > 0);
    by_namespace.sort_by(|a, b| a.namespace.cmp(&b.namespace));
    by_namespace
}
