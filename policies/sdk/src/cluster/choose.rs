//! Choosing a node for a request: free-count buckets for exclusive
//! requests on uniform nodes, a headroom index per shape for shared ones, a
//! scan for small eligible sets and mixed nodes; and why nothing fits.

use super::indexes::{SCAN_AT_MOST, Shape, SharedIndex};
use super::state::Cluster;
use super::want::{Fit, Shortfall, Want};
use crate::nvlink::{self, Nvlink};
use crate::reason;

impl<'s> Cluster<'s> {
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
    pub(super) fn shared_room(&self, node: u32, want: &Want<'s>) -> Option<u64> {
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
    pub(super) fn shared_index(&self, want: &Want<'s>) -> SharedIndex {
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
    pub(super) fn catch_up(&self, index: &mut SharedIndex, want: &Want<'s>) {
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
    pub(super) fn ever_fits(&self, want: &Want<'s>) -> Option<bool> {
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
    pub(super) fn ever_clique(&self, want: &Want<'s>) -> bool {
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
}
