//! The replay of one round: the decisions in order, against the GPUs as
//! the earlier ones left them.

use super::gangs::{gang_of, hold_back_short_gangs};
use super::gpu_fit::{GpuLeft, Holder, check_gpu};
use super::invalid::Invalid;
use super::names::{Names, describe_named, pod_name};
use super::verdict::{Deferred, Placement, Preempting, Refused, Verdict};
use crate::host_snapshot::{HostNode, SharedCounters};
use crate::types::{Ask, Assignment, Decision, GpuShape, Node, Request, Sharing, Snapshot};

/// The state of one round's replay.
pub(super) struct Replay<'s> {
    pub(super) snapshot: &'s Snapshot,
    pub(super) names: Names<'s>,
    /// Where each node's GPUs start in `gpus`.
    pub(super) node_start: Vec<usize>,
    pub(super) gpus: Vec<GpuLeft>,
    /// GPUs each tenant took this round.
    pub(super) tenant_took: Vec<u32>,
    /// GPUs each tenant's running pods lose to this round's preemptions.
    pub(super) tenant_lost: Vec<u32>,
    /// Running pods already named as victims this round.
    pub(super) victim: Vec<bool>,
    /// Each node's DRA shared counters (none where it has none): what the
    /// GPUs consume, and what is left as the round goes.
    pub(super) counters: Vec<Option<&'s SharedCounters>>,
    pub(super) counters_left: Vec<Vec<u64>>,
    pub(super) verdict: Verdict,
}

impl<'s> Replay<'s> {
    pub(super) fn new(
        snapshot: &'s Snapshot,
        names: Names<'s>,
        hosts: &'s [HostNode],
    ) -> Replay<'s> {
        let mut node_start = Vec::with_capacity(snapshot.nodes.len());
        let mut gpus = Vec::with_capacity(snapshot.nodes.iter().map(|n| n.gpus.len()).sum());
        for node in &snapshot.nodes {
            let first = gpus.len();
            node_start.push(first);
            for gpu in &node.gpus {
                gpus.push(GpuLeft {
                    free_mib: gpu.memory_mib.saturating_sub(gpu.allocated_mib),
                    held: gpu.held.then_some(Holder::Before),
                    shares: gpu.shared_owners,
                    mig_held: 0,
                });
            }
            for gpu in &node.gpus {
                if let Some(mig) = &gpu.mig
                    && gpu.held
                    && (mig.parent as usize) < node.gpus.len()
                {
                    gpus[first + mig.parent as usize].mig_held += 1;
                }
            }
        }
        let counters: Vec<Option<&SharedCounters>> = (0..snapshot.nodes.len())
            .map(|n| hosts.get(n).map(|h| &h.counters))
            .map(|c| c.filter(|c| !c.left.is_empty()))
            .collect();
        let counters_left = counters
            .iter()
            .map(|c| c.map_or_else(Vec::new, |c| c.left.iter().map(|(_, v)| *v).collect()))
            .collect();
        Replay {
            snapshot,
            names,
            node_start,
            gpus,
            tenant_took: vec![0; snapshot.tenants.len()],
            tenant_lost: vec![0; snapshot.tenants.len()],
            victim: vec![false; snapshot.running.len()],
            counters,
            counters_left,
            verdict: Verdict::default(),
        }
    }

    pub(super) fn run(mut self, decisions: &[Decision]) -> Verdict {
        let snapshot = self.snapshot;
        let mut decided = vec![false; snapshot.pending.len()];
        for (index, decision) in decisions.iter().enumerate() {
            let position = decision.pod();
            let refuse = |reason| Refused {
                index,
                pod: pod_name(snapshot, position).map(str::to_owned),
                decision: describe_named(snapshot, decision, self.names),
                reason,
            };
            let Some(request) = snapshot.pending.get(position as usize) else {
                let refused = refuse(Invalid::UnknownPod { pod: position });
                self.verdict.refused.push(refused);
                continue;
            };
            let position = position as usize;
            if std::mem::replace(&mut decided[position], true) {
                let refused = refuse(Invalid::DecidedTwice);
                self.verdict.refused.push(refused);
                continue;
            }
            let deferred = |reason: &str| Deferred {
                pod: request.pod.clone(),
                reason: reason.to_owned(),
                gang: gang_of(snapshot, request),
            };
            let outcome = match decision {
                Decision::Wait(d) => {
                    self.verdict.waiting.push(deferred(&d.reason));
                    Ok(())
                }
                Decision::Reject(d) => {
                    self.verdict.rejected.push(deferred(&d.reason));
                    Ok(())
                }
                Decision::Assign(a) => self.assign(a, request, position),
                Decision::Preempt(p) => self.preempt(p, request, position),
            };
            if let Err(reason) = outcome {
                let refused = refuse(reason);
                self.verdict.refused.push(refused);
            }
        }
        hold_back_short_gangs(snapshot, &mut self.verdict);
        self.verdict
    }

    /// Checks an assignment against the GPUs as they are now (`left`, the
    /// node's slice), and returns the placement it makes.
    pub(super) fn check(
        &self,
        a: &Assignment,
        request: &Request,
        left: &[GpuLeft],
    ) -> Result<Placement, Invalid> {
        let snapshot = self.snapshot;
        let node = snapshot
            .nodes
            .get(a.node as usize)
            .ok_or(Invalid::UnknownNode { node: a.node })?;
        let eligible = snapshot.eligible_sets.get(request.eligible_set as usize);
        if !eligible.is_some_and(|set| crate::bits::contains(set, a.node)) {
            return Err(Invalid::NotEligible {
                node: node.name.clone(),
            });
        }
        let gpus = match &request.ask {
            Ask::Gpus(shape) => {
                if !a.claims.is_empty() {
                    return Err(Invalid::WrongChoice {
                        what: "a GPUResource pod is assigned GPUs, not claim choices".into(),
                    });
                }
                self.check_shape(a, node, shape, left)?;
                a.gpus.clone()
            }
            Ask::Claims(claims) => self.check_claims(a, node, claims, left)?,
        };
        self.check_counters(a.node, &gpus, left)?;
        self.check_limit(request, gpus.len() as u32)?;
        Ok(Placement {
            pod: request.pod.clone(),
            node: node.name.clone(),
            gpus: gpus.iter().map(|&g| (self.names)(a.node, g)).collect(),
            request: 0,
            at: (a.node as usize, gpus),
            claims: a.claims.clone(),
        })
    }

    fn check_shape(
        &self,
        a: &Assignment,
        node: &Node,
        shape: &GpuShape,
        left: &[GpuLeft],
    ) -> Result<(), Invalid> {
        if a.gpus.is_empty() {
            return Err(Invalid::NoGpus);
        }
        if a.gpus.len() != shape.count as usize {
            return Err(Invalid::WrongCount {
                got: a.gpus.len(),
                want: shape.count,
            });
        }
        for (k, &g) in a.gpus.iter().enumerate() {
            let Some(info) = node.gpus.get(g as usize) else {
                return Err(Invalid::UnknownGpu {
                    gpu: g,
                    node: node.name.clone(),
                });
            };
            let gpu = || (self.names)(a.node, g);
            // At most 16 GPUs: comparing with the earlier ones beats hashing.
            if a.gpus[..k].contains(&g) {
                return Err(Invalid::DuplicateGpu { gpu: gpu() });
            }
            if info.published_by == crate::types::Publisher::DraDriver {
                return Err(Invalid::NotFromAgent { gpu: gpu() });
            }
            check_gpu(self.snapshot, node, shape, info, left, g).map_err(|reason| reason(gpu()))?;
        }
        Ok(())
    }

    /// Refuses `gpus` of `node` together when they consume more of a DRA
    /// shared counter than is left. `gpus_left` is the node's GPUs as the
    /// decision sees them: what a preemption's victims release there (held
    /// before the round, free in it) gives its counters back.
    fn check_counters(
        &self,
        node: u32,
        gpus: &[u32],
        gpus_left: &[GpuLeft],
    ) -> Result<(), Invalid> {
        let Some(Some(counters)) = self.counters.get(node as usize) else {
            return Ok(());
        };
        let mut left = self.counters_left[node as usize].clone();
        for (g, (now, seen)) in self.node_slice(node).iter().zip(gpus_left).enumerate() {
            if now.held == Some(Holder::Before) && seen.held.is_none() {
                for &(c, amount) in counters.of(g as u32) {
                    if let Some(l) = left.get_mut(c as usize) {
                        *l = l.saturating_add(amount);
                    }
                }
            }
        }
        let mut wanted = vec![0u64; left.len()];
        // A GPU shared already consumed its counters with its first share.
        let unused = |g: u32| gpus_left.get(g as usize).is_none_or(|s| s.shares == 0);
        for &g in gpus.iter().filter(|&&g| unused(g)) {
            for &(c, amount) in counters.of(g) {
                let Some(want) = wanted.get_mut(c as usize) else {
                    continue;
                };
                *want = want.saturating_add(amount);
                if *want > left[c as usize] {
                    return Err(Invalid::CounterExhausted {
                        gpu: (self.names)(node, g),
                        counter: counters.left[c as usize].0.clone(),
                        wants: amount,
                        left: left[c as usize].saturating_sub(*want - amount),
                    });
                }
            }
        }
        Ok(())
    }

    /// Refuses taking `gpus` more for the request's tenant past its limit.
    fn check_limit(&self, request: &Request, gpus: u32) -> Result<(), Invalid> {
        let Some(t) = request.tenant else {
            return Ok(());
        };
        let Some(tenant) = self.snapshot.tenants.get(t as usize) else {
            return Ok(());
        };
        let would_hold = tenant
            .holding
            .saturating_add(self.tenant_took[t as usize])
            .saturating_add(gpus);
        match tenant.limit {
            Some(limit) if would_hold > limit => Err(Invalid::OverLimit {
                tenant: tenant.name.clone(),
                limit,
                would_hold,
            }),
            _ => Ok(()),
        }
    }

    pub(super) fn node_slice(&self, node: u32) -> &[GpuLeft] {
        let Some(&first) = self.node_start.get(node as usize) else {
            return &[];
        };
        let len = self.snapshot.nodes[node as usize].gpus.len();
        &self.gpus[first..first + len]
    }

    fn assign(
        &mut self,
        a: &Assignment,
        request: &Request,
        position: usize,
    ) -> Result<(), Invalid> {
        let mut placement = self.check(a, request, self.node_slice(a.node))?;
        placement.request = position;
        self.take(&placement, request, position, false);
        self.verdict.accepted.push(placement);
        Ok(())
    }

    fn preempt(
        &mut self,
        p: &crate::types::Preemption,
        request: &Request,
        position: usize,
    ) -> Result<(), Invalid> {
        let (mut placement, victims) = self.check_preemption(p, request)?;
        placement.request = position;
        self.take(&placement, request, position, true);
        for &v in &victims {
            self.victim[v] = true;
            let running = &self.snapshot.running[v];
            if let Some(t) = running.tenant
                && let Some(lost) = self.tenant_lost.get_mut(t as usize)
            {
                *lost = lost.saturating_add(running.gpus.len() as u32);
            }
        }
        self.verdict.preempting.push(Preempting {
            placement,
            victims: victims
                .iter()
                .map(|&v| self.snapshot.running[v].pod.clone())
                .collect(),
            victim_positions: victims,
        });
        Ok(())
    }

    /// Marks what a placement takes. A nomination (`nominated`) holds its
    /// GPUs whole, so that no later decision takes them.
    fn take(&mut self, placement: &Placement, request: &Request, position: usize, nominated: bool) {
        let (n, ref gpus) = placement.at;
        let node = &self.snapshot.nodes[n];
        let first = self.node_start[n];
        if let Some(Some(counters)) = self.counters.get(n) {
            let left = &mut self.counters_left[n];
            // A GPU consumes its counters once, when it goes into use.
            let slots = &self.gpus[first..];
            let unused = |g: u32| {
                slots
                    .get(g as usize)
                    .is_none_or(|s| s.shares == 0 && s.held.is_none())
            };
            for &g in gpus.iter().filter(|&&g| unused(g)) {
                for &(c, amount) in counters.of(g) {
                    if let Some(l) = left.get_mut(c as usize) {
                        *l = l.saturating_sub(amount);
                    }
                }
            }
        }
        let share = match &request.ask {
            Ask::Gpus(shape) if shape.sharing == Sharing::Shared && !nominated => {
                Some(shape.memory_mib)
            }
            _ => None,
        };
        for &g in gpus {
            if let Some(mig) = &node.gpus[g as usize].mig {
                self.gpus[first + mig.parent as usize].mig_held += 1;
            }
            let left = &mut self.gpus[first + g as usize];
            match share {
                None => {
                    left.held = Some(Holder::Pending(position));
                    left.free_mib = 0;
                }
                Some(mib) => {
                    left.shares += 1;
                    left.free_mib = left.free_mib.saturating_sub(mib);
                }
            }
        }
        if let Some(t) = request.tenant
            && let Some(took) = self.tenant_took.get_mut(t as usize)
        {
            *took = took.saturating_add(gpus.len() as u32);
        }
    }
}
