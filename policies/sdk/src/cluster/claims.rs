//! DRA requests: a pod asking through ResourceClaims gets, on one eligible
//! node, for every request of every claim, `count` distinct free candidates
//! of one of its alternatives, within the claims' `matchAttribute` and
//! `distinctAttribute` constraints. The host holds the choices to the rules
//! of `wasmgpu_contract`'s `validate/claims.rs`; this search only makes
//! choices those rules accept.
//!
//! ```text
//!  nodes: eligible ones with a candidate of the pod's first request
//!    │  on each node, claim by claim (what earlier claims took is excluded,
//!    │  no backtracking across claims):
//!    │    alternative vectors in order (request 0's most significant; an
//!    │    alternative with fewer usable candidates than its count skipped)
//!    │      × matchAttribute values, ascending, per constraint
//!    │        → depth-first pick: requests in order, candidates in
//!    │          (node, gpu) order, distinctAttribute values once each;
//!    │          the first complete pick wins
//!    ▼
//!  the node with the fewest (Tightest) or most (Loosest) idle whole GPUs
//!  left after the pick; ties to the lowest index
//!    ▼
//!  commit (held exclusively, counted against the tenant) ─▶ assign with
//!  one ClaimChoice per (claim, request)
//! ```

use super::state::Cluster;
use super::want::{Fit, Shortfall, Want};
use crate::reason;
use wasmgpu_contract::{
    Assignment, Claim, ClaimChoice, Constraint, Decision, GpuRef, Request, reject, wait,
};

/// Search steps (one device tried for one slot, or one combination of
/// alternatives and matchAttribute values tried) allowed per claim and
/// node; past them the node counts as not fitting the claim.
const SEARCH_STEPS: u32 = 4096;

/// Which candidates the search may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Usable {
    /// Those free as the round stands (and healthy).
    Free,
    /// Every healthy one, as if the node were idle.
    Healthy,
}

/// One constraint of a claim on one node.
struct Bound {
    distinct: bool,
    /// Per request of the claim: whether the constraint binds it (all of
    /// them when the constraint names none).
    binds: Vec<bool>,
    /// `(gpu, value)` of the node's devices that have a value, sorted by
    /// gpu; the first value listed for a device wins, as on the host.
    values: Vec<(u32, u32)>,
}

impl Bound {
    fn of(constraint: &Constraint, requests: usize, node: u32) -> Bound {
        let mut binds = vec![constraint.requests.is_empty(); requests];
        for &r in &constraint.requests {
            if let Some(b) = binds.get_mut(r as usize) {
                *b = true;
            }
        }
        let mut values: Vec<(u32, u32)> = constraint
            .values
            .iter()
            .filter(|v| v.device.node == node)
            .map(|v| (v.device.gpu, v.value))
            .collect();
        values.sort_by_key(|&(gpu, _)| gpu);
        values.dedup_by_key(|&mut (gpu, _)| gpu);
        Bound {
            distinct: constraint.distinct,
            binds,
            values,
        }
    }

    fn value(&self, gpu: u32) -> Option<u32> {
        let at = self.values.binary_search_by_key(&gpu, |&(g, _)| g).ok()?;
        Some(self.values[at].1)
    }
}

/// One claim on one node, as the search sees it.
struct ClaimOnNode<'a> {
    claim: &'a Claim,
    bounds: Vec<Bound>,
    /// Per request, per alternative: the usable candidates (positions, in
    /// candidate order) that do not clash with what earlier claims took
    /// and have a value for every constraint binding the request.
    options: Vec<Vec<Vec<u32>>>,
}

impl ClaimOnNode<'_> {
    /// Per constraint, the values to try under `alternatives` (wanting
    /// `counts`): for a matchAttribute constraint, the values its requests'
    /// options have, ascending; a single `None` (no restriction) for a
    /// distinctAttribute one, or a matchAttribute one whose requests want
    /// no device.
    fn match_values(&self, alternatives: &[usize], counts: &[usize]) -> Vec<Vec<Option<u32>>> {
        let requests = 0..counts.len();
        let values = |b: &Bound| {
            let wanted: usize = requests
                .clone()
                .filter(|&r| b.binds[r])
                .map(|r| counts[r])
                .sum();
            if b.distinct || wanted == 0 {
                return vec![None];
            }
            let mut values: Vec<Option<u32>> = requests
                .clone()
                .filter(|&r| b.binds[r])
                .flat_map(|r| self.options[r][alternatives[r]].iter().map(|&g| b.value(g)))
                .collect();
            values.sort_unstable();
            values.dedup();
            values
        };
        self.bounds.iter().map(values).collect()
    }

    /// Per request, its options under `alternatives` that have, for every
    /// constraint binding it whose value is chosen (`values`), that value.
    fn allowed(&self, alternatives: &[usize], values: &[Option<u32>]) -> Vec<Vec<u32>> {
        (0..alternatives.len())
            .map(|r| {
                let matches = |g: &u32| {
                    let mut each = self.bounds.iter().zip(values);
                    each.all(|(b, v)| !b.binds[r] || v.is_none() || b.value(*g) == *v)
                };
                let options = &self.options[r][alternatives[r]];
                options.iter().copied().filter(matches).collect()
            })
            .collect()
    }
}

/// The state of one depth-first pick.
struct Pick<'a, 's> {
    cluster: &'a Cluster<'s>,
    node: u32,
    bounds: &'a [Bound],
    counts: Vec<usize>,
    /// Per request: the candidates allowed in this attempt.
    allowed: Vec<Vec<u32>>,
    picked: Vec<Vec<u32>>,
    /// Per constraint: the values the picks of its requests use so far.
    used: Vec<Vec<u32>>,
    steps: &'a mut u32,
}

impl Pick<'_, '_> {
    /// Fills request `r` from its `k`-th device on, trying its allowed
    /// candidates from position `from`.
    fn fill(&mut self, r: usize, k: usize, from: usize) -> bool {
        if r == self.counts.len() {
            return true;
        }
        if k == self.counts[r] {
            return self.fill(r + 1, 0, 0);
        }
        let need = self.counts[r] - k;
        let mut i = from;
        while i + need <= self.allowed[r].len() {
            if *self.steps == 0 {
                return false;
            }
            *self.steps -= 1;
            let g = self.allowed[r][i];
            if self.fits(r, g) {
                self.take(r, g);
                if self.fill(r, k + 1, i + 1) {
                    return true;
                }
                self.untake(r, g);
            }
            i += 1;
        }
        false
    }

    /// `g` clashes with no device picked so far, and its value is new to
    /// every distinctAttribute constraint binding `r`.
    fn fits(&self, r: usize, g: u32) -> bool {
        let mut picked = self.picked.iter().flatten();
        if picked.any(|&p| self.cluster.clash(self.node, p, g)) {
            return false;
        }
        self.bounds.iter().zip(&self.used).all(|(b, used)| {
            !(b.distinct && b.binds[r]) || b.value(g).is_some_and(|v| !used.contains(&v))
        })
    }

    fn take(&mut self, r: usize, g: u32) {
        self.picked[r].push(g);
        for (b, used) in self.bounds.iter().zip(&mut self.used) {
            if let (true, Some(v)) = (b.binds[r], b.value(g)) {
                used.push(v);
            }
        }
    }

    fn untake(&mut self, r: usize, g: u32) {
        self.picked[r].pop();
        for (b, used) in self.bounds.iter().zip(&mut self.used) {
            if b.binds[r] && b.value(g).is_some() {
                used.pop();
            }
        }
    }
}

/// Advances `digits` (each below its `len`) to the next combination, the
/// last digit fastest; false after the last one.
fn advance(digits: &mut [usize], len: impl Fn(usize) -> usize) -> bool {
    for d in (0..digits.len()).rev() {
        digits[d] += 1;
        if digits[d] < len(d) {
            return true;
        }
        digits[d] = 0;
    }
    false
}

impl<'s> Cluster<'s> {
    /// Places the DRA request `want` (a pod asking through claims, see
    /// [`Want::claims`]): on an eligible node, every request of every claim
    /// gets `count` distinct free, healthy candidates of one of its
    /// alternatives, no device (nor a whole GPU and one of its MIG
    /// instances) twice in the pod, within the claims' constraints; see
    /// the module docs for the search. Among the nodes that fit, `fit`
    /// chooses: `Tightest` the one with the fewest idle whole GPUs left
    /// after the placement (whatever publishes them), `Loosest` the most;
    /// ties go to the lowest index. The devices are committed as held
    /// exclusively and counted against the pod's tenant (a node where the
    /// pick would pass the tenant's limit does not fit). The decision is an
    /// `assign` with empty `gpus` and one [`ClaimChoice`] per (claim,
    /// request), claims then requests in order. A pod whose claims are all
    /// allocated already (no claims) goes to the best eligible node by the
    /// same measure, with no devices. `None` for a GPUResource request or
    /// when no node fits now (see [`Cluster::claims_shortfall`]).
    pub fn place_claims(&mut self, want: &Want<'s>, fit: Fit) -> Option<Decision> {
        let claims = want.claims()?;
        let allowance = self.tenant_allowance(want.request);
        let mut best: Option<(u32, u32, Vec<ClaimChoice>)> = None;
        for node in self.claim_nodes(want.request, claims) {
            let Some(choices) = self.solve_on(node, claims, Usable::Free) else {
                continue;
            };
            let positions: Vec<u32> = choices.iter().flat_map(|c| c.gpus.clone()).collect();
            if allowance.is_some_and(|a| positions.len() as u32 > a) {
                continue;
            }
            let left = self.idle_whole_after(node, &positions);
            let better = match (&best, fit) {
                (None, _) => true,
                (Some((b, _, _)), Fit::Tightest) => left < *b,
                (Some((b, _, _)), Fit::Loosest) => left > *b,
            };
            if better {
                best = Some((left, node, choices));
            }
        }
        let (_, node, choices) = best?;
        let positions: Vec<usize> = choices
            .iter()
            .flat_map(|c| c.gpus.iter().map(|&g| g as usize))
            .collect();
        self.commit(node, &positions, want);
        Some(Decision::Assign(Assignment {
            pod: want.position,
            node,
            gpus: Vec::new(),
            claims: choices,
        }))
    }

    /// Why the DRA request `want` fits no eligible node now:
    /// `NoEligibleNode`; `Never` when no eligible node could take it even
    /// with every healthy candidate free; else `NotNow`. The phrase names
    /// the first request (claims, then requests, in order) that no eligible
    /// node can give its count of candidates for any alternative
    /// ([`reason::claim_request`], with its first alternative's count and
    /// candidates on eligible nodes), or, when each could alone, the whole
    /// pod ([`reason::claims_together`]). For a GPUResource request it is
    /// [`Cluster::shortfall`].
    pub fn claims_shortfall(&self, want: &Want<'s>) -> Shortfall {
        self.claims_diagnosis(want).0
    }

    /// The decision for a DRA request no node takes this round: `reject`
    /// when [`Cluster::claims_shortfall`] is permanent, else `wait`; the
    /// reason is the shortfall's, and when one request is short now, `; `
    /// and [`reason::claims_most_free`] (the most candidates of its first
    /// alternative free on one eligible node). For a GPUResource request
    /// it is [`Cluster::unplaced`].
    pub fn claims_unplaced(&self, want: &Want<'s>) -> Decision {
        if !want.is_dra() {
            return self.unplaced(want);
        }
        let (shortfall, detail) = self.claims_diagnosis(want);
        let mut why = shortfall.reason();
        if let Some(detail) = detail {
            why = format!("{why}; {detail}");
        }
        if shortfall.is_permanent() {
            reject(want.position, why)
        } else {
            wait(want.position, why)
        }
    }

    /// [`Cluster::claims_shortfall`], with the detail of
    /// [`Cluster::claims_unplaced`].
    fn claims_diagnosis(&self, want: &Want<'s>) -> (Shortfall, Option<String>) {
        let Some(claims) = want.claims() else {
            return (self.shortfall(want), None);
        };
        let eligible = self
            .eligible(want.request)
            .any(|n| (n as usize) < self.nodes.len());
        if !eligible {
            return (Shortfall::NoEligibleNode, None);
        }
        let ever = self
            .claim_nodes(want.request, claims)
            .into_iter()
            .any(|n| self.solve_on(n, claims, Usable::Healthy).is_some());
        let usable = if ever { Usable::Free } else { Usable::Healthy };
        let found = self.bottleneck(want.request, claims, usable);
        let what = match &found {
            Some((what, _)) => what.clone(),
            None => {
                let constrained = claims.iter().any(|c| !c.constraints.is_empty());
                reason::claims_together(&reason::asked(want.request), constrained)
            }
        };
        if ever {
            let detail = found.map(|(_, most)| reason::claims_most_free(most));
            (Shortfall::NotNow(what), detail)
        } else {
            (Shortfall::Never(what), None)
        }
    }

    /// The first request of `claims` that no eligible node can give its
    /// count of `usable` candidates for any alternative: its phrase, and
    /// the most usable candidates of its first alternative on one node.
    fn bottleneck(
        &self,
        request: &Request,
        claims: &[Claim],
        usable: Usable,
    ) -> Option<(String, u32)> {
        for claim in claims {
            for r in &claim.requests {
                let tally = |set: u32| self.tally(request, set, usable);
                let fits = r
                    .alternatives
                    .iter()
                    .any(|a| tally(a.candidates).1 >= a.count);
                if fits {
                    continue;
                }
                let (count, (total, most)) = r
                    .alternatives
                    .first()
                    .map_or((0, (0, 0)), |a| (a.count, tally(a.candidates)));
                let what = reason::claim_request(&claim.name, &r.name, count, total);
                return Some((what, most));
            }
        }
        None
    }

    /// Of candidate set `set`: how many candidates sit on nodes `request`
    /// may use, and the most `usable` ones on one such node.
    fn tally(&self, request: &Request, set: u32, usable: Usable) -> (u32, u32) {
        let all = self.candidate_set(set);
        let (mut total, mut most, mut run) = (0u32, 0u32, (u32::MAX, 0u32));
        for g in all {
            let known = (g.node as usize) < self.nodes.len()
                && (g.gpu as usize) < self.nodes[g.node as usize].gpus.len();
            if !known || !self.is_eligible(request, g.node) {
                continue;
            }
            total += 1;
            if self.dra_usable(g.node, g.gpu, usable) {
                run = if run.0 == g.node {
                    (g.node, run.1 + 1)
                } else {
                    (g.node, 1)
                };
                most = most.max(run.1);
            }
        }
        (total, most)
    }

    /// The GPUs the tenant of `request` may still take under its limit,
    /// counting this round's commits; `None` without a limit.
    fn tenant_allowance(&self, request: &Request) -> Option<u32> {
        let t = request.tenant? as usize;
        let limit = self.snapshot.tenants.get(t)?.limit?;
        let held = self.tenant_held.get(t).copied().unwrap_or(0);
        Some(limit.saturating_sub(held))
    }

    /// Candidate set `set` (empty when out of range).
    fn candidate_set(&self, set: u32) -> &'s [GpuRef] {
        let sets = &self.snapshot.candidate_sets;
        sets.get(set as usize).map_or(&[][..], Vec::as_slice)
    }

    /// The candidates of set `set` on `node` (the set is sorted by node).
    fn candidates_on(&self, set: u32, node: u32) -> &'s [GpuRef] {
        let all = self.candidate_set(set);
        let start = all.partition_point(|g| g.node < node);
        let len = all[start..].partition_point(|g| g.node == node);
        &all[start..start + len]
    }

    /// The nodes to search for a pod with `claims`: its eligible nodes, and
    /// of those only the ones with a candidate of its first request when
    /// every alternative of that request wants at least one device.
    pub(super) fn claim_nodes(&self, request: &Request, claims: &[Claim]) -> Vec<u32> {
        let first = claims.iter().find_map(|c| c.requests.first());
        let mut nodes: Vec<u32> = match first {
            Some(r) if r.alternatives.iter().all(|a| a.count > 0) => {
                let sets = r
                    .alternatives
                    .iter()
                    .map(|a| self.candidate_set(a.candidates));
                let mut nodes: Vec<u32> = sets.flatten().map(|g| g.node).collect();
                nodes.sort_unstable();
                nodes.dedup();
                nodes
            }
            _ => self.eligible(request).collect(),
        };
        nodes.retain(|&n| (n as usize) < self.nodes.len() && self.is_eligible(request, n));
        nodes
    }

    /// Whether device `gpu` of `node` may be given to a DRA request:
    /// healthy (a MIG instance with its parent), and for `Usable::Free`
    /// free for exclusive use as the round stands (not held, not shared,
    /// all its memory free; a whole GPU with none of its MIG instances
    /// held, an instance with its parent not in use). Whoever publishes it.
    fn dra_usable(&self, node: u32, gpu: u32, usable: Usable) -> bool {
        let Some(info) = self.snapshot.nodes[node as usize].gpus.get(gpu as usize) else {
            return false;
        };
        let parent = match &info.mig {
            Some(m) => match self.snapshot.nodes[node as usize]
                .gpus
                .get(m.parent as usize)
            {
                Some(p) => Some(p),
                None => return false,
            },
            None => None,
        };
        if !info.healthy || parent.is_some_and(|p| !p.healthy) {
            return false;
        }
        if usable == Usable::Healthy {
            return true;
        }
        let g = &self.nodes[node as usize].gpus[gpu as usize];
        let busy = match g.mig {
            Some(_) => g.parent_busy,
            None => g.mig_held > 0,
        };
        !g.exclusive && g.shares == 0 && g.free_mib >= g.memory_mib && !busy
    }

    /// Whether devices `a` and `b` of `node` cannot both be given: the same
    /// device, or a whole GPU and one of its MIG instances.
    fn clash(&self, node: u32, a: u32, b: u32) -> bool {
        let parent = |g: u32| {
            let gpus = &self.nodes[node as usize].gpus;
            gpus.get(g as usize).and_then(|s| s.mig).map(|(p, _)| p)
        };
        a == b || parent(a) == Some(b) || parent(b) == Some(a)
    }

    /// Idle whole GPUs of `node` (healthy, whoever publishes them, nobody
    /// holding any part) that stay idle when `positions` are taken.
    fn idle_whole_after(&self, node: u32, positions: &[u32]) -> u32 {
        let gpus = &self.nodes[node as usize].gpus;
        let info = &self.snapshot.nodes[node as usize].gpus;
        let idle = gpus.iter().zip(info).enumerate().filter(|(i, (g, info))| {
            let i = *i as u32;
            g.mig.is_none()
                && info.healthy
                && !g.exclusive
                && g.shares == 0
                && g.mig_held == 0
                && g.free_mib >= g.memory_mib
                && !positions.iter().any(|&p| self.clash(node, p, i))
        });
        idle.count() as u32
    }

    /// The choices for every claim of a pod on `node`, claim by claim, each
    /// against the devices earlier claims took; `None` when one fails.
    pub(super) fn solve_on(
        &self,
        node: u32,
        claims: &[Claim],
        usable: Usable,
    ) -> Option<Vec<ClaimChoice>> {
        let mut taken: Vec<u32> = Vec::new();
        let mut choices = Vec::new();
        for (c, claim) in claims.iter().enumerate() {
            let on = self.claim_on(node, claim, usable, &taken);
            let mut steps = SEARCH_STEPS;
            let got = self.solve_claim(node, &on, c as u32, &mut steps)?;
            taken.extend(got.iter().flat_map(|ch| ch.gpus.iter().copied()));
            choices.extend(got);
        }
        Some(choices)
    }

    /// `claim` on `node`, with what the pod's earlier claims took (`taken`).
    fn claim_on<'a>(
        &self,
        node: u32,
        claim: &'a Claim,
        usable: Usable,
        taken: &[u32],
    ) -> ClaimOnNode<'a> {
        let requests = claim.requests.len();
        let bounds: Vec<Bound> = claim
            .constraints
            .iter()
            .map(|k| Bound::of(k, requests, node))
            .collect();
        let options = claim
            .requests
            .iter()
            .enumerate()
            .map(|(r, request)| {
                let ok = |g: u32| {
                    self.dra_usable(node, g, usable)
                        && !taken.iter().any(|&t| self.clash(node, t, g))
                        && bounds.iter().all(|b| !b.binds[r] || b.value(g).is_some())
                };
                let on = |a: &wasmgpu_contract::Alternative| self.candidates_on(a.candidates, node);
                let alternatives = request.alternatives.iter();
                alternatives
                    .map(|a| on(a).iter().map(|g| g.gpu).filter(|&g| ok(g)).collect())
                    .collect()
            })
            .collect();
        ClaimOnNode {
            claim,
            bounds,
            options,
        }
    }

    /// The first alternative vector (request 0's alternative most
    /// significant) with a complete pick; alternatives with fewer options
    /// than their count are skipped.
    fn solve_claim(
        &self,
        node: u32,
        on: &ClaimOnNode,
        c: u32,
        steps: &mut u32,
    ) -> Option<Vec<ClaimChoice>> {
        let requests = &on.claim.requests;
        let viable: Vec<Vec<usize>> = requests
            .iter()
            .enumerate()
            .map(|(r, request)| {
                let enough =
                    |&k: &usize| on.options[r][k].len() >= request.alternatives[k].count as usize;
                (0..request.alternatives.len()).filter(enough).collect()
            })
            .collect();
        if viable.iter().any(Vec::is_empty) {
            return None;
        }
        let mut digits = vec![0; requests.len()];
        loop {
            let alternatives: Vec<usize> =
                (0..requests.len()).map(|r| viable[r][digits[r]]).collect();
            if let Some(picked) = self.solve_values(node, on, &alternatives, steps) {
                let choices = picked.into_iter().enumerate().map(|(r, gpus)| ClaimChoice {
                    claim: c,
                    request: r as u32,
                    alternative: alternatives[r] as u32,
                    gpus,
                });
                return Some(choices.collect());
            }
            if *steps == 0 || !advance(&mut digits, |r| viable[r].len()) {
                return None;
            }
        }
    }

    /// For the chosen `alternatives`, tries each combination of
    /// matchAttribute values ([`ClaimOnNode::match_values`], the last
    /// constraint fastest): the picks of the first that succeeds, per
    /// request.
    fn solve_values(
        &self,
        node: u32,
        on: &ClaimOnNode,
        alternatives: &[usize],
        steps: &mut u32,
    ) -> Option<Vec<Vec<u32>>> {
        let counts: Vec<usize> = alternatives
            .iter()
            .enumerate()
            .map(|(r, &k)| on.claim.requests[r].alternatives[k].count as usize)
            .collect();
        let choices = on.match_values(alternatives, &counts);
        if choices.iter().any(Vec::is_empty) {
            return None;
        }
        let mut digits = vec![0; choices.len()];
        loop {
            if *steps == 0 {
                return None;
            }
            *steps -= 1;
            let values: Vec<Option<u32>> =
                (0..choices.len()).map(|b| choices[b][digits[b]]).collect();
            let mut pick = Pick {
                cluster: self,
                node,
                bounds: &on.bounds,
                counts: counts.clone(),
                allowed: on.allowed(alternatives, &values),
                picked: vec![Vec::new(); counts.len()],
                used: vec![Vec::new(); on.bounds.len()],
                steps: &mut *steps,
            };
            if pick.fill(0, 0, 0) {
                return Some(pick.picked);
            }
            if !advance(&mut digits, |b| choices[b].len()) {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests;
