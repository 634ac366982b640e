//! The round's state: the snapshot's nodes and what is free on them, the
//! indexes that find a node without a scan, and the pending requests in the
//! order they are served.

use std::cell::RefCell;

use super::indexes::ShapeIndexes;
use super::nodes::{Class, NodeState, UnionFind, classes_of};
use super::running_on::RunningOn;
use super::want::{NO_PROFILE, NO_SHAPE, Want, shape_of};
use wasmgpu_contract::{Request, Snapshot, glob_match};

/// The snapshot's nodes and what is free on them, updated by [`Cluster::commit`].
#[derive(Clone, Debug)]
pub struct Cluster<'s> {
    pub(super) snapshot: &'s Snapshot,
    pub(super) nodes: Vec<NodeState>,
    pub(super) models: Vec<&'s str>,
    pub(super) classes: Vec<Class>,
    /// Nodes without a class (mixed GPUs): searched by a scan.
    pub(super) mixed_nodes: Vec<u32>,
    /// One bitset over nodes per `snapshot.eligible_sets` entry.
    pub(super) eligible_bits: Vec<Vec<u64>>,
    /// Nodes in the order commits changed them (with repeats).
    pub(super) touched: Vec<u32>,
    /// Built lazily by `&self` methods, hence the cell.
    pub(super) shapes: RefCell<ShapeIndexes<'s>>,
    /// Per node: its running pods, and the lowest priority among them.
    pub(super) running_on: RunningOn,
    /// Running pods already named as victims this round.
    pub(super) victim_taken: Vec<bool>,
    /// GPUs each tenant of `snapshot.tenants` holds, with this round's
    /// commits.
    pub(super) tenant_held: Vec<u32>,
}

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
            .map(|node| NodeState::of(node, &mut groups, unknown_model))
            .collect();
        let (classes, mixed_nodes) = classes_of(&mut nodes);
        let eligible_bits = eligible_bits(snapshot);
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
}

/// Higher priority first, then older first, then by pod name.
pub(super) fn sort_in_order(requests: &mut [&Request]) {
    requests.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.created_ms.cmp(&b.created_ms))
            .then_with(|| a.pod.cmp(&b.pod))
    });
}

/// One bitset over nodes per eligible set; nodes past the snapshot's
/// (never sent by the host) are dropped.
fn eligible_bits(snapshot: &Snapshot) -> Vec<Vec<u64>> {
    let words = snapshot.nodes.len().div_ceil(64);
    let last_bits = match snapshot.nodes.len() % 64 {
        0 => u64::MAX,
        n => (1 << n) - 1,
    };
    snapshot
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
        .collect()
}
