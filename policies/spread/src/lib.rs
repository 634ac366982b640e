//! # spread
//!
//! Places each pod on the least-loaded node that fits, so load and heat are
//! spread evenly and a node failure hits as few pods as possible. Within a
//! node, a multi-GPU exclusive request takes the largest NVLink group that
//! holds it; a shared request takes the GPUs with the most free memory.
//!
//! Parameters (`config.json`, all optional):
//!
//! ```json
//! { "nvlink": "prefer", "preemption": true }
//! ```
//!
//! `nvlink`: `"prefer"` (the default) keeps a multi-GPU exclusive request in
//! one NVLink group (GPUs connected by NVLink, directly or through others)
//! when a node has one that holds it, else takes any free GPUs of the node;
//! `"require"` gives it only GPUs that are all NVLink peers of one another,
//! on the node that has such a set free, and leaves it waiting otherwise;
//! `"ignore"` disregards NVLink. The older `"preferNvlink": true | false`
//! still reads as `"prefer"` | `"ignore"`.
//!
//! `preemption` (default `true`): a pod that fits nowhere now evicts the
//! fewest pods of lower priority that make room (lowest priority first,
//! then youngest), as kube-scheduler does; `false` leaves it waiting.
#![forbid(unsafe_code)]

use wasmgpu_policy_sdk::{Decision, Fit, Info, Policy, Snapshot, info, place_each};

/// Decides one round (the algorithm, callable natively): every request goes to
/// the least-loaded eligible node that fits.
pub fn allocate(snapshot: &Snapshot) -> Vec<Decision> {
    place_each(snapshot, Fit::Loosest)
}

/// The spread policy.
pub struct Spread;

impl Policy for Spread {
    fn describe() -> Info {
        info(
            "spread",
            env!("CARGO_PKG_VERSION"),
            "Least-loaded node first; spreads pods across nodes and GPUs",
        )
    }

    fn allocate(snapshot: Snapshot) -> Vec<Decision> {
        allocate(&snapshot)
    }
}

wasmgpu_policy_sdk::export_policy!(Spread);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgpu_policy_sdk::Sharing::{Exclusive, Shared};
    use wasmgpu_policy_sdk::testing::{assigned, node, request, snapshot};

    fn nodes_of(snap: &Snapshot) -> Vec<String> {
        let decisions = allocate(snap);
        let placed = assigned(snap, &decisions);
        assert_eq!(
            placed.len(),
            decisions.len(),
            "not all placed: {decisions:?}"
        );
        placed.into_iter().map(|(_, node, _)| node).collect()
    }

    #[test]
    fn spreads_across_nodes() {
        let snap = snapshot(
            vec![
                node("a", 4, "NVIDIA H100", 81920),
                node("b", 4, "NVIDIA H100", 81920),
                node("c", 4, "NVIDIA H100", 81920),
            ],
            (0..6)
                .map(|i| request(&format!("ns/p{i}"), 1, Exclusive, 0))
                .collect(),
        );
        assert_eq!(nodes_of(&snap), ["a", "b", "c", "a", "b", "c"]);
    }

    #[test]
    fn prefers_the_least_loaded_node() {
        let mut busy = node("busy", 4, "NVIDIA H100", 81920);
        busy.gpus[0].held = true;
        let snap = snapshot(
            vec![busy, node("idle", 4, "NVIDIA H100", 81920)],
            vec![request("ns/p", 2, Exclusive, 0)],
        );
        assert_eq!(nodes_of(&snap), ["idle"]);
    }

    #[test]
    fn shared_requests_take_the_emptiest_gpu() {
        let snap = snapshot(
            vec![node("a", 2, "NVIDIA L4", 24000)],
            vec![
                request("ns/s1", 1, Shared, 8000),
                request("ns/s2", 1, Shared, 8000),
            ],
        );
        let gpus: Vec<Vec<String>> = assigned(&snap, &allocate(&snap))
            .into_iter()
            .map(|(_, _, gpus)| gpus)
            .collect();
        assert_eq!(
            gpus,
            [vec!["GPU-a-0".to_string()], vec!["GPU-a-1".to_string()]]
        );
    }

    #[test]
    fn never_assigns_a_gpu_twice_in_a_round() {
        let snap = snapshot(
            vec![node("a", 2, "NVIDIA H100", 81920)],
            (0..3)
                .map(|i| request(&format!("ns/p{i}"), 1, Exclusive, 0))
                .collect(),
        );
        let decisions = allocate(&snap);
        assert!(matches!(decisions[2], Decision::Wait(_)), "{decisions:?}");
    }

    #[test]
    fn spreads_dra_pods_across_nodes() {
        use wasmgpu_policy_sdk::testing::{candidate_set, claim, dra_request, validate};
        let mut snap = snapshot(
            vec![
                node("a", 4, "NVIDIA H100", 81920),
                node("b", 4, "NVIDIA H100", 81920),
            ],
            vec![],
        );
        let every = candidate_set(&mut snap, (0..2).flat_map(|n| (0..4).map(move |g| (n, g))));
        for i in 0..3 {
            let pod = format!("ns/p{i}");
            snap.pending
                .push(dra_request(&pod, vec![claim(&pod, &[("gpus", 1, every)])]));
            snap.pending[i].created_ms = i as u64;
        }
        let decisions = allocate(&snap);
        let verdict = validate(&snap, &decisions);
        assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
        let nodes: Vec<&str> = verdict.accepted.iter().map(|p| p.node.as_str()).collect();
        assert_eq!(nodes, ["a", "b", "a"]);
    }

    /// The controller's validator accepts every decision of a large round,
    /// whatever the NVLink mode, with a gang among the requests.
    #[test]
    fn the_host_refuses_nothing_on_a_large_round() {
        wasmgpu_policy_sdk::testing::assert_host_accepts_a_large_round(allocate);
    }
}
