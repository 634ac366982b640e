//! Placing: committing a choice to the round's state, placing one request
//! or a whole gang (all or nothing), and the decision when nothing fits.

use super::state::{Cluster, sort_in_order};
use super::want::{Fit, Shortfall, Want, shape_of};
use crate::nvlink::Nvlink;
use crate::reason;
use wasmgpu_contract::{Decision, Request, assign, reject, wait};

impl<'s> Cluster<'s> {
    /// Records that `want` took the GPUs at `positions` on `node`: held
    /// exclusively (an exclusive or MIG request, and a DRA request, whose
    /// shape is [`NO_SHAPE`](crate::NO_SHAPE)) or a share of each (a shared request), and
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
    pub(super) fn place_in(
        &mut self,
        node: u32,
        want: &Want,
        fit: Fit,
        nvlink: Nvlink,
    ) -> Option<Decision> {
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
    pub(super) fn place_gang_in(&mut self, gang: u32, fit: Fit, nvlink: Nvlink) -> Vec<Decision> {
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
}
