//! The cluster view on small snapshots: shapes, MIG, sharing, NVLink,
//! eligibility, the order of placement.

use super::nodes::UnionFind;
use super::*;
use crate::nvlink::Nvlink;
use crate::shape_of;
use crate::testing::{node, request, restrict, shape, snapshot};
use wasmgpu_contract::{Decision, Request, Sharing, Snapshot, assign, glob_match, reject, wait};

#[test]
fn a_mig_request_takes_only_instances_with_the_memory_asked_for() {
    // memoryMiB with a MIG profile is each instance's own memory.
    let n = crate::testing::with_mig(
        node("a", 1, "NVIDIA A100 80GB PCIe", 81920),
        0,
        &[("1g.10gb", 9856), ("1g.10gb", 12000)],
    );
    let mut wants = request("ns/m", 1, Sharing::Exclusive, 10000);
    shape(&mut wants).mig_profile = Some("1g.10gb".into());
    let snap = snapshot(vec![n], vec![wants]);
    let cluster = Cluster::new(&snap);
    let want = cluster.want(&snap.pending[0]);
    assert_eq!(
        cluster.pick_gpus(0, &want, Fit::Tightest, true),
        Some(vec![2])
    );
    let mut more = snap.clone();
    shape(&mut more.pending[0]).memory_mib = 20000;
    let cluster = Cluster::new(&more);
    let want = cluster.want(&more.pending[0]);
    assert!(!cluster.fits(0, &want));
    assert!(
        matches!(cluster.shortfall(&want), Shortfall::Never(_)),
        "no instance has 20000 MiB, although the parent has"
    );
}

#[test]
fn exclusive_fit_counts_whole_free_gpus_and_commits() {
    let mut n = node("a", 4, "NVIDIA H100 80GB HBM3", 81920);
    n.gpus[0].held = true;
    n.gpus[0].allocated_mib = 81920;
    let snap = snapshot(vec![n], vec![request("ns/p", 3, Sharing::Exclusive, 40960)]);
    let mut cluster = Cluster::new(&snap);
    let want = cluster.want(&snap.pending[0]);
    assert_eq!(cluster.free_whole(0), 3);
    assert!(cluster.fits(0, &want));
    let picked = cluster.pick_gpus(0, &want, Fit::Tightest, true).unwrap();
    assert_eq!(picked, vec![1, 2, 3]);
    cluster.commit(0, &picked, &want);
    assert_eq!(cluster.free_whole(0), 0);
    assert!(!cluster.fits(0, &want));
    assert_eq!(cluster.shortfall(&want), Shortfall::NotNow(want.describe()));
}

#[test]
fn model_glob_and_memory_are_checked() {
    let snap = snapshot(
        vec![node("a", 2, "NVIDIA A100-SXM4-40GB", 40960)],
        vec![
            {
                let mut r = request("ns/h", 1, Sharing::Exclusive, 0);
                shape(&mut r).model = Some("NVIDIA H100*".into());
                r
            },
            request("ns/big", 1, Sharing::Exclusive, 81920),
            {
                let mut r = request("ns/a", 2, Sharing::Exclusive, 40960);
                shape(&mut r).model = Some("*A100*".into());
                r
            },
        ],
    );
    let cluster = Cluster::new(&snap);
    let [h, big, a] = [0, 1, 2].map(|i| cluster.want(&snap.pending[i]));
    assert!(!cluster.fits(0, &h));
    assert!(cluster.shortfall(&h).is_permanent());
    assert!(!cluster.fits(0, &big));
    assert!(
        cluster.shortfall(&big).reason().contains("81920 MiB"),
        "{}",
        cluster.shortfall(&big).reason()
    );
    assert!(cluster.fits(0, &a));
}

#[test]
fn shared_requests_share_memory_and_block_exclusive_use() {
    let snap = snapshot(
        vec![node("a", 1, "NVIDIA L4", 24000)],
        vec![
            request("ns/s", 1, Sharing::Shared, 10000),
            request("ns/x", 1, Sharing::Exclusive, 0),
        ],
    );
    let mut cluster = Cluster::new(&snap);
    let shared = cluster.want(&snap.pending[0]);
    let exclusive = cluster.want(&snap.pending[1]);
    for _ in 0..2 {
        let picked = cluster.pick_gpus(0, &shared, Fit::Tightest, false).unwrap();
        cluster.commit(0, &picked, &shared);
    }
    assert!(!cluster.fits(0, &shared), "4000 MiB left, 10000 wanted");
    assert!(
        !cluster.fits(0, &exclusive),
        "a shared GPU is not free for exclusive use"
    );
    assert_eq!(cluster.headroom(0, &shared), 0);
}

#[test]
fn nvlink_groups_are_preferred() {
    // GPUs 0-1 and 2-3 are NVLink pairs; 0 is taken, so a pair must be 2-3.
    let mut n = node("a", 4, "NVIDIA H100", 81920);
    for (i, j) in [(0u32, 1u32), (2, 3)] {
        n.gpus[i as usize].nvlink |= 1 << j;
        n.gpus[j as usize].nvlink |= 1 << i;
    }
    n.gpus[0].held = true;
    let snap = snapshot(vec![n], vec![request("ns/p", 2, Sharing::Exclusive, 0)]);
    let cluster = Cluster::new(&snap);
    let want = cluster.want(&snap.pending[0]);
    assert_eq!(
        cluster.pick_gpus(0, &want, Fit::Tightest, true).unwrap(),
        vec![2, 3]
    );
    assert_eq!(
        cluster.pick_gpus(0, &want, Fit::Tightest, false).unwrap(),
        vec![1, 2]
    );
}

/// Node "ring": 4 GPUs linked 0-1-2-3-0 (one group, no three mutual
/// peers); node "pairs": 4 GPUs in two NVLink pairs (0-1, 2-3);
/// node "hgx": 8 GPUs all linked.
fn nvlink_nodes() -> Vec<wasmgpu_contract::Node> {
    use crate::testing::{with_full_nvlink, with_nvlink};
    vec![
        with_nvlink(
            node("ring", 4, "NVIDIA A100", 40960),
            &[(0, 1), (1, 2), (2, 3), (3, 0)],
        ),
        with_nvlink(node("pairs", 4, "NVIDIA A100", 40960), &[(0, 1), (2, 3)]),
        with_full_nvlink(node("hgx", 8, "NVIDIA A100", 40960)),
    ]
}

#[test]
fn require_takes_mutual_peers_or_nothing() {
    let snap = snapshot(
        nvlink_nodes(),
        vec![request("ns/p", 3, Sharing::Exclusive, 0)],
    );
    let cluster = Cluster::new(&snap);
    let want = cluster.want(&snap.pending[0]);
    // The ring is the tightest node with 3 free GPUs, and Prefer takes
    // it (one group), though GPUs 0 and 2 are not peers.
    assert_eq!(cluster.choose_node(&want, Fit::Tightest), Some(0));
    assert_eq!(
        cluster.pick_gpus(0, &want, Fit::Tightest, Nvlink::Prefer),
        Some(vec![0, 1, 2])
    );
    assert!(!cluster.is_nvlink_clique(0, &[0, 1, 2]));
    // Require skips the ring and the pairs: only the HGX node has three
    // mutual peers.
    assert_eq!(
        cluster.pick_gpus(0, &want, Fit::Tightest, Nvlink::Require),
        None
    );
    assert_eq!(
        cluster.pick_gpus(1, &want, Fit::Tightest, Nvlink::Require),
        None
    );
    assert_eq!(
        cluster.choose_node_with(&want, Fit::Tightest, Nvlink::Require),
        Some(2)
    );
    let picked = cluster
        .pick_gpus(2, &want, Fit::Tightest, Nvlink::Require)
        .unwrap();
    assert!(cluster.is_nvlink_clique(2, &picked), "{picked:?}");
    // Prefer and Ignore leave the choice of node alone.
    for mode in [Nvlink::Prefer, Nvlink::Ignore] {
        assert_eq!(
            cluster.choose_node_with(&want, Fit::Tightest, mode),
            Some(0)
        );
    }
}

#[test]
fn require_waits_or_rejects_saying_nvlink_is_required() {
    // The HGX node busy: three mutual peers exist only once it is idle.
    let mut nodes = nvlink_nodes();
    for gpu in &mut nodes[2].gpus[..6] {
        gpu.held = true;
    }
    let mut snap = snapshot(
        nodes,
        vec![
            request("ns/three", 3, Sharing::Exclusive, 0),
            request("ns/two", 2, Sharing::Exclusive, 0),
        ],
    );
    // No node but the HGX one is eligible for the last request.
    snap.pending
        .push(request("ns/nine", 9, Sharing::Exclusive, 0));
    snap.pending
        .push(request("ns/ring", 3, Sharing::Exclusive, 0));
    restrict(&mut snap, 3, &[0, 1]);
    snap.config = r#"{"nvlink": "require"}"#.into();
    let decisions = crate::placement::place_each(&snap, Fit::Tightest);
    let of = |pod: &str| crate::testing::decision_for(&snap, &decisions, pod).unwrap();
    // `three` waits (HGX busy); `two` takes a pair, not two ring GPUs
    // picked for a group; `nine` never fits; `ring` (ring and pairs only)
    // can never have three mutual peers.
    assert!(
        matches!(of("ns/three"), Decision::Wait(d)
            if d.reason == "no eligible node has 3 GPU(s) that are all NVLink peers of one another free right now"),
        "{decisions:?}"
    );
    let two = crate::testing::assigned(&snap, &decisions);
    assert_eq!(two.len(), 1, "{decisions:?}");
    assert_eq!(two[0].0, "ns/two");
    assert!(
        matches!(of("ns/nine"), Decision::Reject(d) if d.reason.contains("9 GPU(s), even when idle")),
        "{decisions:?}"
    );
    assert!(
        matches!(of("ns/ring"), Decision::Reject(d)
            if d.reason == "no eligible node has 3 GPU(s) that are all NVLink peers of one another, even when idle"),
        "{decisions:?}"
    );
    let verdict = crate::testing::validate(&snap, &decisions);
    assert!(verdict.refused.is_empty(), "{verdict:?}");

    // With Prefer, `ring` takes three GPUs of the ring (one group), as
    // before.
    snap.config = r#"{"preferNvlink": true}"#.into();
    let decisions = crate::placement::place_each(&snap, Fit::Tightest);
    assert!(
        matches!(
            crate::testing::decision_for(&snap, &decisions, "ns/ring"),
            Some(Decision::Assign(a)) if a.node == 0 && a.gpus == [0, 1, 2]
        ),
        "{decisions:?}"
    );
}

#[test]
fn require_holds_for_every_assignment_of_a_large_round() {
    for fit in [Fit::Tightest, Fit::Loosest] {
        let mut snap = crate::testing::large(60, 200);
        // Break the full NVLink of some H100 nodes into rings.
        for (n, node) in snap.nodes.iter_mut().enumerate() {
            if n % 4 == 0 {
                for (i, gpu) in node.gpus.iter_mut().enumerate() {
                    let i = i as u32;
                    gpu.nvlink = wasmgpu_contract::bits::nvlink_of([(i + 7) % 8, (i + 1) % 8]);
                }
            }
        }
        let mut gang_snap = snap.clone();
        crate::testing::gang(&mut gang_snap, "team-0/gang", 2, &[3, 4]);
        for snap in [snap, gang_snap] {
            let mut snap = snap;
            snap.config = r#"{"nvlink": "require"}"#.into();
            let decisions = crate::placement::place_each(&snap, fit);
            let cluster = Cluster::new(&snap);
            let mut multi = 0;
            for d in &decisions {
                if let Decision::Assign(a) = d
                    && a.gpus.len() > 1
                    && shape_of(&snap.pending[a.pod as usize])
                        .is_some_and(|s| s.sharing == Sharing::Exclusive)
                {
                    let gpus: Vec<usize> = a.gpus.iter().map(|&g| g as usize).collect();
                    assert!(cluster.is_nvlink_clique(a.node, &gpus), "{fit:?} {a:?}");
                    multi += 1;
                }
            }
            assert!(multi > 10, "{multi} multi-GPU assignments");
            let verdict = crate::testing::validate(&snap, &decisions);
            assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
            assert_eq!(
                verdict.accepted.len() + verdict.waiting.len() + verdict.rejected.len(),
                decisions.len()
            );
        }
    }
}

#[test]
fn placement_params_read_nvlink_and_the_older_bool() {
    let read = |json: &str| {
        crate::config::parse_config::<crate::placement::PlacementParams>(json)
            .unwrap()
            .nvlink()
    };
    assert_eq!(read(""), Nvlink::Prefer);
    assert_eq!(read(r#"{"preferNvlink": false}"#), Nvlink::Ignore);
    assert_eq!(read(r#"{"nvlink": "require"}"#), Nvlink::Require);
    assert_eq!(
        read(r#"{"nvlink": "ignore", "preferNvlink": true}"#),
        Nvlink::Ignore
    );
    let err =
        crate::config::parse_config::<crate::placement::PlacementParams>(r#"{"nvlink": "always"}"#)
            .unwrap_err();
    assert!(err.contains("require"), "{err}");
}

#[test]
fn unhealthy_gpus_never_fit_and_order_is_priority_then_age() {
    let mut n = node("a", 2, "NVIDIA H100", 81920);
    n.gpus[1].healthy = false;
    let snap = snapshot(
        vec![n, gpu_less_node()],
        vec![
            Request {
                created_ms: 5,
                ..request("ns/young", 2, Sharing::Exclusive, 0)
            },
            Request {
                created_ms: 9,
                priority: 10,
                ..request("ns/urgent", 1, Sharing::Exclusive, 0)
            },
            Request {
                created_ms: 1,
                ..request("ns/old", 1, Sharing::Exclusive, 0)
            },
        ],
    );
    let cluster = Cluster::new(&snap);
    let order: Vec<&str> = cluster
        .pending_in_order()
        .iter()
        .map(|r| r.pod.as_str())
        .collect();
    assert_eq!(order, ["ns/urgent", "ns/old", "ns/young"]);
    let two = cluster.want(&snap.pending[0]);
    assert!(!cluster.fits(0, &two));
    assert!(cluster.shortfall(&two).is_permanent());
    assert_eq!(cluster.healthy(0), 1);
}

/// A node with one whole GPU (0) and one GPU (1) carved into three
/// `1g.10gb` instances (positions 2-4).
fn mig_node() -> wasmgpu_contract::Node {
    crate::testing::with_mig(
        node("m", 2, "NVIDIA A100 80GB PCIe", 81920),
        1,
        &[("1g.10gb", 9856), ("1g.10gb", 9856), ("1g.10gb", 9856)],
    )
}

fn mig_request(pod: &str, count: u32) -> Request {
    {
        let mut r = request(pod, count, Sharing::Exclusive, 0);
        shape(&mut r).mig_profile = Some("1g.10gb".into());
        r
    }
}

#[test]
fn mig_requests_take_instances_and_whole_requests_keep_off_their_parent() {
    let snap = snapshot(
        vec![mig_node()],
        vec![
            mig_request("ns/m1", 1),
            mig_request("ns/m2", 2),
            request("ns/whole", 2, Sharing::Exclusive, 0),
            request("ns/one", 1, Sharing::Exclusive, 0),
            mig_request("ns/m3", 1),
        ],
    );
    let decisions = crate::placement::place_each(&snap, Fit::Tightest);
    let placed: Vec<(u32, Vec<u32>)> = decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Assign(a) => Some((a.pod, a.gpus.clone())),
            _ => None,
        })
        .collect();
    // In name order: m1 takes instance 2, m2 instances 3 and 4, m3 finds
    // none left; `one` takes GPU 0, and `whole` waits: GPU 1 is not whole
    // while its instances are held.
    assert_eq!(placed, [(0, vec![2]), (1, vec![3, 4]), (3, vec![0])]);
    let wait_of = |pod| {
        decisions.iter().find_map(|d| match d {
            Decision::Wait(w) if w.pod == pod => Some(w.reason.clone()),
            _ => None,
        })
    };
    assert!(
        wait_of(4).unwrap().contains("MIG instance"),
        "{decisions:?}"
    );
    assert!(wait_of(2).unwrap().contains("2 GPU(s)"), "{decisions:?}");
}

#[test]
fn a_held_parent_blocks_its_instances_and_unknown_profiles_never_fit() {
    let mut n = mig_node();
    n.gpus[1].held = true;
    let snap = snapshot(
        vec![n],
        vec![mig_request("ns/m", 1), {
            let mut r = request("ns/big", 1, Sharing::Exclusive, 0);
            shape(&mut r).mig_profile = Some("7g.80gb".into());
            r
        }],
    );
    let cluster = Cluster::new(&snap);
    let [m, big] = [0, 1].map(|i| cluster.want(&snap.pending[i]));
    assert!(!cluster.fits(0, &m));
    assert_eq!(cluster.shortfall(&m), Shortfall::NotNow(m.describe()));
    assert!(cluster.shortfall(&big).is_permanent());
    assert_eq!(cluster.free_whole(0), 1);
}

#[test]
fn a_gang_is_placed_whole_or_not_at_all() {
    // Two nodes of 4 GPUs: a gang of three 2-GPU members needs 6 of 8.
    let nodes = || {
        vec![
            node("a", 4, "NVIDIA H100", 81920),
            node("b", 4, "NVIDIA H100", 81920),
        ]
    };
    let members = |n| (0..n).map(|i| request(&format!("ns/w-{i}"), 2, Sharing::Exclusive, 0));
    let mut snap = snapshot(nodes(), members(3).collect());
    crate::testing::gang(&mut snap, "ns/train", 3, &[0, 1, 2]);
    let decisions = crate::placement::place_each(&snap, Fit::Tightest);
    assert!(
        decisions.iter().all(|d| matches!(d, Decision::Assign(_))),
        "{decisions:?}"
    );

    // Five members of 2 GPUs cannot all fit on 8 GPUs: none is placed,
    // and a request after the gang still gets the room.
    let mut pending: Vec<Request> = members(5).collect();
    pending.push(Request {
        created_ms: 1,
        ..request("ns/solo", 4, Sharing::Exclusive, 0)
    });
    let mut snap = snapshot(nodes(), pending);
    crate::testing::gang(&mut snap, "ns/train", 5, &[0, 1, 2, 3, 4]);
    let decisions = crate::placement::place_each(&snap, Fit::Tightest);
    let waits: Vec<&Decision> = decisions
        .iter()
        .filter(|d| matches!(d, Decision::Wait(_)))
        .collect();
    assert_eq!(waits.len(), 5, "{decisions:?}");
    assert!(
        matches!(waits[0], Decision::Wait(d) if d.reason.contains("4 of the 5") && d.reason.contains("all or nothing")),
        "{waits:?}"
    );
    assert!(
        matches!(&decisions[5], Decision::Assign(a) if a.pod == 5),
        "{decisions:?}"
    );

    // With two members already bound, three more are enough.
    snap.gangs[0].bound = 2;
    snap.gangs[0].min_member = 5;
    let decisions = crate::placement::place_each(&snap, Fit::Tightest);
    let assigned = decisions
        .iter()
        .filter(|d| matches!(d, Decision::Assign(_)))
        .count();
    assert_eq!(
        assigned, 4,
        "three or more members and the solo pod: {decisions:?}"
    );
}

#[test]
fn a_gang_member_that_can_never_fit_rejects_the_gang() {
    let mut snap = snapshot(
        vec![node("a", 4, "NVIDIA H100", 81920)],
        vec![
            request("ns/w-0", 1, Sharing::Exclusive, 0),
            request("ns/w-1", 8, Sharing::Exclusive, 0),
        ],
    );
    crate::testing::gang(&mut snap, "ns/train", 2, &[0, 1]);
    let decisions = crate::placement::place_each(&snap, Fit::Tightest);
    assert!(
        decisions
            .iter()
            .all(|d| matches!(d, Decision::Reject(r) if r.reason.contains("can never be placed"))),
        "{decisions:?}"
    );
}

#[test]
fn a_member_that_can_never_fit_is_rejected_alone_when_the_rest_reach_min_member() {
    // 2 of 3 suffice; w-amd asks for a model no node has.
    let amd = {
        let mut r = request("ns/w-amd", 1, Sharing::Exclusive, 0);
        shape(&mut r).model = Some("AMD*".into());
        r
    };
    let pending = vec![
        request("ns/w-0", 2, Sharing::Exclusive, 0),
        request("ns/w-1", 2, Sharing::Exclusive, 0),
        amd,
    ];
    let mut snap = snapshot(vec![node("a", 4, "NVIDIA H100", 81920)], pending);
    crate::testing::gang(&mut snap, "ns/train", 2, &[0, 1, 2]);
    let decisions = crate::placement::place_each(&snap, Fit::Tightest);
    let assigned: Vec<u32> = decisions
        .iter()
        .filter(|d| matches!(d, Decision::Assign(_)))
        .map(Decision::pod)
        .collect();
    assert_eq!(assigned, [0, 1], "{decisions:?}");
    let rejected = decisions.iter().find(|d| d.pod() == 2).unwrap();
    assert!(
        matches!(rejected, Decision::Reject(r) if !r.reason.contains("gang") && r.reason.contains("AMD")),
        "its own reason, not the gang's: {rejected:?}"
    );

    // Not room for both now: they wait, the impossible one is rejected.
    snap.nodes[0].gpus[0].held = true;
    snap.nodes[0].gpus[0].allocated_mib = 81920;
    let decisions = crate::placement::place_each(&snap, Fit::Tightest);
    let kinds: Vec<(&str, u32)> = decisions
        .iter()
        .map(|d| match d {
            Decision::Assign(a) => ("assign", a.pod),
            Decision::Wait(w) => ("wait", w.pod),
            Decision::Reject(r) => ("reject", r.pod),
            Decision::Preempt(p) => ("preempt", p.assignment.pod),
        })
        .collect();
    assert_eq!(
        kinds,
        [("wait", 0), ("wait", 1), ("reject", 2)],
        "{decisions:?}"
    );
}

fn gpu_less_node() -> wasmgpu_contract::Node {
    wasmgpu_contract::Node {
        name: "cpu".into(),
        labels: vec![],
        gpus: vec![],
    }
}

/// The straightforward algorithm the indexes must agree with: every
/// request scans every eligible node and every GPU, with its own state.
fn reference(snapshot: &Snapshot, fit: Fit, prefer_nvlink: bool) -> Vec<Decision> {
    struct G {
        model: String,
        memory: u64,
        free: u64,
        exclusive: bool,
        shares: u32,
        healthy: bool,
        group: usize,
    }
    let mut nodes: Vec<Vec<G>> = snapshot
        .nodes
        .iter()
        .map(|node| {
            let mut groups = UnionFind(Vec::new());
            groups.reset(node.gpus.len());
            for (i, gpu) in node.gpus.iter().enumerate() {
                for peer in crate::nvlink::peer_positions(node, gpu) {
                    groups.union(i, peer);
                }
            }
            let gpus = node.gpus.iter().enumerate();
            gpus.map(|(i, g)| G {
                model: snapshot.models[g.model as usize].clone(),
                memory: g.memory_mib,
                free: g.memory_mib.saturating_sub(g.allocated_mib),
                exclusive: g.held,
                shares: g.shared_owners,
                healthy: g.healthy,
                group: groups.find(i),
            })
            .collect()
        })
        .collect();
    let mut pending: Vec<(u32, &Request)> = (0..).zip(&snapshot.pending).collect();
    pending.sort_by(|(_, a), (_, b)| {
        (b.priority, &a.created_ms, &a.pod).cmp(&(a.priority, &b.created_ms, &b.pod))
    });
    let model_ok = |r: &Request, g: &G| {
        shape_of(r)
            .unwrap()
            .model
            .as_deref()
            .is_none_or(|p| glob_match(p, &g.model))
    };
    let fits = |r: &Request, g: &G| {
        g.healthy
            && !g.exclusive
            && model_ok(r, g)
            && match shape_of(r).unwrap().sharing {
                Sharing::Exclusive => {
                    g.shares == 0
                        && g.free == g.memory
                        && g.memory >= shape_of(r).unwrap().memory_mib
                }
                Sharing::Shared => g.free >= shape_of(r).unwrap().memory_mib,
            }
    };
    let mut decisions = Vec::new();
    for (position, r) in pending {
        let describe = Cluster::new(snapshot).want(r).describe();
        let eligible: Vec<usize> = snapshot
            .eligible_sets
            .get(r.eligible_set as usize)
            .map_or(vec![], |set| {
                wasmgpu_contract::bits::indices(set)
                    .map(|n| n as usize)
                    .collect()
            })
            .into_iter()
            .filter(|&n| n < nodes.len())
            .collect();
        let mut best: Option<(u64, usize)> = None;
        for &n in &eligible {
            let fitting: Vec<&G> = nodes[n].iter().filter(|g| fits(r, g)).collect();
            if fitting.len() < shape_of(r).unwrap().count as usize {
                continue;
            }
            let room = match shape_of(r).unwrap().sharing {
                Sharing::Exclusive => nodes[n]
                    .iter()
                    .filter(|g| g.healthy && !g.exclusive && g.shares == 0 && g.free == g.memory)
                    .count() as u64,
                Sharing::Shared => fitting.iter().map(|g| g.free).sum(),
            };
            let better = match (best, fit) {
                (None, _) => true,
                (Some((b, bn)), Fit::Tightest) => room < b || (room == b && n < bn),
                (Some((b, bn)), Fit::Loosest) => room > b || (room == b && n < bn),
            };
            if better {
                best = Some((room, n));
            }
        }
        let Some((_, n)) = best else {
            let count = shape_of(r).unwrap().count as usize;
            let shortfall = if eligible.is_empty() {
                Shortfall::NoEligibleNode
            } else if eligible.iter().any(|&n| {
                let ever = |g: &&G| {
                    g.healthy && model_ok(r, g) && g.memory >= shape_of(r).unwrap().memory_mib
                };
                nodes[n].iter().filter(ever).count() >= count
            }) {
                Shortfall::NotNow(describe)
            } else {
                Shortfall::Never(describe)
            };
            decisions.push(if shortfall.is_permanent() {
                reject(position, shortfall.reason())
            } else {
                wait(position, shortfall.reason())
            });
            continue;
        };
        let gpus = &mut nodes[n];
        let mut picked: Vec<usize> = (0..gpus.len()).filter(|&i| fits(r, &gpus[i])).collect();
        match shape_of(r).unwrap().sharing {
            Sharing::Exclusive if prefer_nvlink && shape_of(r).unwrap().count > 1 => {
                let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
                for &i in &picked {
                    match groups.iter_mut().find(|(g, _)| *g == gpus[i].group) {
                        Some((_, members)) => members.push(i),
                        None => groups.push((gpus[i].group, vec![i])),
                    }
                }
                let mut chosen: Option<Vec<usize>> = None;
                for (_, members) in groups {
                    if members.len() < shape_of(r).unwrap().count as usize {
                        continue;
                    }
                    let better = chosen.as_ref().is_none_or(|c| match fit {
                        Fit::Tightest => members.len() < c.len(),
                        Fit::Loosest => members.len() > c.len(),
                    });
                    if better {
                        chosen = Some(members);
                    }
                }
                if let Some(members) = chosen {
                    picked = members;
                }
            }
            Sharing::Exclusive => {}
            Sharing::Shared => match fit {
                Fit::Tightest => picked.sort_by_key(|&i| gpus[i].free),
                Fit::Loosest => picked.sort_by_key(|&i| std::cmp::Reverse(gpus[i].free)),
            },
        }
        picked.truncate(shape_of(r).unwrap().count as usize);
        picked.sort_unstable();
        for &i in &picked {
            let g = &mut gpus[i];
            match shape_of(r).unwrap().sharing {
                Sharing::Exclusive => {
                    g.exclusive = true;
                    g.free = 0;
                }
                Sharing::Shared => {
                    g.shares += 1;
                    g.free = g.free.saturating_sub(shape_of(r).unwrap().memory_mib);
                }
            }
        }
        let positions = picked.iter().map(|&i| i as u32).collect();
        decisions.push(assign(position, n as u32, positions));
    }
    decisions
}

/// `testing::large` with what it lacks: mixed and unhealthy GPUs, shared
/// requests for several GPUs, model globs that match nothing, requests
/// with no eligible node.
fn varied_large(nodes: u32, pods: u32) -> Snapshot {
    let mut snap = crate::testing::large(nodes, pods);
    snap.nodes[1].gpus[0].memory_mib = 16384;
    snap.nodes[3].gpus[5].model = crate::testing::model("NVIDIA L4");
    crate::testing::refresh_tables(&mut snap);
    for (n, node) in snap.nodes.iter_mut().enumerate() {
        if n % 11 == 0 {
            node.gpus[n % 8].healthy = false;
        }
    }
    snap.eligible_sets.push(vec![]);
    let len = snap.nodes.len();
    snap.eligible_sets
        .push(wasmgpu_contract::bits::from_indices(len, [2, 5, 9, 40]));
    let empty = snap.eligible_sets.len() as u32 - 2;
    for (p, r) in snap.pending.iter_mut().enumerate() {
        match p % 23 {
            3 if shape(r).sharing == Sharing::Shared => shape(r).count = 2,
            5 if shape(r).sharing == Sharing::Shared => shape(r).count = 3,
            7 => shape(r).model = Some("NVIDIA B200*".into()),
            11 => r.eligible_set = empty,
            13 | 17 => r.eligible_set = empty + 1,
            19 => shape(r).memory_mib = 79000,
            _ => {}
        }
    }
    snap
}

/// The indexed placement decides exactly what the plain scans decide.
#[test]
fn place_each_agrees_with_the_reference_on_a_large_snapshot() {
    for snap in [
        crate::testing::large(200, 300),
        varied_large(200, 300),
        varied_large(31, 400),
    ] {
        for fit in [Fit::Tightest, Fit::Loosest] {
            for nvlink in [true, false] {
                let mut snap = snap.clone();
                if !nvlink {
                    snap.config = r#"{"preferNvlink": false}"#.into();
                }
                let got = crate::placement::place_each(&snap, fit);
                let want = reference(&snap, fit, nvlink);
                assert_eq!(got.len(), want.len());
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(g, w, "{fit:?}, preferNvlink {nvlink}");
                }
                let placed = got
                    .iter()
                    .filter(|d| matches!(d, Decision::Assign(_)))
                    .count();
                assert!(
                    placed > 0 && placed < got.len(),
                    "{placed} of {} placed",
                    got.len()
                );
            }
        }
    }
}

/// The bucket search gives what a plain scan of every eligible node gives.
#[test]
fn choose_node_agrees_with_a_full_scan() {
    for (nodes, pods) in [(7, 40), (60, 200)] {
        let mut snap = crate::testing::large(nodes, pods);
        // A node of mixed GPUs takes the scan path.
        snap.nodes[1].gpus[0].memory_mib = 16384;
        for fit in [Fit::Tightest, Fit::Loosest] {
            let mut cluster = Cluster::new(&snap);
            for request in cluster.pending_in_order() {
                let want = cluster.want(request);
                let mut expected: Option<(u64, u32)> = None;
                for n in cluster.eligible(request) {
                    if !cluster.fits(n, &want) {
                        continue;
                    }
                    let room = cluster.headroom(n, &want);
                    let better = match (expected, fit) {
                        (None, _) => true,
                        (Some((r, _)), Fit::Tightest) => room < r,
                        (Some((r, _)), Fit::Loosest) => room > r,
                    };
                    if better {
                        expected = Some((room, n));
                    }
                }
                let chosen = cluster.choose_node(&want, fit);
                assert_eq!(chosen, expected.map(|(_, n)| n), "{fit:?} {}", request.pod);
                if let Some(node) = chosen {
                    cluster.place(node, &want, fit, true).expect("fits");
                }
            }
        }
    }
}
