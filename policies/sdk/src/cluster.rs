//! Round state: what is free on each node, updated as a policy places pods, so
//! a policy never hands out the same GPU twice within its own round.

use std::collections::{BTreeSet, HashMap};

use crate::{Decision, Request, Sharing, Snapshot, assign, glob_match, reject, wait};

/// Which end to prefer when several candidates fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// The candidate with the least room left that still fits (packing).
    Tightest,
    /// The candidate with the most room (spreading).
    Loosest,
}

/// Why a request cannot be placed this round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shortfall {
    /// The request has no eligible node at all.
    NoEligibleNode,
    /// No eligible node could hold it even if all its GPUs were free.
    Never(String),
    /// Some eligible node could hold it once GPUs are released.
    NotNow(String),
}

impl Shortfall {
    /// True when waiting cannot help.
    pub fn is_permanent(&self) -> bool {
        !matches!(self, Shortfall::NotNow(_))
    }

    /// The reason, in words.
    pub fn reason(&self) -> String {
        match self {
            Shortfall::NoEligibleNode => {
                "no eligible node: node selector, affinity or taints exclude every GPU node".into()
            }
            Shortfall::Never(what) => format!("no eligible node has {what}, even when idle"),
            Shortfall::NotNow(what) => format!("no eligible node has {what} free right now"),
        }
    }
}

/// A request prepared for fast fit checks (see [`Cluster::want`]).
#[derive(Clone, Debug)]
pub struct Want<'s> {
    /// The request.
    pub request: &'s Request,
    model_ok: Vec<bool>,
}

impl Want<'_> {
    fn exclusive(&self) -> bool {
        self.request.sharing == Sharing::Exclusive
    }

    fn describe(&self) -> String {
        let r = self.request;
        let model = r
            .model
            .as_deref()
            .map(|m| format!(" matching \"{m}\""))
            .unwrap_or_default();
        match r.sharing {
            Sharing::Exclusive if r.memory_mib == 0 => format!("{} GPU(s){model}", r.count),
            Sharing::Exclusive => format!(
                "{} GPU(s){model} with at least {} MiB each",
                r.count, r.memory_mib
            ),
            Sharing::Shared => format!(
                "{} GPU(s){model} with {} MiB to share",
                r.count, r.memory_mib
            ),
        }
    }
}

#[derive(Clone, Debug)]
struct GpuState {
    model: usize,
    memory_mib: u64,
    free_mib: u64,
    exclusive: bool,
    shares: u32,
    healthy: bool,
    group: u32,
}

impl GpuState {
    fn whole_free(&self) -> bool {
        self.healthy && !self.exclusive && self.shares == 0 && self.free_mib == self.memory_mib
    }

    fn fits(&self, want: &Want) -> bool {
        if !self.healthy || self.exclusive || !want.model_ok[self.model] {
            return false;
        }
        if want.exclusive() {
            self.shares == 0
                && self.free_mib == self.memory_mib
                && self.memory_mib >= want.request.memory_mib
        } else {
            self.free_mib >= want.request.memory_mib
        }
    }

    fn could_ever_fit(&self, want: &Want) -> bool {
        self.healthy && want.model_ok[self.model] && self.memory_mib >= want.request.memory_mib
    }
}

#[derive(Clone, Debug)]
struct NodeState {
    gpus: Vec<GpuState>,
    /// GPUs nobody holds any part of.
    free_whole: u32,
    /// Set when every GPU has the same model and memory: exclusive fit checks
    /// are then O(1), and the node sits in a free-count bucket of its class.
    uniform: Option<(usize, u64)>,
    /// Index into `Cluster::classes` when `uniform`.
    class: Option<usize>,
}

/// Nodes whose GPUs are all of one model and memory size, bucketed by how many
/// whole GPUs they have free: finding the tightest or loosest node for an
/// exclusive request takes a few set look-ups instead of a scan of every node.
#[derive(Clone, Debug)]
struct Class {
    model: usize,
    memory_mib: u64,
    /// `free_to_nodes[k]`: nodes of this class with exactly `k` whole GPUs free.
    free_to_nodes: Vec<BTreeSet<u32>>,
}

/// The snapshot's nodes and what is free on them, updated by [`Cluster::commit`].
#[derive(Clone, Debug)]
pub struct Cluster<'s> {
    snapshot: &'s Snapshot,
    nodes: Vec<NodeState>,
    models: Vec<&'s str>,
    classes: Vec<Class>,
    /// Nodes without a class (mixed GPUs): searched by a scan.
    mixed_nodes: Vec<u32>,
    /// One bitset over nodes per `snapshot.eligible_sets` entry.
    eligible_bits: Vec<Vec<u64>>,
}

// === impl Cluster ===

impl<'s> Cluster<'s> {
    /// Indexes the snapshot.
    pub fn new(snapshot: &'s Snapshot) -> Self {
        let mut model_to_id: HashMap<&'s str, usize> = HashMap::new();
        let mut models = Vec::new();
        let mut nodes: Vec<NodeState> = snapshot
            .nodes
            .iter()
            .map(|node| {
                let mut groups = UnionFind::new(node.gpus.len());
                for (i, gpu) in node.gpus.iter().enumerate() {
                    for &peer in &gpu.nvlink_peers {
                        if (peer as usize) < node.gpus.len() {
                            groups.union(i, peer as usize);
                        }
                    }
                }
                let gpus: Vec<GpuState> = node
                    .gpus
                    .iter()
                    .enumerate()
                    .map(|(i, g)| {
                        let model = *model_to_id.entry(g.model.as_str()).or_insert_with(|| {
                            models.push(g.model.as_str());
                            models.len() - 1
                        });
                        GpuState {
                            model,
                            memory_mib: g.memory_mib,
                            free_mib: g.memory_mib.saturating_sub(g.allocated_mib),
                            exclusive: g.exclusive_owner.is_some(),
                            shares: g.shared_owners,
                            healthy: g.healthy,
                            group: groups.find(i) as u32,
                        }
                    })
                    .collect();
                let uniform = match gpus.first() {
                    Some(first)
                        if gpus.iter().all(|g| {
                            g.model == first.model && g.memory_mib == first.memory_mib
                        }) =>
                    {
                        Some((first.model, first.memory_mib))
                    }
                    _ => None,
                };
                let free_whole = gpus.iter().filter(|g| g.whole_free()).count() as u32;
                NodeState {
                    gpus,
                    free_whole,
                    uniform,
                    class: None,
                }
            })
            .collect();

        let mut classes: Vec<Class> = Vec::new();
        let mut mixed_nodes = Vec::new();
        for (n, node) in nodes.iter_mut().enumerate() {
            let Some((model, memory_mib)) = node.uniform else {
                mixed_nodes.push(n as u32);
                continue;
            };
            let c = match classes
                .iter()
                .position(|c| c.model == model && c.memory_mib == memory_mib)
            {
                Some(c) => c,
                None => {
                    classes.push(Class {
                        model,
                        memory_mib,
                        free_to_nodes: Vec::new(),
                    });
                    classes.len() - 1
                }
            };
            let buckets = &mut classes[c].free_to_nodes;
            if buckets.len() <= node.gpus.len() {
                buckets.resize_with(node.gpus.len() + 1, BTreeSet::new);
            }
            buckets[node.free_whole as usize].insert(n as u32);
            node.class = Some(c);
        }

        let words = snapshot.nodes.len().div_ceil(64);
        let eligible_bits = snapshot
            .eligible_sets
            .iter()
            .map(|set| {
                let mut bits = vec![0u64; words];
                for &n in set.iter().filter(|&&n| (n as usize) < snapshot.nodes.len()) {
                    bits[n as usize / 64] |= 1 << (n % 64);
                }
                bits
            })
            .collect();
        Cluster {
            snapshot,
            nodes,
            models,
            classes,
            mixed_nodes,
            eligible_bits,
        }
    }

    /// The snapshot this state was built from.
    pub fn snapshot(&self) -> &'s Snapshot {
        self.snapshot
    }

    /// Pending requests in the order they should be served: higher priority
    /// first, then older first, then by pod name (so the order is total).
    pub fn pending_in_order(&self) -> Vec<&'s Request> {
        let mut pending: Vec<&Request> = self.snapshot.pending.iter().collect();
        pending.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(a.created_ms.cmp(&b.created_ms))
                .then_with(|| a.pod.cmp(&b.pod))
        });
        pending
    }

    /// Prepares `request` for the fit checks below.
    pub fn want(&self, request: &'s Request) -> Want<'s> {
        let model_ok = self
            .models
            .iter()
            .map(|m| request.model.as_deref().is_none_or(|p| glob_match(p, m)))
            .collect();
        Want { request, model_ok }
    }

    /// The nodes `request` may run on (sorted indices into `snapshot.nodes`).
    pub fn eligible(&self, request: &Request) -> &'s [u32] {
        self.snapshot
            .eligible_sets
            .get(request.eligible_set as usize)
            .map_or(&[], Vec::as_slice)
    }

    /// Whether `request` may run on `node`.
    pub fn is_eligible(&self, request: &Request, node: u32) -> bool {
        self.eligible_bits
            .get(request.eligible_set as usize)
            .and_then(|bits| bits.get(node as usize / 64))
            .is_some_and(|word| word & (1 << (node % 64)) != 0)
    }

    /// The eligible node that fits `want` with the least (`Fit::Tightest`) or
    /// most (`Fit::Loosest`) [`Cluster::headroom`]; ties go to the lowest
    /// index. Exclusive requests on nodes of one GPU type are found through
    /// free-count buckets, without scanning every node.
    pub fn choose_node(&self, want: &Want, fit: Fit) -> Option<u32> {
        let better = |a: (u64, u32), b: Option<(u64, u32)>| match (b, fit) {
            (None, _) => true,
            (Some(b), Fit::Tightest) => a.0 < b.0 || (a.0 == b.0 && a.1 < b.1),
            (Some(b), Fit::Loosest) => a.0 > b.0 || (a.0 == b.0 && a.1 < b.1),
        };
        let mut best: Option<(u64, u32)> = None;
        let mut consider = |candidate: (u64, u32)| {
            if better(candidate, best) {
                best = Some(candidate);
            }
        };
        if want.exclusive() {
            let count = want.request.count as usize;
            for class in &self.classes {
                if !want.model_ok[class.model] || class.memory_mib < want.request.memory_mib {
                    continue;
                }
                let first_eligible = |free: usize| {
                    let nodes = &class.free_to_nodes[free];
                    nodes
                        .iter()
                        .copied()
                        .find(|&n| self.is_eligible(want.request, n))
                        .map(|n| (free as u64, n))
                };
                let levels = count..class.free_to_nodes.len();
                let found = match fit {
                    Fit::Tightest => levels.clone().find_map(first_eligible),
                    Fit::Loosest => levels.rev().find_map(first_eligible),
                };
                if let Some(candidate) = found {
                    consider(candidate);
                }
            }
            for &node in &self.mixed_nodes {
                if self.is_eligible(want.request, node) && self.fits(node, want) {
                    consider((self.headroom(node, want), node));
                }
            }
        } else {
            for &node in self.eligible(want.request) {
                if (node as usize) < self.nodes.len() && self.fits(node, want) {
                    consider((self.headroom(node, want), node));
                }
            }
        }
        best.map(|(_, node)| node)
    }

    /// Number of nodes in the snapshot.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The node's name.
    pub fn node_name(&self, node: u32) -> &'s str {
        &self.snapshot.nodes[node as usize].name
    }

    /// GPUs on the node that nobody holds any part of.
    pub fn free_whole(&self, node: u32) -> u32 {
        self.nodes[node as usize].free_whole
    }

    /// Healthy GPUs on the node.
    pub fn healthy(&self, node: u32) -> u32 {
        self.nodes[node as usize]
            .gpus
            .iter()
            .filter(|g| g.healthy)
            .count() as u32
    }

    /// Room left on the node for requests like `want`: free whole GPUs for an
    /// exclusive request, free MiB on GPUs it could share for a shared one.
    pub fn headroom(&self, node: u32, want: &Want) -> u64 {
        let state = &self.nodes[node as usize];
        if want.exclusive() {
            u64::from(state.free_whole)
        } else {
            state
                .gpus
                .iter()
                .filter(|g| g.fits(want))
                .map(|g| g.free_mib)
                .sum()
        }
    }

    /// True when the node has `count` GPUs that fit `want` right now.
    pub fn fits(&self, node: u32, want: &Want) -> bool {
        let state = &self.nodes[node as usize];
        let count = want.request.count;
        if want.exclusive() {
            if state.free_whole < count {
                return false;
            }
            if let Some((model, memory_mib)) = state.uniform {
                return want.model_ok[model] && memory_mib >= want.request.memory_mib;
            }
        }
        state
            .gpus
            .iter()
            .filter(|g| g.fits(want))
            .take(count as usize)
            .count()
            == count as usize
    }

    /// Why `want` fits on none of its eligible nodes.
    pub fn shortfall(&self, want: &Want) -> Shortfall {
        let eligible = self.eligible(want.request);
        let valid = eligible
            .iter()
            .filter(|&&n| (n as usize) < self.nodes.len());
        if valid.clone().next().is_none() {
            return Shortfall::NoEligibleNode;
        }
        let count = want.request.count as usize;
        let ever = valid.into_iter().any(|&n| {
            let gpus = &self.nodes[n as usize].gpus;
            gpus.iter().filter(|g| g.could_ever_fit(want)).count() >= count
        });
        if ever {
            Shortfall::NotNow(want.describe())
        } else {
            Shortfall::Never(want.describe())
        }
    }

    /// Chooses `count` GPUs on `node` for `want`, as positions in the node's GPU
    /// list. Exclusive requests for more than one GPU prefer GPUs joined by
    /// NVLink when `prefer_nvlink`; `fit` picks the tightest or loosest group
    /// (exclusive) or GPU (shared). `None` when the node does not fit.
    pub fn pick_gpus(
        &self,
        node: u32,
        want: &Want,
        fit: Fit,
        prefer_nvlink: bool,
    ) -> Option<Vec<usize>> {
        let gpus = &self.nodes[node as usize].gpus;
        let count = want.request.count as usize;
        let mut candidates: Vec<usize> = (0..gpus.len()).filter(|&i| gpus[i].fits(want)).collect();
        if candidates.len() < count {
            return None;
        }
        if want.exclusive() {
            if prefer_nvlink && count > 1 {
                let mut by_group: Vec<(u32, Vec<usize>)> = Vec::new();
                for &i in &candidates {
                    match by_group.iter_mut().find(|(g, _)| *g == gpus[i].group) {
                        Some((_, members)) => members.push(i),
                        None => by_group.push((gpus[i].group, vec![i])),
                    }
                }
                let best = by_group
                    .into_iter()
                    .filter(|(_, m)| m.len() >= count)
                    .reduce(|a, b| {
                        let better = match fit {
                            Fit::Tightest => b.1.len() < a.1.len(),
                            Fit::Loosest => b.1.len() > a.1.len(),
                        };
                        if better { b } else { a }
                    });
                if let Some((_, members)) = best {
                    candidates = members;
                }
            }
        } else {
            // Stable sort: ties keep index order.
            match fit {
                Fit::Tightest => candidates.sort_by_key(|&i| gpus[i].free_mib),
                Fit::Loosest => candidates.sort_by_key(|&i| std::cmp::Reverse(gpus[i].free_mib)),
            }
        }
        candidates.truncate(count);
        candidates.sort_unstable();
        Some(candidates)
    }

    /// Records that `want` took the GPUs at `positions` on `node`.
    pub fn commit(&mut self, node: u32, positions: &[usize], want: &Want) {
        let state = &mut self.nodes[node as usize];
        let free_before = state.free_whole as usize;
        for &i in positions {
            let gpu = &mut state.gpus[i];
            if gpu.whole_free() {
                state.free_whole -= 1;
            }
            if want.exclusive() {
                gpu.exclusive = true;
                gpu.free_mib = 0;
            } else {
                gpu.shares += 1;
                gpu.free_mib = gpu.free_mib.saturating_sub(want.request.memory_mib);
            }
        }
        let free_after = state.free_whole as usize;
        if let Some(c) = state.class
            && free_after != free_before
        {
            let buckets = &mut self.classes[c].free_to_nodes;
            buckets[free_before].remove(&node);
            buckets[free_after].insert(node);
        }
    }

    /// Places `want` on `node` if it fits: picks the GPUs (see
    /// [`Cluster::pick_gpus`]), commits them and returns the assignment.
    pub fn place(
        &mut self,
        node: u32,
        want: &Want,
        fit: Fit,
        prefer_nvlink: bool,
    ) -> Option<Decision> {
        let positions = self.pick_gpus(node, want, fit, prefer_nvlink)?;
        self.commit(node, &positions, want);
        Some(assign(
            &want.request.pod,
            self.node_name(node),
            self.uuids(node, &positions),
        ))
    }

    /// The decision for a request no node can take this round: `wait` when
    /// GPUs may free up, `reject` when it can never fit an eligible node.
    pub fn unplaced(&self, want: &Want) -> Decision {
        let shortfall = self.shortfall(want);
        if shortfall.is_permanent() {
            reject(&want.request.pod, shortfall.reason())
        } else {
            wait(&want.request.pod, shortfall.reason())
        }
    }

    /// UUIDs of the GPUs at `positions` on `node`.
    pub fn uuids(&self, node: u32, positions: &[usize]) -> Vec<String> {
        let gpus = &self.snapshot.nodes[node as usize].gpus;
        positions.iter().map(|&i| gpus[i].uuid.clone()).collect()
    }
}

/// Union-find over GPU positions, for NVLink groups.
struct UnionFind(Vec<usize>);

impl UnionFind {
    fn new(n: usize) -> Self {
        UnionFind((0..n).collect())
    }

    fn find(&mut self, mut i: usize) -> usize {
        while self.0[i] != i {
            self.0[i] = self.0[self.0[i]];
            i = self.0[i];
        }
        i
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.0[ra.max(rb)] = ra.min(rb);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, request, snapshot};

    #[test]
    fn exclusive_fit_counts_whole_free_gpus_and_commits() {
        let mut n = node("a", 4, "NVIDIA H100 80GB HBM3", 81920);
        n.gpus[0].exclusive_owner = Some("ns/other".into());
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
                Request {
                    model: Some("NVIDIA H100*".into()),
                    ..request("ns/h", 1, Sharing::Exclusive, 0)
                },
                request("ns/big", 1, Sharing::Exclusive, 81920),
                Request {
                    model: Some("*A100*".into()),
                    ..request("ns/a", 2, Sharing::Exclusive, 40960)
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
            n.gpus[i as usize].nvlink_peers.push(j);
            n.gpus[j as usize].nvlink_peers.push(i);
        }
        n.gpus[0].exclusive_owner = Some("ns/o".into());
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

    fn gpu_less_node() -> crate::Node {
        crate::Node {
            name: "cpu".into(),
            labels: vec![],
            gpus: vec![],
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
                    for &n in cluster.eligible(request) {
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
}
