//! NVLink: how a multi-GPU exclusive request uses the links between GPUs.
//!
//! Two sets of GPUs on a node matter, and they differ:
//!
//! * an **NVLink group** ([`Cluster::nvlink_groups`]) is a connected
//!   component of the node's link graph: GPUs joined directly or through
//!   other GPUs. On an HGX board (every GPU linked to every other) the whole
//!   node is one group; on A100 PCIe cards with NVLink bridges each bridged
//!   pair is a group; on a ring 0-1-2-3 the four GPUs are one group although
//!   0 and 2 are not linked to each other.
//! * an **NVLink clique** ([`Cluster::nvlink_clique`]) is a set of GPUs that
//!   are all NVLink peers of one another: every pair is linked directly. On
//!   the ring above, {0, 1} is a clique and {0, 1, 2} is not.
//!
//! Two whole GPUs are peers when either's `nvlink` bit set has the other's
//! index (a link joins both ends); MIG instances have no links.
//!
//! [`Cluster::nvlink_groups`]: crate::Cluster::nvlink_groups
//! [`Cluster::nvlink_clique`]: crate::Cluster::nvlink_clique

use serde::Deserialize;

use wasmgpu_contract::Node;

/// How [`Cluster::pick_gpus`](crate::Cluster::pick_gpus) (and everything that
/// places through it) uses NVLink for an exclusive request of more than one
/// whole GPU. Shared requests, MIG requests and requests of one GPU are not
/// affected by it.
///
/// In `config.json` (see [`PlacementParams`](crate::PlacementParams)):
/// `"nvlink": "prefer" | "require" | "ignore"`. A `bool` converts:
/// `true` is `Prefer`, `false` is `Ignore` (the older `prefer_nvlink`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Nvlink {
    /// Take the GPUs from one NVLink **group** (connected, not necessarily
    /// all peers of one another) when one on the node holds the request,
    /// the tightest group for `Fit::Tightest`, the largest for
    /// `Fit::Loosest`; when no group does, **fall back** silently to any
    /// free GPUs of the node.
    #[default]
    Prefer,
    /// Take only GPUs that are all NVLink peers of one another (a
    /// **clique**), never anything else: a node without such a set free does
    /// not fit, and a request no node can serve this way waits (or is
    /// rejected when no eligible node has such a set even when idle) with a
    /// reason that says NVLink is required.
    Require,
    /// Disregard NVLink: the first free GPUs (by position) are taken.
    Ignore,
}

impl From<bool> for Nvlink {
    fn from(prefer: bool) -> Self {
        if prefer {
            Nvlink::Prefer
        } else {
            Nvlink::Ignore
        }
    }
}

/// Whether GPUs `a` and `b` (positions) of `node` are NVLink peers: either
/// names the other's index.
pub(crate) fn linked(node: &Node, a: usize, b: usize) -> bool {
    let whole = |x: usize| node.gpus.get(x).filter(|g| g.mig.is_none());
    let lists = |x: usize, y: usize| {
        whole(x)
            .zip(whole(y))
            .is_some_and(|(gx, gy)| gy.index < 64 && gx.nvlink & (1 << gy.index) != 0)
    };
    a != b && (lists(a, b) || lists(b, a))
}

/// The positions of the whole GPUs of `node` that `gpu` names in its
/// `nvlink` set.
pub(crate) fn peer_positions<'n>(
    node: &'n Node,
    gpu: &'n wasmgpu_contract::Gpu,
) -> impl Iterator<Item = usize> + 'n {
    node.gpus.iter().enumerate().filter_map(move |(p, other)| {
        (gpu.mig.is_none()
            && other.mig.is_none()
            && other.index < 64
            && gpu.nvlink & (1 << other.index) != 0)
            .then_some(p)
    })
}

/// The first set of `size` GPUs among `among` (positions, in the order
/// given) that are all peers of one another: the one that comes first
/// when sets are compared position by position in `among`'s order. Only
/// the first 64 of `among` are considered (no node has more GPUs linked).
pub(crate) fn clique(node: &Node, among: &[usize], size: usize) -> Option<Vec<usize>> {
    let among = &among[..among.len().min(64)];
    if size == 0 || among.len() < size {
        return (size == 0).then(Vec::new);
    }
    let adjacent: Vec<u64> = among
        .iter()
        .map(|&a| {
            among
                .iter()
                .enumerate()
                .filter(|&(_, &b)| linked(node, a, b))
                .fold(0u64, |bits, (j, _)| bits | 1 << j)
        })
        .collect();
    let all = if among.len() == 64 {
        u64::MAX
    } else {
        (1u64 << among.len()) - 1
    };
    let found = extend(&adjacent, 0, all, size)?;
    Some(
        (0..among.len())
            .filter(|&j| found & (1 << j) != 0)
            .map(|j| among[j])
            .collect(),
    )
}

/// Grows `chosen` by `more` members from `open` (each a peer of all of
/// `chosen`), lowest first; backtracks when a branch runs short.
fn extend(adjacent: &[u64], chosen: u64, mut open: u64, more: usize) -> Option<u64> {
    if more == 0 {
        return Some(chosen);
    }
    while open.count_ones() as usize >= more {
        let v = open.trailing_zeros() as usize;
        open &= open - 1;
        if let Some(found) = extend(adjacent, chosen | 1 << v, open & adjacent[v], more - 1) {
            return Some(found);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, with_nvlink};

    #[test]
    fn cliques_need_every_pair_linked() {
        // A ring 0-1-2-3-0 plus the chord 0-2: {0, 1, 2} and {0, 2, 3} are
        // triangles, no four are all peers.
        let ring = with_nvlink(
            node("r", 4, "NVIDIA A100", 40960),
            &[(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)],
        );
        let all = [0, 1, 2, 3];
        assert_eq!(clique(&ring, &all, 2), Some(vec![0, 1]));
        assert_eq!(clique(&ring, &all, 3), Some(vec![0, 1, 2]));
        assert_eq!(clique(&ring, &[1, 2, 3], 3), None, "1 and 3 are not linked");
        assert_eq!(clique(&ring, &[3, 2, 0], 3), Some(vec![3, 2, 0]));
        assert_eq!(clique(&ring, &all, 4), None);
        assert_eq!(clique(&ring, &all, 1), Some(vec![0]));
        assert_eq!(clique(&ring, &all, 0), Some(vec![]));
        assert_eq!(clique(&ring, &[], 1), None);
        // A link listed on one end only still joins both.
        let mut one_sided = node("o", 2, "NVIDIA A100", 40960);
        one_sided.gpus[1].nvlink |= 1;
        assert!(linked(&one_sided, 0, 1) && linked(&one_sided, 1, 0));
        assert!(!linked(&one_sided, 0, 0));
    }

    #[test]
    fn a_bool_is_prefer_or_ignore_and_config_spells_lower_case() {
        assert_eq!(Nvlink::from(true), Nvlink::Prefer);
        assert_eq!(Nvlink::from(false), Nvlink::Ignore);
        let parsed: Nvlink = serde_json::from_str(r#""require""#).unwrap();
        assert_eq!(parsed, Nvlink::Require);
        assert!(serde_json::from_str::<Nvlink>(r#""Required""#).is_err());
    }
}
