//! # fairshare
//!
//! Shares the cluster's GPUs among tenants (groups of namespaces) by weighted
//! dominant-resource fairness, with guaranteed quotas and hard limits. Each
//! chosen pod is placed like binpack does (the fullest node that fits).
//!
//! A round serves pods one at a time: it picks the tenant that stands lowest
//! (below-quota tenants first, then by weighted dominant share beyond the
//! quota), places that tenant's next pod (higher priority first, then older
//! first), adds what the pod took to the tenant's holdings and picks again.
//! Holdings start from what the running pods hold (`usage`). A gang is one unit of its tenant,
//! placed all or nothing. Pods asking through DRA claims queue with the
//! others and are placed by `Cluster::place_claims` (packed the same way);
//! what they are given counts as GPUs of their tenant (a MIG instance as a
//! seventh). They reclaim as the others do, and gang members among them
//! are left to their gang (which gives them no decision).
//!
//! Tenants are the `GPUTenant` objects the snapshot carries; without any,
//! those of `config.json` (which are ignored, with a log line, once objects
//! exist). **Reclaim** (objects only, `"reclaim": true` by default): a pod
//! of a tenant under its quota that fits nowhere evicts pods of tenants
//! over their quotas — lowest priority, then youngest first — as long as
//! its tenant stays within its quota and theirs stays at or above theirs.
//! Without reclaim nothing is taken back: a tenant above its fair share
//! keeps its GPUs until its pods finish. See docs/POLICIES.md
//! ("fairshare") for the formula.
//!
//! Parameters (`config.json`, all optional):
//!
//! ```json
//! {"tenants": [{"name": "team-a", "namespaces": ["team-a", "team-a-*"],
//!               "quota": 40, "limit": 48, "weight": 1}],
//!  "defaultWeight": 1, "preferNvlink": true, "reclaim": true}
//! ```
#![forbid(unsafe_code)]

mod config;
mod reclaim;
mod tenants;

use std::collections::VecDeque;

use wasmgpu_policy_sdk::{
    Cluster, Decision, Fit, Info, Policy, Request, Snapshot, Want, fail, info, shape_of, wait,
};

pub use config::{Config, TenantConfig};
pub use tenants::{Capacity, Holding, MIG_SLICES, Source, Standing, Tenant};

use reclaim::Reclaim;
use tenants::Tenants;

/// What a tenant's queue holds: a pod, or a gang (an index into
/// `snapshot.gangs`) served whole at its first member's turn.
#[derive(Clone, Copy, Debug)]
enum Unit<'s> {
    Pod(&'s Request),
    Gang(u32),
}

/// Decides one round (the algorithm, callable natively). An invalid
/// `config.json` fails the round (see [`wasmgpu_policy_sdk::fail`]).
pub fn allocate(snapshot: &Snapshot) -> Vec<Decision> {
    let config = Config::parse(&snapshot.config).unwrap_or_else(|e| fail(&e));
    let capacity = Capacity::of(snapshot);
    let mut tenants = Tenants::new(&config, snapshot);
    let mut cluster = Cluster::new(snapshot);
    let mut reclaim = Reclaim::new(snapshot, config.reclaim);
    let mut queues = queue_units(snapshot, &cluster, &mut tenants);
    let fit = Fit::Tightest;
    let mut decisions = Vec::with_capacity(snapshot.pending.len());
    while let Some(t) = lowest(&tenants.all, &queues, &capacity) {
        let Some(unit) = queues[t].pop_front() else {
            break;
        };
        let tenant = &mut tenants.all[t];
        match unit {
            Unit::Pod(request) => {
                let want = cluster.want(request);
                let cost = Holding::of_request(request);
                if let Some(reason) = tenant.over_limit(&capacity, cost, "pod") {
                    decisions.push(wait(want.position, reason));
                    continue;
                }
                match place_pod(&mut cluster, &mut reclaim, &want, config.prefer_nvlink) {
                    Some(decision) => {
                        tenant
                            .held
                            .add(Holding::of_placed(snapshot, request, &decision));
                        reclaim.placed(request, &decision);
                        decisions.push(decision);
                    }
                    None => decisions.push(cluster.unplaced(&want)),
                }
            }
            Unit::Gang(g) => {
                let members = &snapshot.gangs[g as usize].pending;
                let mut cost = Holding::default();
                for &m in members {
                    // Members asking through claims are not placed with
                    // their gang (they get no decision): they cost nothing.
                    if let Some(request) = snapshot.pending.get(m as usize)
                        && shape_of(request).is_some()
                    {
                        cost.add(Holding::of_request(request));
                    }
                }
                if let Some(reason) = tenant.over_limit(&capacity, cost, "gang") {
                    decisions.extend(members.iter().map(|&m| wait(m, reason.clone())));
                    continue;
                }
                for decision in cluster.place_gang(g, fit, config.prefer_nvlink) {
                    if let Decision::Assign(a) = &decision
                        && let Some(request) = snapshot.pending.get(a.pod as usize)
                    {
                        tenant
                            .held
                            .add(Holding::of_placed(snapshot, request, &decision));
                        reclaim.placed(request, &decision);
                    }
                    decisions.push(decision);
                }
            }
        }
    }
    decisions
}

/// Each tenant's units (by position in `tenants.all`), in order: priority,
/// then age, then pod name; DRA pods among them. A gang is queued at its
/// first member's turn; gang members asking through claims are left to
/// their gang.
fn queue_units<'s>(
    snapshot: &'s Snapshot,
    cluster: &Cluster<'s>,
    tenants: &mut Tenants,
) -> Vec<VecDeque<Unit<'s>>> {
    let mut queues: Vec<VecDeque<Unit>> = Vec::new();
    let mut gang_queued = vec![false; snapshot.gangs.len()];
    for request in cluster.all_pending_in_order() {
        let unit = match request.gang {
            Some(g) if (g as usize) < gang_queued.len() => {
                if shape_of(request).is_none()
                    || std::mem::replace(&mut gang_queued[g as usize], true)
                {
                    continue;
                }
                Unit::Gang(g)
            }
            _ => Unit::Pod(request),
        };
        let t = tenants.of_namespace(snapshot.namespace(request.namespace));
        if queues.len() <= t {
            queues.resize_with(tenants.all.len(), VecDeque::new);
        }
        queues[t].push_back(unit);
    }
    queues
}

/// Places one pod, packed (`Fit::Tightest`): a DRA pod with
/// [`Cluster::place_claims`], another on the node binpack would choose;
/// either by reclaim when it fits nowhere.
fn place_pod<'s>(
    cluster: &mut Cluster<'s>,
    reclaim: &mut Reclaim<'s>,
    want: &Want<'s>,
    prefer_nvlink: bool,
) -> Option<Decision> {
    let fit = Fit::Tightest;
    let placed = match want.is_dra() {
        true => cluster.place_claims(want, fit),
        false => cluster
            .choose_node(want, fit)
            .and_then(|node| cluster.place(node, want, fit, prefer_nvlink)),
    };
    placed.or_else(|| reclaim.evict_for(cluster, want, fit, prefer_nvlink))
}

/// The tenant with units left that stands lowest; ties go to the tenant
/// holding fewer GPU-equivalents per unit of weight, then to the name that
/// sorts first.
fn lowest(tenants: &[Tenant], queues: &[VecDeque<Unit>], capacity: &Capacity) -> Option<usize> {
    let mut best: Option<(Standing, f64, usize)> = None;
    for (t, queue) in queues.iter().enumerate() {
        if queue.is_empty() {
            continue;
        }
        let tenant = &tenants[t];
        let standing = tenant.standing(capacity);
        let per_weight = capacity.gpu_equivalents(tenant.held) / tenant.weight;
        let better = best.is_none_or(|(b, b_per_weight, bt)| {
            standing
                .compare(&b)
                .then(per_weight.total_cmp(&b_per_weight))
                .then_with(|| tenant.name.cmp(&tenants[bt].name))
                .is_lt()
        });
        if better {
            best = Some((standing, per_weight, t));
        }
    }
    best.map(|(_, _, t)| t)
}

/// The fairshare policy.
pub struct Fairshare;

impl Policy for Fairshare {
    fn describe() -> Info {
        info(
            "fairshare",
            env!("CARGO_PKG_VERSION"),
            "Weighted dominant-resource fair share among tenants, with quotas and limits; packs each pod",
        )
    }

    fn allocate(snapshot: Snapshot) -> Vec<Decision> {
        allocate(&snapshot)
    }
}

wasmgpu_policy_sdk::export_policy!(Fairshare);

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use wasmgpu_policy_sdk::Sharing::{Exclusive, Shared};
    use wasmgpu_policy_sdk::testing::{
        assigned, decision_for, gang, node, request, running, snapshot,
    };

    /// `nodes` nodes of 4 H100s.
    fn nodes(nodes: u32) -> Vec<wasmgpu_policy_sdk::Node> {
        (0..nodes)
            .map(|n| node(&format!("n{n}"), 4, "NVIDIA H100", 81920))
            .collect()
    }

    /// `count` one-GPU pods in `namespace`, created one millisecond apart.
    fn pods(namespace: &str, count: u32) -> Vec<Request> {
        (0..count)
            .map(|i| Request {
                created_ms: u64::from(i),
                ..request(&format!("{namespace}/p{i:02}"), 1, Exclusive, 0)
            })
            .collect()
    }

    /// GPUs placed per namespace.
    fn placed(snap: &Snapshot) -> BTreeMap<String, usize> {
        let mut per = BTreeMap::new();
        for (pod, _, gpus) in assigned(snap, &allocate(snap)) {
            let ns = pod.split_once('/').unwrap().0.to_owned();
            *per.entry(ns).or_default() += gpus.len();
        }
        per
    }

    fn per(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
        pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect()
    }

    #[test]
    fn weights_divide_the_cluster() {
        let mut snap = snapshot(
            nodes(2),
            [pods("a", 10), pods("b", 10), pods("c", 10)].concat(),
        );
        snap.config = r#"{"tenants": [{"name": "b", "weight": 2}]}"#.into();
        assert_eq!(placed(&snap), per(&[("a", 2), ("b", 4), ("c", 2)]));
        // Without weights: equal shares (8 GPUs, 3 tenants: 3/3/2).
        snap.config = String::new();
        assert_eq!(placed(&snap), per(&[("a", 3), ("b", 3), ("c", 2)]));
    }

    #[test]
    fn what_tenants_hold_already_counts() {
        // a holds 4 of 8; the 4 free GPUs all go to b, though a's pods are older.
        let mut busy = nodes(2);
        for gpu in &mut busy[0].gpus {
            gpu.held = true;
        }
        let mut b = pods("b", 8);
        for r in &mut b {
            r.created_ms += 100;
        }
        let mut snap = snapshot(busy, [pods("a", 8), b].concat());
        for gpu in &mut snap.nodes[0].gpus {
            gpu.held = false;
        }
        running(&mut snap, "a/held", 0, 0, &[0, 1, 2, 3], 0);
        assert_eq!(placed(&snap), per(&[("b", 4)]));
    }

    #[test]
    fn shared_memory_is_the_dominant_resource_of_a_notebook_tenant() {
        // 8 GPUs of 81,920 MiB. a holds 3 GPUs' worth of shared memory (a
        // dominant share of 3/8); b holds 2 whole GPUs (2/8). Of the 3 free
        // GPUs b gets the first; then both stand at 3/8 and hold 3
        // GPU-equivalents, a wins the tie by name, and then b the next
        // (a whole GPU leaves a's dominant share at 3/8, memory, but a now
        // holds 4 GPU-equivalents to b's 3).
        let mut snap = snapshot(nodes(2), [pods("a", 4), pods("b", 4)].concat());
        for gpu in &mut snap.nodes[0].gpus[..3] {
            gpu.shared_owners = 1;
            gpu.allocated_mib = 81920;
        }
        for gpu in &mut snap.nodes[1].gpus[..2] {
            gpu.held = true;
        }
        running(&mut snap, "b/held", 0, 1, &[0, 1], 0);
        let share = running(&mut snap, "a/shares", 0, 0, &[0, 1, 2], 0) as usize;
        for gpu in &mut snap.nodes[0].gpus[..3] {
            gpu.held = false;
            gpu.shared_owners = 1;
            gpu.allocated_mib = 81920;
        }
        snap.running[share].shared_mib = 81920;
        assert_eq!(placed(&snap), per(&[("a", 1), ("b", 2)]));
        // A shared request costs its memory: a's 20,480 MiB notebook counts
        // a quarter of a GPU.
        let notebook = request("a/notebook", 1, Shared, 20480);
        assert_eq!(Holding::of_request(&notebook).shared_mib, 20480.0);
    }

    #[test]
    fn a_tenant_below_its_quota_goes_first() {
        // 12 GPUs.
        let mut snap = snapshot(nodes(3), [pods("a", 12), pods("b", 12)].concat());
        assert_eq!(placed(&snap), per(&[("a", 6), ("b", 6)]));
        // Quota 6: a gets 6 first, then the 6 left are shared 1:1.
        snap.config = r#"{"tenants": [{"name": "a", "quota": 6}]}"#.into();
        assert_eq!(placed(&snap), per(&[("a", 9), ("b", 3)]));
        // Weights share what is beyond the quotas: 6 GPUs, 1:2.
        snap.config =
            r#"{"tenants": [{"name": "a", "quota": 6}, {"name": "b", "weight": 2}]}"#.into();
        assert_eq!(placed(&snap), per(&[("a", 8), ("b", 4)]));
        // Below quota goes first even against a much larger weight: a's
        // first 10 pods are served before any of b's. Of the 2 GPUs left, b
        // wins the tie at a share of 0 beyond quotas (fewer GPUs per unit of
        // weight); then a, at 0, stands below b's 1/1200.
        snap.config =
            r#"{"tenants": [{"name": "a", "quota": 10}, {"name": "b", "weight": 100}]}"#.into();
        let order: Vec<String> = assigned(&snap, &allocate(&snap))
            .into_iter()
            .map(|(pod, _, _)| pod)
            .collect();
        assert!(order[..10].iter().all(|p| p.starts_with("a/")), "{order:?}");
        assert_eq!(order[10], "b/p00");
        assert_eq!(placed(&snap), per(&[("a", 11), ("b", 1)]));
    }

    #[test]
    fn a_tenant_at_its_limit_waits_with_the_reason() {
        let mut snap = snapshot(
            nodes(2),
            [pods("team-a", 8), pods("team-a-dev", 8), pods("b", 8)].concat(),
        );
        snap.config = r#"{"tenants": [{"name": "team-a", "namespaces": ["team-a", "team-a-*"],
                                        "limit": 3, "weight": 4}]}"#
            .into();
        let got = placed(&snap);
        assert_eq!(
            got.get("team-a").copied().unwrap_or(0) + got["team-a-dev"],
            3
        );
        assert_eq!(got["b"], 5);
        let decisions = allocate(&snap);
        let Some(Decision::Wait(w)) = decision_for(&snap, &decisions, "team-a/p07") else {
            panic!("{decisions:?}");
        };
        assert_eq!(
            w.reason,
            "tenant team-a holds 3 of its limit 3 GPUs (fairshare config tenants[0].limit); this pod needs 1 more"
        );
    }

    #[test]
    fn within_a_tenant_priority_then_age() {
        let mut pending = pods("a", 4);
        pending[0].priority = -1; // oldest, but lowest priority
        pending[3].priority = 5; // newest, highest priority
        let mut snap = snapshot(vec![node("n", 2, "NVIDIA H100", 81920)], pending);
        snap.config = r#"{"tenants": [{"name": "a", "namespaces": ["a"]}]}"#.into();
        let names: Vec<String> = assigned(&snap, &allocate(&snap))
            .into_iter()
            .map(|(pod, _, _)| pod)
            .collect();
        assert_eq!(names, ["a/p03", "a/p01"]);
    }

    #[test]
    fn a_gang_is_one_unit_of_its_tenant_all_or_nothing() {
        let mut snap = snapshot(nodes(1), [pods("a", 3), pods("b", 4)].concat());
        gang(&mut snap, "a/train", 3, &[0, 1, 2]);
        // a stands lowest (by name) and its gang takes 3 of 4 GPUs at once.
        assert_eq!(placed(&snap), per(&[("a", 3), ("b", 1)]));
        // A gang of 5 cannot fit on 4 GPUs: none placed, b takes the room.
        let mut snap = snapshot(nodes(1), [pods("a", 5), pods("b", 4)].concat());
        gang(&mut snap, "a/train", 5, &[0, 1, 2, 3, 4]);
        assert_eq!(placed(&snap), per(&[("b", 4)]));
        // The limit applies to the gang as a whole.
        let mut snap = snapshot(nodes(1), [pods("a", 3), pods("b", 4)].concat());
        gang(&mut snap, "a/train", 3, &[0, 1, 2]);
        snap.config = r#"{"tenants": [{"name": "a", "limit": 2}]}"#.into();
        let decisions = allocate(&snap);
        for pod in ["a/p00", "a/p01", "a/p02"] {
            assert!(
                matches!(decision_for(&snap, &decisions, pod), Some(Decision::Wait(w))
                    if w.reason.contains("limit 2 GPUs") && w.reason.contains("this gang needs 3 more")),
                "{decisions:?}"
            );
        }
        assert_eq!(placed(&snap), per(&[("b", 4)]));
    }

    #[test]
    fn every_pod_gets_one_decision_within_limits_and_no_gpu_twice() {
        let mut snap = wasmgpu_policy_sdk::testing::large(40, 200);
        snap.config = r#"{"tenants": [{"name": "team-0", "weight": 3, "limit": 20},
                                      {"name": "odd", "namespaces": ["team-1", "team-3"], "quota": 30}]}"#
            .into();
        let decisions = allocate(&snap);
        let mut pods: Vec<u32> = decisions.iter().map(Decision::pod).collect();
        pods.sort_unstable();
        pods.dedup();
        assert_eq!(pods.len(), snap.pending.len());
        let capacity = Capacity::of(&snap);
        let (mut exclusive, mut team0) = (Vec::new(), Holding::default());
        for d in &decisions {
            if let Decision::Assign(a) = d {
                let r = &snap.pending[a.pod as usize];
                if wasmgpu_policy_sdk::shape_of(r).is_some_and(|s| s.sharing == Exclusive) {
                    exclusive.extend(a.gpus.iter().map(|&g| (a.node, g)));
                }
                if snap.namespace(r.namespace) == "team-0" {
                    team0.add(Holding::of_request(r));
                }
            }
        }
        let total = exclusive.len();
        exclusive.sort_unstable();
        exclusive.dedup();
        assert!(total > 0 && exclusive.len() == total, "a GPU given twice");
        let held = capacity.gpu_equivalents(team0);
        assert!(held > 10.0 && held <= 20.0, "team-0 got {held}");
    }

    /// One node of 8 GPUs all held by tenant "a" (quota 4, priority 100
    /// pods), and six one-GPU pods of tenant "b" (quota 4, priority 0).
    fn a_filled_the_node() -> Snapshot {
        use wasmgpu_policy_sdk::Tenant as Object;
        let pending = pods("b", 6);
        let mut snap = snapshot(vec![node("n", 8, "NVIDIA H100", 81920)], pending);
        wasmgpu_policy_sdk::testing::running_on_each_gpu(&mut snap, 0, "a/p", 100);
        let object = |name: &str, holding| Object {
            name: name.into(),
            weight: 1,
            quota: 4,
            limit: None,
            holding,
            waiting: 0,
        };
        snap.tenants = vec![object("a", 8), object("b", 0)];
        for r in &mut snap.running {
            r.tenant = Some(0);
        }
        for r in &mut snap.pending {
            r.tenant = Some(1);
        }
        snap
    }

    #[test]
    fn a_tenant_under_its_quota_reclaims_up_to_it_and_the_host_accepts_every_victim() {
        let snap = a_filled_the_node();
        let decisions = allocate(&snap);
        let verdict = wasmgpu_policy_sdk::testing::validate(&snap, &decisions);
        assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
        assert_eq!(verdict.preempting.len(), 4, "b reaches its quota of 4");
        let mut victims: Vec<&str> = verdict
            .preempting
            .iter()
            .flat_map(|p| p.victims.iter().map(String::as_str))
            .collect();
        victims.sort_unstable();
        // Youngest first (a/p7 started last), so a keeps its oldest four.
        assert_eq!(victims, ["a/p4", "a/p5", "a/p6", "a/p7"]);
        let waits = decisions
            .iter()
            .filter(|d| matches!(d, Decision::Wait(_)))
            .count();
        assert_eq!(waits, 2, "the other two of b wait: a is at its quota");
    }

    #[test]
    fn reclaim_can_be_turned_off_and_config_tenants_yield_to_objects() {
        let mut snap = a_filled_the_node();
        snap.config = r#"{"reclaim": false}"#.into();
        let decisions = allocate(&snap);
        assert!(decisions.iter().all(|d| matches!(d, Decision::Wait(_))));
        // config.json's tenants are ignored once objects exist: "b" here
        // would have no quota, and could not reclaim.
        snap.config = r#"{"tenants": [{"name": "x", "namespaces": ["b"]}]}"#.into();
        let verdict = wasmgpu_policy_sdk::testing::validate(&snap, &allocate(&snap));
        assert_eq!(verdict.preempting.len(), 4);
    }

    #[test]
    fn dra_pods_are_placed_and_count_for_their_tenant() {
        use wasmgpu_policy_sdk::testing::{candidate_set, claim, dra_request, validate};
        // 8 GPUs; a's DRA pod takes 4 (a sorts first), so b gets the other
        // 4 and a's GPU pods wait: what the claim took counts for a.
        let mut snap = snapshot(nodes(2), [pods("a", 4), pods("b", 8)].concat());
        let every = candidate_set(&mut snap, (0..2).flat_map(|n| (0..4).map(move |g| (n, g))));
        let mut train = dra_request("a/train", vec![claim("a/train", &[("gpus", 4, every)])]);
        train.priority = 1;
        snap.pending.push(train);
        let decisions = allocate(&snap);
        let verdict = validate(&snap, &decisions);
        assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
        let mut per: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &verdict.accepted {
            *per.entry(p.pod.split_once('/').unwrap().0).or_default() += p.gpus.len();
        }
        assert_eq!(per, BTreeMap::from([("a", 4), ("b", 4)]));
        assert!(verdict.accepted.iter().any(|p| p.pod == "a/train"));
    }

    #[test]
    #[should_panic(expected = "tenants[0].weight is 0")]
    fn a_bad_config_fails_the_round() {
        let mut snap = snapshot(vec![], vec![]);
        snap.config = r#"{"tenants": [{"name": "a", "weight": 0}]}"#.into();
        allocate(&snap);
    }
}
