//! # binpack
//!
//! Fills the fullest node that still fits, so pods land on as few nodes as
//! possible and whole nodes stay free for large jobs. Within a node, a
//! multi-GPU exclusive request takes the smallest NVLink group that holds it;
//! a shared request takes the GPUs with the least free memory that fits.
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
/// the fullest eligible node that fits.
pub fn allocate(snapshot: &Snapshot) -> Vec<Decision> {
    place_each(snapshot, Fit::Tightest)
}

/// The binpack policy.
pub struct Binpack;

impl Policy for Binpack {
    fn describe() -> Info {
        info(
            "binpack",
            env!("CARGO_PKG_VERSION"),
            "Fill the fullest node that fits first; fewest nodes touched",
        )
    }

    fn allocate(snapshot: Snapshot) -> Vec<Decision> {
        allocate(&snapshot)
    }
}

wasmgpu_policy_sdk::export_policy!(Binpack);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgpu_policy_sdk::Sharing::{Exclusive, Shared};
    use wasmgpu_policy_sdk::testing::{
        assigned, decision_for, node, request, restrict, snapshot, with_full_nvlink, with_nvlink,
    };

    #[test]
    fn packs_onto_the_fullest_node_that_fits() {
        let mut busy = node("busy", 4, "NVIDIA H100", 81920);
        busy.gpus[0].held = true;
        let snap = snapshot(
            vec![node("idle", 4, "NVIDIA H100", 81920), busy],
            vec![
                request("ns/a", 2, Exclusive, 0),
                request("ns/b", 1, Exclusive, 0),
                request("ns/c", 2, Exclusive, 0),
            ],
        );
        let got = assigned(&snap, &allocate(&snap));
        // a → busy (3 free), b → busy (1 free: exact fit), c → idle.
        assert_eq!(got[0].1, "busy");
        assert_eq!(got[1].1, "busy");
        assert_eq!(got[2].1, "idle");
        let mut all: Vec<&String> = got.iter().flat_map(|g| &g.2).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 5, "no GPU handed out twice");
    }

    #[test]
    fn waits_when_full_and_rejects_what_never_fits() {
        let snap = snapshot(
            vec![node("a", 2, "NVIDIA A100-SXM4-40GB", 40960)],
            vec![
                request("ns/first", 2, Exclusive, 0),
                request("ns/second", 1, Exclusive, 0),
                request("ns/huge", 4, Exclusive, 0),
            ],
        );
        let decisions = allocate(&snap);
        let of = |pod: &str| decision_for(&snap, &decisions, pod).unwrap();
        assert!(matches!(of("ns/first"), Decision::Assign(_)));
        assert!(
            matches!(of("ns/second"), Decision::Wait(d) if d.reason.contains("free right now"))
        );
        assert!(
            matches!(of("ns/huge"), Decision::Reject(d) if d.reason.contains("even when idle"))
        );
    }

    #[test]
    fn a_pod_of_higher_priority_preempts_the_fewest_lower_ones_unless_told_not_to() {
        // 8 GPUs held by 8 pods of priority 100; a pod of 1000 asks for 4.
        let mut snap = snapshot(
            vec![node("a", 8, "NVIDIA H100", 81920)],
            vec![request("ml/urgent", 4, Exclusive, 0)],
        );
        snap.pending[0].priority = 1000;
        wasmgpu_policy_sdk::testing::running_on_each_gpu(&mut snap, 0, "batch/p", 100);
        let decisions = allocate(&snap);
        let Decision::Preempt(p) = &decisions[0] else {
            panic!("{decisions:?}");
        };
        assert_eq!(p.victims.len(), 4);
        let verdict = wasmgpu_policy_sdk::testing::validate(&snap, &decisions);
        assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
        assert_eq!(verdict.preempting.len(), 1);
        // Equal priority: nobody goes.
        snap.pending[0].priority = 100;
        assert!(matches!(allocate(&snap)[0], Decision::Wait(_)));
        // Turned off in the config: it waits.
        snap.pending[0].priority = 1000;
        snap.config = r#"{"preemption": false}"#.into();
        assert!(matches!(allocate(&snap)[0], Decision::Wait(_)));
    }

    #[test]
    fn shared_requests_stack_on_the_fullest_gpu() {
        let snap = snapshot(
            vec![node("a", 2, "NVIDIA L4", 24000)],
            vec![
                request("ns/s1", 1, Shared, 8000),
                request("ns/s2", 1, Shared, 8000),
                request("ns/s3", 1, Shared, 8000),
            ],
        );
        let got = assigned(&snap, &allocate(&snap));
        assert_eq!(got.len(), 3);
        assert!(
            got.iter().all(|g| g.2 == vec!["GPU-a-0".to_string()]),
            "{got:?}"
        );
    }

    #[test]
    fn honours_eligible_nodes_and_nvlink_config() {
        // n1's only NVLink pair is GPUs 2 and 3; the pod may run on n1 only,
        // though n0 (all GPUs linked) is the fullest-fit candidate otherwise.
        let mut n1 = node("n1", 4, "NVIDIA H100", 81920);
        n1.gpus[2].nvlink = 1 << 3;
        n1.gpus[3].nvlink = 1 << 2;
        let mut snap = snapshot(
            vec![with_full_nvlink(node("n0", 8, "NVIDIA H100", 81920)), n1],
            vec![request("ns/p", 2, Exclusive, 0)],
        );
        restrict(&mut snap, 0, &[1]);
        let pair = |a: u32, b: u32| vec![format!("GPU-n1-{a}"), format!("GPU-n1-{b}")];
        let got = assigned(&snap, &allocate(&snap));
        assert_eq!((got[0].1.as_str(), &got[0].2), ("n1", &pair(2, 3)));
        // Without the preference, the first free GPUs do.
        snap.config = r#"{"preferNvlink": false}"#.into();
        let got = assigned(&snap, &allocate(&snap));
        assert_eq!((got[0].1.as_str(), &got[0].2), ("n1", &pair(0, 1)));
    }

    #[test]
    fn nvlink_require_takes_mutual_peers_or_waits() {
        // n0 is the fullest fit for three GPUs but its only links are the
        // pairs 0-1 and 2-3: "prefer" takes three of its GPUs anyway,
        // "require" goes to n1, whose GPUs are all peers.
        let n0 = with_nvlink(node("n0", 4, "NVIDIA H100", 81920), &[(0, 1), (2, 3)]);
        let mut snap = snapshot(
            vec![n0, with_full_nvlink(node("n1", 8, "NVIDIA H100", 81920))],
            vec![request("ns/p", 3, Exclusive, 0)],
        );
        let got = assigned(&snap, &allocate(&snap));
        assert_eq!(got[0].1, "n0");
        snap.config = r#"{"nvlink": "require"}"#.into();
        let got = assigned(&snap, &allocate(&snap));
        assert_eq!(got[0].1, "n1");
        // With n1 busy, the pod waits and says why.
        for gpu in &mut snap.nodes[1].gpus[..6] {
            gpu.held = true;
        }
        let decisions = allocate(&snap);
        assert!(
            matches!(&decisions[0], Decision::Wait(d) if d.reason.contains("all NVLink peers of one another free right now")),
            "{decisions:?}"
        );
    }

    #[test]
    #[should_panic(expected = "preferNVLink")]
    fn a_bad_config_fails_the_round() {
        let mut snap = snapshot(vec![], vec![]);
        snap.config = r#"{"preferNVLink": false}"#.into();
        allocate(&snap);
    }

    #[test]
    fn packs_dra_pods_onto_the_fullest_node_and_never_shares_their_devices() {
        use wasmgpu_policy_sdk::testing::{candidate_set, claim, dra_request, validate};
        let mut busy = node("busy", 4, "NVIDIA H100", 81920);
        busy.gpus[0].held = true;
        let mut snap = snapshot(
            vec![node("idle", 4, "NVIDIA H100", 81920), busy],
            vec![request("ns/gpu", 1, Exclusive, 0)],
        );
        let every = candidate_set(&mut snap, (0..2).flat_map(|n| (0..4).map(move |g| (n, g))));
        for pod in ["ns/a", "ns/b"] {
            let mut r = dra_request(pod, vec![claim(pod, &[("gpus", 2, every)])]);
            r.priority = 1;
            snap.pending.push(r);
        }
        let decisions = allocate(&snap);
        let verdict = validate(&snap, &decisions);
        assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
        let placed: Vec<(&str, &str, usize)> = verdict
            .accepted
            .iter()
            .map(|p| (p.pod.as_str(), p.node.as_str(), p.gpus.len()))
            .collect();
        // a → busy (3 free, 1 left), b → idle, the GPU pod → busy's last.
        assert_eq!(
            placed,
            [
                ("ns/a", "busy", 2),
                ("ns/b", "idle", 2),
                ("ns/gpu", "busy", 1)
            ]
        );
    }

    /// The controller's validator accepts every decision of a large round,
    /// whatever the NVLink mode, with a gang among the requests.
    #[test]
    fn the_host_refuses_nothing_on_a_large_round() {
        wasmgpu_policy_sdk::testing::assert_host_accepts_a_large_round(allocate);
    }
}
