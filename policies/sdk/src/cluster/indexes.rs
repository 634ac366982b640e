//! Indexes built on first use during a round: per request shape, the nodes
//! a shared request fits by headroom, and what an eligible set could ever
//! hold.

use std::collections::{BTreeMap, BTreeSet};

use wasmgpu_contract::GpuShape;

/// What a request asks for, as far as fitting goes: requests of one shape fit
/// the same nodes, with the same headroom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Shape<'s> {
    /// The model glob; it decides `Want::model_ok`.
    pub(super) model: Option<&'s str>,
    pub(super) mig_profile: Option<&'s str>,
    pub(super) memory_mib: u64,
    pub(super) count: u32,
}

impl<'s> Shape<'s> {
    pub(super) fn of(shape: &'s GpuShape) -> Self {
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
pub(super) const SCAN_AT_MOST: usize = 64;

/// The nodes a shared request of one shape fits, ordered by headroom.
#[derive(Clone, Debug)]
pub(super) struct SharedIndex {
    /// How much of `Cluster::touched` this index has caught up with.
    pub(super) seen: usize,
    /// Per node: its headroom when it fits, else `None`.
    pub(super) room: Vec<Option<u64>>,
    /// `(headroom, node)` for every node whose `room` is `Some`.
    pub(super) by_room: BTreeSet<(u64, u32)>,
}

/// Indexes built on first use during a round.
#[derive(Clone, Debug, Default)]
pub(super) struct ShapeIndexes<'s> {
    pub(super) shared: BTreeMap<Shape<'s>, SharedIndex>,
    /// What the nodes of an eligible set could hold once idle, per shape.
    /// Commits do not change it.
    pub(super) ever: BTreeMap<(u32, Shape<'s>), Ever>,
}

/// What the nodes of an eligible set could hold once idle; `None` until
/// worked out.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Ever {
    /// Whether a node could hold the shape; `None` inside when the set has
    /// no node at all.
    pub(super) fits: Option<Option<bool>>,
    /// Whether a node has `count` GPUs of the shape that are all NVLink
    /// peers of one another.
    pub(super) clique: Option<bool>,
}
