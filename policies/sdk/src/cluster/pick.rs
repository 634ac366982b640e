//! Picking the GPUs on a chosen node: the tightest or loosest fit, and for
//! a multi-GPU exclusive request, NVLink peers.

use super::state::Cluster;
use super::want::{Fit, Want};
use crate::nvlink::{self, Nvlink};

impl<'s> Cluster<'s> {
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
    pub(super) fn pick(
        &self,
        node: u32,
        want: &Want,
        fit: Fit,
        nvlink: Nvlink,
    ) -> Option<Vec<usize>> {
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
    pub(super) fn pick_clique(
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
}
