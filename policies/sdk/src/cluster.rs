//! Round state: what is free on each node, updated as a policy places pods, so
//! a policy never hands out the same GPU twice within its own round.
//!
//! Finding a node does not scan the cluster per request: exclusive requests on
//! nodes of one GPU type go through free-count buckets, shared requests through
//! an index per request shape (model, memory, count) that orders the nodes by
//! headroom and catches up with the nodes commits touched since it was last
//! used, and whether a request could ever fit is worked out once per shape and
//! eligible set.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use crate::nvlink::Nvlink;
use crate::{nvlink, reason};
use wasmgpu_contract::{
    Ask, Claim, Decision, GpuShape, Request, Sharing, Snapshot, assign, glob_match, reject, wait,
};

mod claims;
mod preempt;
mod query;
mod running_on;

pub use query::GpuNow;
use running_on::RunningOn;

/// A profile name no MIG instance of the snapshot has.
const NO_PROFILE: u32 = u32::MAX;

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

    /// The reason, in words (the wording of [`reason`]).
    pub fn reason(&self) -> String {
        match self {
            Shortfall::NoEligibleNode => reason::no_eligible_node(),
            Shortfall::Never(what) => reason::never(what),
            Shortfall::NotNow(what) => reason::not_now(what),
        }
    }
}

/// A request prepared for fast fit checks (see [`Cluster::want`]).
#[derive(Clone, Debug)]
pub struct Want<'s> {
    /// The request.
    pub request: &'s Request,
    /// What it asks for: its GPUResource's shape ([`NO_SHAPE`] for a DRA
    /// request, which fits nowhere through the GPU fit helpers: place it
    /// with [`Cluster::place_claims`]).
    pub shape: &'s GpuShape,
    /// The request's position in `snapshot.pending`: what decisions name.
    pub position: u32,
    model_ok: Vec<bool>,
    /// For a MIG request: the profile, as an index into `snapshot.mig_profiles`.
    mig: Option<u32>,
}

/// The shape the GPU fit helpers give a DRA request: no GPU fits it
/// ([`Cluster::place_claims`] places DRA requests). Its sharing is
/// `Exclusive`, so [`Cluster::commit`] holds a DRA request's devices
/// exclusively.
pub static NO_SHAPE: GpuShape = GpuShape {
    count: 0,
    model: None,
    mig_profile: None,
    memory_mib: u64::MAX,
    sharing: Sharing::Exclusive,
};

/// The GPU shape of a GPUResource request; none for a DRA request.
pub fn shape_of(request: &Request) -> Option<&GpuShape> {
    match &request.ask {
        Ask::Gpus(shape) => Some(shape),
        Ask::Claims(_) => None,
    }
}

/// The devices `request` asks for: its GPUResource's `count`, or for a DRA
/// request the sum over its claims' requests of each one's first
/// alternative's `count` (a later alternative may want another number).
///
/// ```
/// use wasmgpu_policy_sdk::{Sharing::Exclusive, devices_of};
/// use wasmgpu_policy_sdk::testing::{claim, dra_request, request};
///
/// assert_eq!(devices_of(&request("ns/p", 2, Exclusive, 0)), 2);
/// let dra = dra_request("ml/train", vec![claim("ml/train", &[("gpus", 2, 0), ("nic", 1, 1)])]);
/// assert_eq!(devices_of(&dra), 3);
/// ```
pub fn devices_of(request: &Request) -> u32 {
    match &request.ask {
        Ask::Gpus(shape) => shape.count,
        Ask::Claims(claims) => claims
            .iter()
            .map(Claim::devices_asked)
            .fold(0, u32::saturating_add),
    }
}

impl<'s> Want<'s> {
    fn exclusive(&self) -> bool {
        self.shape.sharing == Sharing::Exclusive
    }

    /// True for a DRA request (claims): the GPU fit helpers place none;
    /// [`Cluster::place_claims`] does.
    pub fn is_dra(&self) -> bool {
        shape_of(self.request).is_none()
    }

    /// The claims of a DRA request (empty when all are allocated already
    /// and the pod only needs a node); `None` for a GPUResource request.
    pub fn claims(&self) -> Option<&'s [Claim]> {
        match &self.request.ask {
            Ask::Claims(claims) => Some(claims),
            Ask::Gpus(_) => None,
        }
    }

    /// The devices the request asks for ([`devices_of`]): what the tenant
    /// limit counts before placing.
    pub fn devices(&self) -> u32 {
        devices_of(self.request)
    }

    /// True when the request asks for MIG instances, not whole GPUs.
    pub fn is_mig(&self) -> bool {
        self.mig.is_some()
    }

    /// True when the request asks for whole GPUs of its own (not shares,
    /// not MIG instances).
    pub fn is_exclusive_whole(&self) -> bool {
        self.exclusive() && !self.is_mig()
    }

    /// True when `nvlink` changes which GPUs the request gets: an exclusive
    /// request for more than one whole GPU, and `nvlink` is not `Ignore`.
    pub fn uses_nvlink(&self, nvlink: Nvlink) -> bool {
        nvlink != Nvlink::Ignore && self.is_exclusive_whole() && self.shape.count > 1
    }

    /// What the request asks for, in words ([`reason::asked`]).
    pub fn describe(&self) -> String {
        reason::asked(self.request)
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
    /// For a MIG instance: its parent's position and its profile.
    mig: Option<(u32, u32)>,
    /// For a whole GPU: how many of its MIG instances are held.
    mig_held: u32,
    /// For a MIG instance: its parent is held whole or shared.
    parent_busy: bool,
}

impl GpuState {
    /// A whole GPU (not a MIG instance) nobody holds any part of.
    fn whole_free(&self) -> bool {
        self.mig.is_none()
            && self.healthy
            && !self.exclusive
            && self.shares == 0
            && self.mig_held == 0
            && self.free_mib == self.memory_mib
    }

    fn fits(&self, want: &Want) -> bool {
        if !self.healthy || self.exclusive || !want.model_ok[self.model] {
            return false;
        }
        match (want.mig, self.mig) {
            (Some(profile), Some((_, has))) => {
                profile == has && !self.parent_busy && self.memory_mib >= want.shape.memory_mib
            }
            (Some(_), None) | (None, Some(_)) => false,
            (None, None) if self.mig_held > 0 => false,
            (None, None) if want.exclusive() => {
                self.shares == 0
                    && self.free_mib == self.memory_mib
                    && self.memory_mib >= want.shape.memory_mib
            }
            (None, None) => self.free_mib >= want.shape.memory_mib,
        }
    }

    fn could_ever_fit(&self, want: &Want) -> bool {
        self.healthy
            && want.model_ok[self.model]
            && match (want.mig, self.mig) {
                (Some(profile), Some((_, has))) => {
                    profile == has && self.memory_mib >= want.shape.memory_mib
                }
                (None, None) => self.memory_mib >= want.shape.memory_mib,
                _ => false,
            }
    }
}

#[derive(Clone, Debug)]
struct NodeState {
    gpus: Vec<GpuState>,
    /// Whole GPUs nobody holds any part of.
    free_whole: u32,
    /// Healthy whole GPUs.
    healthy: u32,
    /// The node lists MIG instances: such nodes are searched by a scan.
    has_mig: bool,
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

/// What a request asks for, as far as fitting goes: requests of one shape fit
/// the same nodes, with the same headroom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Shape<'s> {
    /// The model glob; it decides `Want::model_ok`.
    model: Option<&'s str>,
    mig_profile: Option<&'s str>,
    memory_mib: u64,
    count: u32,
}

impl<'s> Shape<'s> {
    fn of(shape: &'s GpuShape) -> Self {
        Shape {
            model: shape.model.as_deref(),
            mig_profile: shape.mig_profile.as_deref(),
            memory_mib: shape.memory_mib,
            count: shape.count,
        }
    }
}

/// Eligible sets this small are scanned node by node instead of walking a
/// shared index past the nodes outside the set.
const SCAN_AT_MOST: usize = 64;

/// The nodes a shared request of one shape fits, ordered by headroom.
#[derive(Clone, Debug)]
struct SharedIndex {
    /// How much of `Cluster::touched` this index has caught up with.
    seen: usize,
    /// Per node: its headroom when it fits, else `None`.
    room: Vec<Option<u64>>,
    /// `(headroom, node)` for every node whose `room` is `Some`.
    by_room: BTreeSet<(u64, u32)>,
}

/// Indexes built on first use during a round.
#[derive(Clone, Debug, Default)]
struct ShapeIndexes<'s> {
    shared: BTreeMap<Shape<'s>, SharedIndex>,
    /// What the nodes of an eligible set could hold once idle, per shape.
    /// Commits do not change it.
    ever: BTreeMap<(u32, Shape<'s>), Ever>,
}

/// What the nodes of an eligible set could hold once idle; `None` until
/// worked out.
#[derive(Clone, Copy, Debug, Default)]
struct Ever {
    /// Whether a node could hold the shape; `None` inside when the set has
    /// no node at all.
    fits: Option<Option<bool>>,
    /// Whether a node has `count` GPUs of the shape that are all NVLink
    /// peers of one another.
    clique: Option<bool>,
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
    /// Nodes in the order commits changed them (with repeats).
    touched: Vec<u32>,
    /// Built lazily by `&self` methods, hence the cell.
    shapes: RefCell<ShapeIndexes<'s>>,
    /// Per node: its running pods, and the lowest priority among them.
    running_on: RunningOn,
    /// Running pods already named as victims this round.
    victim_taken: Vec<bool>,
    /// GPUs each tenant of `snapshot.tenants` holds, with this round's
    /// commits.
    tenant_held: Vec<u32>,
}

// === impl Cluster ===

impl<'s> Cluster<'s> {
    /// Indexes the snapshot.
    pub fn new(snapshot: &'s Snapshot) -> Self {
        let models: Vec<&'s str> = snapshot.models.iter().map(String::as_str).collect();
        // A model index out of range (the host never sends one) reads as a
        // model no glob matches.
        let unknown_model = models.len();
        let mut groups = UnionFind(Vec::new());
        let mut nodes: Vec<NodeState> = snapshot
            .nodes
            .iter()
            .map(|node| {
                groups.reset(node.gpus.len());
                for (i, gpu) in node.gpus.iter().enumerate() {
                    for peer in crate::nvlink::peer_positions(node, gpu) {
                        groups.union(i, peer);
                    }
                }
                let mut gpus: Vec<GpuState> = node
                    .gpus
                    .iter()
                    .enumerate()
                    .map(|(i, g)| GpuState {
                        model: (g.model as usize).min(unknown_model),
                        memory_mib: g.memory_mib,
                        free_mib: g.memory_mib.saturating_sub(g.allocated_mib),
                        exclusive: g.held,
                        shares: g.shared_owners,
                        // A GPU only a DRA driver publishes is not for a
                        // GPUResource request: these helpers never give it.
                        healthy: g.healthy
                            && g.published_by != wasmgpu_contract::Publisher::DraDriver,
                        group: groups.find(i) as u32,
                        mig: g
                            .mig
                            .as_ref()
                            .filter(|m| (m.parent as usize) < node.gpus.len())
                            .map(|m| (m.parent, m.profile)),
                        mig_held: 0,
                        parent_busy: false,
                    })
                    .collect();
                let has_mig = gpus.iter().any(|g| g.mig.is_some());
                if has_mig {
                    for i in 0..gpus.len() {
                        if let Some((parent, _)) = gpus[i].mig {
                            let p = &gpus[parent as usize];
                            let busy = p.exclusive || p.shares > 0 || p.free_mib < p.memory_mib;
                            let parent_healthy = p.healthy;
                            gpus[i].parent_busy = busy;
                            // An instance takes its parent's health.
                            gpus[i].healthy &= parent_healthy;
                            if gpus[i].exclusive {
                                gpus[parent as usize].mig_held += 1;
                            }
                        }
                    }
                }
                let uniform = match gpus.first() {
                    Some(first)
                        if !has_mig
                            && gpus.iter().all(|g| {
                                g.model == first.model && g.memory_mib == first.memory_mib
                            }) =>
                    {
                        Some((first.model, first.memory_mib))
                    }
                    _ => None,
                };
                let free_whole = gpus.iter().filter(|g| g.whole_free()).count() as u32;
                let healthy = gpus.iter().filter(|g| g.healthy && g.mig.is_none()).count() as u32;
                NodeState {
                    gpus,
                    free_whole,
                    healthy,
                    has_mig,
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

        // Nodes past the snapshot's (never sent by the host) are dropped.
        let words = snapshot.nodes.len().div_ceil(64);
        let last_bits = match snapshot.nodes.len() % 64 {
            0 => u64::MAX,
            n => (1 << n) - 1,
        };
        let eligible_bits = snapshot
            .eligible_sets
            .iter()
            .map(|set| {
                let mut bits: Vec<u64> = set.iter().copied().take(words).collect();
                bits.resize(words, 0);
                if let Some(last) = bits.last_mut() {
                    *last &= last_bits;
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
            touched: Vec::new(),
            shapes: RefCell::default(),
            running_on: RunningOn::new(snapshot),
            victim_taken: vec![false; snapshot.running.len()],
            tenant_held: snapshot.tenants.iter().map(|t| t.holding).collect(),
        }
    }

    /// The snapshot this state was built from.
    pub fn snapshot(&self) -> &'s Snapshot {
        self.snapshot
    }

    /// Pending GPUResource requests in the order they should be served:
    /// higher priority first, then older first, then by pod name (so the
    /// order is total).
    ///
    /// Only GPUResource requests, which the GPU fit helpers place: DRA
    /// requests are in [`Cluster::dra_pending`], and both, in one order, in
    /// [`Cluster::all_pending_in_order`] (what [`crate::place_each`] serves).
    pub fn pending_in_order(&self) -> Vec<&'s Request> {
        let mut pending: Vec<&Request> = self
            .snapshot
            .pending
            .iter()
            .filter(|r| shape_of(r).is_some())
            .collect();
        sort_in_order(&mut pending);
        pending
    }

    /// The pending DRA requests (claims), in the order of
    /// [`Cluster::pending_in_order`]. The GPU fit helpers do not place
    /// them; [`Cluster::place_claims`] does (a policy that decides none of
    /// them leaves them waiting).
    pub fn dra_pending(&self) -> Vec<&'s Request> {
        let mut pending: Vec<&Request> = self
            .snapshot
            .pending
            .iter()
            .filter(|r| shape_of(r).is_none())
            .collect();
        sort_in_order(&mut pending);
        pending
    }

    /// Every pending request, GPUResource and DRA alike, in the order of
    /// [`Cluster::pending_in_order`] (priority, then age, then pod name):
    /// the two lists above merged.
    pub fn all_pending_in_order(&self) -> Vec<&'s Request> {
        let mut pending: Vec<&Request> = self.snapshot.pending.iter().collect();
        sort_in_order(&mut pending);
        pending
    }

    /// Prepares `request` for the fit checks below.
    pub fn want(&self, request: &'s Request) -> Want<'s> {
        let shape = shape_of(request).unwrap_or(&NO_SHAPE);
        let dra = shape_of(request).is_none();
        let mut model_ok: Vec<bool> = self
            .models
            .iter()
            .map(|m| !dra && shape.model.as_deref().is_none_or(|p| glob_match(p, m)))
            .collect();
        // The slot for a model index out of range.
        model_ok.push(false);
        let mig = shape.mig_profile.as_deref().map(|wanted| {
            self.snapshot
                .mig_profiles
                .iter()
                .position(|p| p == wanted)
                .map_or(NO_PROFILE, |p| p as u32)
        });
        Want {
            request,
            shape,
            position: self.position(request),
            model_ok,
            mig,
        }
    }

    /// The position of `request` in `snapshot.pending`: found by address when
    /// it is borrowed from the snapshot, else by pod name.
    pub fn position(&self, request: &Request) -> u32 {
        let pending = &self.snapshot.pending;
        let size = std::mem::size_of::<Request>();
        let base = pending.as_ptr() as usize;
        let addr = std::ptr::from_ref(request) as usize;
        if addr >= base && addr < base + size * pending.len() && (addr - base).is_multiple_of(size)
        {
            return ((addr - base) / size) as u32;
        }
        pending
            .iter()
            .position(|r| r.pod == request.pod)
            .map_or(u32::MAX, |p| p as u32)
    }

    /// The nodes `request` may run on (ascending indices into `snapshot.nodes`).
    pub fn eligible(&self, request: &Request) -> impl Iterator<Item = u32> + '_ {
        let set = self
            .eligible_bits
            .get(request.eligible_set as usize)
            .map_or(&[][..], Vec::as_slice);
        wasmgpu_contract::bits::indices(set)
    }

    /// How many nodes `request` may run on.
    pub fn eligible_count(&self, request: &Request) -> usize {
        self.eligible_bits
            .get(request.eligible_set as usize)
            .map_or(0, |set| wasmgpu_contract::bits::count(set) as usize)
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
    /// free-count buckets, shared requests through an index of their shape
    /// ordered by headroom: neither scans every node.
    pub fn choose_node(&self, want: &Want<'s>, fit: Fit) -> Option<u32> {
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
        if want.is_mig() {
            // MIG nodes are few: scan them.
            for node in self.eligible(want.request) {
                if (node as usize) < self.nodes.len()
                    && self.nodes[node as usize].has_mig
                    && self.fits(node, want)
                {
                    consider((self.headroom(node, want), node));
                }
            }
        } else if want.exclusive() {
            let count = want.shape.count as usize;
            for class in &self.classes {
                if !want.model_ok[class.model] || class.memory_mib < want.shape.memory_mib {
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
        } else if self.eligible_count(want.request) <= SCAN_AT_MOST {
            for node in self.eligible(want.request) {
                if (node as usize) < self.nodes.len()
                    && let Some(room) = self.shared_room(node, want)
                {
                    consider((room, node));
                }
            }
        } else {
            let mut shapes = self.shapes.borrow_mut();
            let index = shapes
                .shared
                .entry(Shape::of(want.shape))
                .or_insert_with(|| self.shared_index(want));
            self.catch_up(index, want);
            // Walk from the preferred end, past the nodes outside the set.
            let eligible = |&&(_, node): &&(u64, u32)| self.is_eligible(want.request, node);
            let found = match fit {
                Fit::Tightest => index.by_room.iter().find(eligible).copied(),
                // The most room, then the lowest index with that room.
                Fit::Loosest => index
                    .by_room
                    .iter()
                    .rev()
                    .find(eligible)
                    .and_then(|&(room, _)| {
                        let same = index.by_room.range((room, 0)..=(room, u32::MAX));
                        same.clone().find(eligible).copied()
                    }),
            };
            if let Some(candidate) = found {
                consider(candidate);
            }
        }
        best.map(|(_, node)| node)
    }

    /// Headroom of `node` for the shared request `want` when it fits there
    /// (`count` GPUs with the memory free), else `None`.
    fn shared_room(&self, node: u32, want: &Want<'s>) -> Option<u64> {
        let (mut fitting, mut room) = (0u32, 0u64);
        for gpu in &self.nodes[node as usize].gpus {
            if gpu.fits(want) {
                fitting += 1;
                room += gpu.free_mib;
            }
        }
        (fitting >= want.shape.count).then_some(room)
    }

    /// A fresh index of every node for shared requests shaped like `want`.
    fn shared_index(&self, want: &Want<'s>) -> SharedIndex {
        let room: Vec<Option<u64>> = (0..self.nodes.len() as u32)
            .map(|node| self.shared_room(node, want))
            .collect();
        let by_room = room
            .iter()
            .enumerate()
            .filter_map(|(node, room)| room.map(|room| (room, node as u32)))
            .collect();
        SharedIndex {
            seen: self.touched.len(),
            room,
            by_room,
        }
    }

    /// Brings `index` up to date with the nodes committed to since it was
    /// built or last used.
    fn catch_up(&self, index: &mut SharedIndex, want: &Want<'s>) {
        for &node in &self.touched[index.seen..] {
            let room = self.shared_room(node, want);
            let slot = &mut index.room[node as usize];
            if *slot != room {
                if let Some(old) = slot.take() {
                    index.by_room.remove(&(old, node));
                }
                if let Some(new) = room {
                    index.by_room.insert((new, node));
                }
                *slot = room;
            }
        }
        index.seen = self.touched.len();
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
        self.nodes[node as usize].healthy
    }

    /// Room left on the node for requests like `want`: free whole GPUs for an
    /// exclusive request, free MiB on GPUs it could share for a shared one,
    /// free instances of its profile for a MIG request.
    pub fn headroom(&self, node: u32, want: &Want) -> u64 {
        let state = &self.nodes[node as usize];
        if want.is_mig() {
            state.gpus.iter().filter(|g| g.fits(want)).count() as u64
        } else if want.exclusive() {
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
        let count = want.shape.count;
        if want.exclusive() && !want.is_mig() {
            if state.free_whole < count {
                return false;
            }
            if let Some((model, memory_mib)) = state.uniform {
                return want.model_ok[model] && memory_mib >= want.shape.memory_mib;
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

    /// Why `want` fits on none of its eligible nodes (for a DRA request,
    /// [`Cluster::claims_shortfall`]).
    pub fn shortfall(&self, want: &Want<'s>) -> Shortfall {
        if want.is_dra() {
            return self.claims_shortfall(want);
        }
        let mut shapes = self.shapes.borrow_mut();
        let ever = shapes
            .ever
            .entry((want.request.eligible_set, Shape::of(want.shape)))
            .or_default();
        match *ever.fits.get_or_insert_with(|| self.ever_fits(want)) {
            None => Shortfall::NoEligibleNode,
            Some(true) => Shortfall::NotNow(want.describe()),
            Some(false) => Shortfall::Never(want.describe()),
        }
    }

    /// Whether an eligible node could hold `want` once idle; `None` when no
    /// node is eligible.
    fn ever_fits(&self, want: &Want<'s>) -> Option<bool> {
        let mut valid = self
            .eligible(want.request)
            .filter(|&n| (n as usize) < self.nodes.len())
            .peekable();
        valid.peek()?;
        let count = want.shape.count as usize;
        Some(valid.any(|n| {
            let node = &self.nodes[n as usize];
            match node.uniform {
                Some((model, memory_mib)) if !want.is_mig() => {
                    want.model_ok[model]
                        && memory_mib >= want.shape.memory_mib
                        && node.healthy as usize >= count
                }
                _ => node.gpus.iter().filter(|g| g.could_ever_fit(want)).count() >= count,
            }
        }))
    }

    /// Chooses `count` GPUs on `node` for `want`, as positions in the node's GPU
    /// list (sorted). `None` when the node does not fit.
    ///
    /// * An exclusive request for more than one whole GPU follows `nvlink`
    ///   (an [`Nvlink`], or a `bool`: `true` is [`Nvlink::Prefer`], `false`
    ///   [`Nvlink::Ignore`]): `Prefer` takes the GPUs from one NVLink
    ///   *group* (connected, not necessarily all peers of one another) —
    ///   the tightest group that holds the request for `Fit::Tightest`, the
    ///   largest for `Fit::Loosest` — and falls back to the first free GPUs
    ///   when no group holds it; `Require` takes GPUs that are all NVLink
    ///   peers of one another (the first such set in the tightest, or
    ///   largest, group that has one) and gives `None` when there is none,
    ///   never falling back; `Ignore` takes the first free GPUs.
    /// * A shared request takes the GPUs with the least (`Fit::Tightest`) or
    ///   most (`Fit::Loosest`) free memory.
    /// * A MIG request takes instances of parents with the fewest (most)
    ///   instances still free.
    ///
    /// ```
    /// use wasmgpu_policy_sdk::{Cluster, Fit, Nvlink, Sharing::Exclusive};
    /// use wasmgpu_policy_sdk::testing::{node, request, snapshot, with_nvlink};
    ///
    /// // A ring 0-1-2-3-0: one NVLink group, but no three GPUs all peers.
    /// let ring = with_nvlink(node("a", 4, "NVIDIA A100", 40960), &[(0, 1), (1, 2), (2, 3), (3, 0)]);
    /// let snap = snapshot(vec![ring], vec![request("ns/p", 3, Exclusive, 0)]);
    /// let cluster = Cluster::new(&snap);
    /// let want = cluster.want(&snap.pending[0]);
    /// assert_eq!(cluster.pick_gpus(0, &want, Fit::Tightest, Nvlink::Prefer), Some(vec![0, 1, 2]));
    /// assert_eq!(cluster.pick_gpus(0, &want, Fit::Tightest, Nvlink::Require), None);
    /// ```
    pub fn pick_gpus(
        &self,
        node: u32,
        want: &Want,
        fit: Fit,
        nvlink: impl Into<Nvlink>,
    ) -> Option<Vec<usize>> {
        self.pick(node, want, fit, nvlink.into())
    }

    /// [`Cluster::pick_gpus`], compiled once.
    fn pick(&self, node: u32, want: &Want, fit: Fit, nvlink: Nvlink) -> Option<Vec<usize>> {
        let gpus = &self.nodes[node as usize].gpus;
        let count = want.shape.count as usize;
        let mut candidates: Vec<usize> = (0..gpus.len()).filter(|&i| gpus[i].fits(want)).collect();
        if candidates.len() < count {
            return None;
        }
        if want.is_mig() {
            // Pack (or spread) instances by how many of their parent's
            // instances are still free: fewest free first packs them onto the
            // fewest parents. Stable: ties keep index order.
            let free_siblings = |i: usize| {
                let parent = gpus[i].mig.map(|(p, _)| p);
                gpus.iter()
                    .filter(|g| g.mig.map(|(p, _)| p) == parent && !g.exclusive)
                    .count()
            };
            match fit {
                Fit::Tightest => candidates.sort_by_key(|&i| free_siblings(i)),
                Fit::Loosest => candidates.sort_by_key(|&i| std::cmp::Reverse(free_siblings(i))),
            }
        } else if want.exclusive() {
            if nvlink == Nvlink::Require && count > 1 {
                return self.pick_clique(node, &candidates, count, fit);
            }
            if nvlink == Nvlink::Prefer && count > 1 {
                // The NVLink groups among the candidates, in order of first
                // appearance; the first of the tightest (loosest) that holds
                // `count` wins. A node has a handful of GPUs: counting in
                // place beats building lists.
                let group_of = |i: usize| gpus[i].group;
                let mut best: Option<(u32, usize)> = None;
                for (k, &i) in candidates.iter().enumerate() {
                    let group = group_of(i);
                    if candidates[..k].iter().any(|&j| group_of(j) == group) {
                        continue;
                    }
                    let size = candidates.iter().filter(|&&j| group_of(j) == group).count();
                    let better = match (best, fit) {
                        _ if size < count => false,
                        (None, _) => true,
                        (Some((_, b)), Fit::Tightest) => size < b,
                        (Some((_, b)), Fit::Loosest) => size > b,
                    };
                    if better {
                        best = Some((group, size));
                    }
                }
                if let Some((group, _)) = best {
                    candidates.retain(|&i| group_of(i) == group);
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

    /// `count` of `candidates` (free GPUs of `node`) that are all NVLink
    /// peers of one another: groups are tried tightest (loosest) first, as
    /// `Prefer` orders them, and the first clique of the first group that
    /// has one wins.
    fn pick_clique(
        &self,
        node: u32,
        candidates: &[usize],
        count: usize,
        fit: Fit,
    ) -> Option<Vec<usize>> {
        let gpus = &self.nodes[node as usize].gpus;
        let mut groups: Vec<(u32, usize)> = Vec::new();
        for &i in candidates {
            match groups.iter_mut().find(|(g, _)| *g == gpus[i].group) {
                Some((_, size)) => *size += 1,
                None => groups.push((gpus[i].group, 1)),
            }
        }
        groups.retain(|&(_, size)| size >= count);
        match fit {
            Fit::Tightest => groups.sort_by_key(|&(_, size)| size),
            Fit::Loosest => groups.sort_by_key(|&(_, size)| std::cmp::Reverse(size)),
        }
        let node = &self.snapshot.nodes[node as usize];
        groups.iter().find_map(|&(group, _)| {
            let members: Vec<usize> = candidates
                .iter()
                .copied()
                .filter(|&i| gpus[i].group == group)
                .collect();
            nvlink::clique(node, &members, count)
        })
    }

    /// Records that `want` took the GPUs at `positions` on `node`: held
    /// exclusively (an exclusive or MIG request, and a DRA request, whose
    /// shape is [`NO_SHAPE`]) or a share of each (a shared request), and
    /// counted against the request's tenant.
    pub fn commit(&mut self, node: u32, positions: &[usize], want: &Want) {
        let state = &mut self.nodes[node as usize];
        let free_before = state.free_whole as usize;
        for &i in positions {
            if let Some((parent, _)) = state.gpus[i].mig {
                let gpu = &mut state.gpus[i];
                gpu.exclusive = true;
                gpu.free_mib = 0;
                let parent = &mut state.gpus[parent as usize];
                if parent.whole_free() {
                    state.free_whole -= 1;
                }
                parent.mig_held += 1;
                continue;
            }
            let gpu = &mut state.gpus[i];
            if gpu.whole_free() {
                state.free_whole -= 1;
            }
            if want.exclusive() {
                gpu.exclusive = true;
                gpu.free_mib = 0;
            } else {
                gpu.shares += 1;
                gpu.free_mib = gpu.free_mib.saturating_sub(want.shape.memory_mib);
            }
            if state.has_mig {
                for g in &mut state.gpus {
                    if g.mig.is_some_and(|(p, _)| p as usize == i) {
                        g.parent_busy = true;
                    }
                }
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
        if !positions.is_empty() {
            self.touched.push(node);
        }
        if let Some(held) = want
            .request
            .tenant
            .and_then(|t| self.tenant_held.get_mut(t as usize))
        {
            *held = held.saturating_add(positions.len() as u32);
        }
    }

    /// A `wait` for `want` when its tenant (`snapshot.tenants`) could not
    /// take its GPUs without passing its limit, counting this round's
    /// commits; the host would refuse the assignment. `None` when it may.
    /// A DRA request counts [`Want::devices`] (its first alternatives);
    /// [`Cluster::place_claims`] checks what it actually picks too.
    pub fn over_tenant_limit(&self, want: &Want) -> Option<Decision> {
        let t = want.request.tenant? as usize;
        let tenant = self.snapshot.tenants.get(t)?;
        let limit = tenant.limit?;
        let held = self.tenant_held.get(t).copied().unwrap_or(0);
        let needs = want.devices();
        if held.saturating_add(needs) <= limit {
            return None;
        }
        Some(wasmgpu_contract::wait(
            want.position,
            format!(
                "tenant {} holds {held} of its limit {limit} GPUs (GPUTenant {}: spec.limit); this pod needs {} more",
                tenant.name, tenant.name, needs
            ),
        ))
    }

    /// Places `want` on `node` if it fits: picks the GPUs (see
    /// [`Cluster::pick_gpus`], which `nvlink` is passed to), commits them and
    /// returns the assignment.
    pub fn place(
        &mut self,
        node: u32,
        want: &Want,
        fit: Fit,
        nvlink: impl Into<Nvlink>,
    ) -> Option<Decision> {
        self.place_in(node, want, fit, nvlink.into())
    }

    /// [`Cluster::place`], compiled once.
    fn place_in(&mut self, node: u32, want: &Want, fit: Fit, nvlink: Nvlink) -> Option<Decision> {
        let positions = self.pick(node, want, fit, nvlink)?;
        self.commit(node, &positions, want);
        Some(assign(
            want.position,
            node,
            positions.iter().map(|&i| i as u32).collect(),
        ))
    }

    /// The decision for a request no node can take this round: `wait` when
    /// GPUs may free up, `reject` when it can never fit an eligible node
    /// (for a DRA request, [`Cluster::claims_unplaced`]).
    pub fn unplaced(&self, want: &Want<'s>) -> Decision {
        self.unplaced_with(want, Nvlink::Prefer)
    }

    /// [`Cluster::unplaced`] for a request placed under `nvlink`: with
    /// [`Nvlink::Require`] the reason says the GPUs must be NVLink peers (see
    /// [`Cluster::shortfall_with`]).
    pub fn unplaced_with(&self, want: &Want<'s>, nvlink: Nvlink) -> Decision {
        if want.is_dra() {
            return self.claims_unplaced(want);
        }
        let shortfall = self.shortfall_with(want, nvlink);
        if shortfall.is_permanent() {
            reject(want.position, shortfall.reason())
        } else {
            wait(want.position, shortfall.reason())
        }
    }

    /// [`Cluster::choose_node`] for a request placed under `nvlink`. Only
    /// [`Nvlink::Require`] changes the choice (for a request it applies to,
    /// see [`Want::uses_nvlink`]): a node fits when it has `count` free GPUs
    /// that are all NVLink peers of one another. Those nodes are found by a
    /// scan of the eligible nodes.
    pub fn choose_node_with(&self, want: &Want<'s>, fit: Fit, nvlink: Nvlink) -> Option<u32> {
        if nvlink != Nvlink::Require || !want.uses_nvlink(nvlink) {
            return self.choose_node(want, fit);
        }
        let mut best: Option<(u64, u32)> = None;
        for node in self.eligible(want.request) {
            if (node as usize) >= self.nodes.len()
                || !self.fits(node, want)
                || self.pick(node, want, fit, nvlink).is_none()
            {
                continue;
            }
            let room = self.headroom(node, want);
            let better = match (best, fit) {
                (None, _) => true,
                (Some((b, _)), Fit::Tightest) => room < b,
                (Some((b, _)), Fit::Loosest) => room > b,
            };
            if better {
                best = Some((room, node));
            }
        }
        best.map(|(_, node)| node)
    }

    /// [`Cluster::shortfall`] for a request placed under `nvlink`. With
    /// [`Nvlink::Require`] (for a request it applies to), what is missing is
    /// `count` GPUs that are all NVLink peers of one another
    /// ([`reason::asked_nvlink`]): `NotNow` when an eligible node has such a
    /// set once idle, `Never` when none has.
    pub fn shortfall_with(&self, want: &Want<'s>, nvlink: Nvlink) -> Shortfall {
        let shortfall = self.shortfall(want);
        if nvlink != Nvlink::Require
            || !want.uses_nvlink(nvlink)
            || !matches!(shortfall, Shortfall::NotNow(_))
        {
            return shortfall;
        }
        let mut shapes = self.shapes.borrow_mut();
        let ever = shapes
            .ever
            .entry((want.request.eligible_set, Shape::of(want.shape)))
            .or_default();
        let ever = *ever.clique.get_or_insert_with(|| self.ever_clique(want));
        let what = reason::asked_nvlink(want.request);
        if ever {
            Shortfall::NotNow(what)
        } else {
            Shortfall::Never(what)
        }
    }

    /// Whether an eligible node has, once idle, `count` GPUs that could hold
    /// `want` and are all NVLink peers of one another.
    fn ever_clique(&self, want: &Want<'s>) -> bool {
        let count = want.shape.count as usize;
        self.eligible(want.request)
            .filter(|&n| (n as usize) < self.nodes.len())
            .any(|n| {
                let gpus = &self.nodes[n as usize].gpus;
                let able: Vec<usize> = (0..gpus.len())
                    .filter(|&i| gpus[i].could_ever_fit(want))
                    .collect();
                able.len() >= count
                    && nvlink::clique(&self.snapshot.nodes[n as usize], &able, count).is_some()
            })
    }

    /// Places the pending members of gang `gang` (an index into
    /// `snapshot.gangs`) all together or not at all: each member goes where
    /// [`Cluster::choose_node`] and [`Cluster::pick_gpus`] put it, on a trial
    /// copy of the round's state; when enough of them fit to reach the
    /// gang's `min_member` with the members already bound, the trial becomes
    /// the state and the members that fit are assigned (the others wait).
    /// Otherwise nothing is committed and every member waits with the
    /// reason. A member that can never fit is rejected on its own reason;
    /// when without such members the gang could never reach `min_member`,
    /// every member is rejected, naming the one that fits nowhere. The host applies a
    /// gang's assignments on the same all-or-nothing rule. `nvlink` is
    /// applied to every member (see [`Cluster::pick_gpus`]).
    pub fn place_gang(&mut self, gang: u32, fit: Fit, nvlink: impl Into<Nvlink>) -> Vec<Decision> {
        self.place_gang_in(gang, fit, nvlink.into())
    }

    /// [`Cluster::place_gang`], compiled once.
    fn place_gang_in(&mut self, gang: u32, fit: Fit, nvlink: Nvlink) -> Vec<Decision> {
        let Some(g) = self.snapshot.gangs.get(gang as usize) else {
            return Vec::new();
        };
        let mut members: Vec<&'s Request> = g
            .pending
            .iter()
            .filter_map(|&p| self.snapshot.pending.get(p as usize))
            .collect();
        sort_in_order(&mut members);
        // Members asking through DRA claims get no decision here; they count
        // as members that may still come.
        let dra = members.iter().filter(|m| shape_of(m).is_none()).count();
        members.retain(|m| shape_of(m).is_some());
        let need = g.min_member.saturating_sub(g.bound) as usize;
        let mut trial = self.clone();
        let mut placed = Vec::new();
        let mut left: Vec<(Want<'s>, Shortfall)> = Vec::new();
        for member in members {
            let want = trial.want(member);
            match trial
                .choose_node_with(&want, fit, nvlink)
                .and_then(|node| trial.place_in(node, &want, fit, nvlink))
            {
                Some(decision) => placed.push(decision),
                None => {
                    let shortfall = trial.shortfall_with(&want, nvlink);
                    left.push((want, shortfall));
                }
            }
        }
        let name = &g.name;
        // Members that can never fit are rejected on their own; the gang
        // waits for the others as long as they could still reach its
        // `min_member`.
        let (never, later): (Vec<_>, Vec<_>) =
            left.into_iter().partition(|(_, s)| s.is_permanent());
        let could = placed.len() + later.len() + dra;
        if could < need {
            let reason = match never.first() {
                Some((w, s)) => reason::gang_never(name, &w.request.pod, &s.reason()),
                None => reason::gang_short(name, placed.len(), need, g.bound, g.min_member),
            };
            let positions = placed
                .iter()
                .map(Decision::pod)
                .chain(later.iter().chain(&never).map(|(w, _)| w.position));
            return positions.map(|p| reject(p, reason.clone())).collect();
        }
        let rejected = never.iter().map(|(w, s)| reject(w.position, s.reason()));
        if placed.len() >= need {
            *self = trial;
            let reason = reason::gang_placed_without(name, placed.len(), need);
            let waiting = later.iter().map(|(w, _)| wait(w.position, reason.clone()));
            placed.extend(waiting.chain(rejected));
            return placed;
        }
        let reason = reason::gang_short(name, placed.len(), need, g.bound, g.min_member);
        placed
            .iter()
            .map(Decision::pod)
            .chain(later.iter().map(|(w, _)| w.position))
            .map(|p| wait(p, reason.clone()))
            .chain(rejected)
            .collect()
    }

    /// Names of the GPUs at `positions` on `node`, for logs (a policy sees
    /// no UUIDs): `node/gpu<index>`, and `node/gpu<index>/mig<k>` for the
    /// k-th entry after its parent.
    pub fn gpu_names(&self, node: u32, positions: &[usize]) -> Vec<String> {
        let node = &self.snapshot.nodes[node as usize];
        positions
            .iter()
            .map(|&i| match node.gpus[i].mig {
                None => format!("{}/gpu{}", node.name, node.gpus[i].index),
                Some(m) => format!(
                    "{}/gpu{}/mig{}",
                    node.name,
                    node.gpus[i].index,
                    i - m.parent as usize - 1
                ),
            })
            .collect()
    }
}

/// Higher priority first, then older first, then by pod name.
fn sort_in_order(requests: &mut [&Request]) {
    requests.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.created_ms.cmp(&b.created_ms))
            .then_with(|| a.pod.cmp(&b.pod))
    });
}

/// Union-find over GPU positions, for NVLink groups.
struct UnionFind(Vec<usize>);

impl UnionFind {
    /// Every position its own group, reusing the buffer.
    fn reset(&mut self, n: usize) {
        self.0.clear();
        self.0.extend(0..n);
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
mod tests;
