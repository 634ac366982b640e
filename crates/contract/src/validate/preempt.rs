//! Preemptions: the host's rules for a `preempt` decision. The preemptor
//! may preempt (`preemptionPolicy` is not `Never`, it is no gang member);
//! every victim is a running pod named once in the round, on the
//! preemptor's node (or a gang mate of one there), past its minimum
//! runtime, evictable, and of lower priority than the preemptor — or over
//! its tenant's quota while the preemptor's tenant, with this pod, stays
//! within its own (reclaim). A gang member means all its running members.
//! With the victims gone the assignment is valid, and without any one of
//! the victims on the node it is not (none is needless).

use super::gpu_fit::{GpuLeft, Holder};
use super::invalid::Invalid;
use super::replay::Replay;
use super::verdict::Placement;
use crate::types::{Ask, Preemption, PreemptionPolicy, Request, Running};

impl Replay<'_> {
    /// Checks a preemption; its placement and the victims' positions.
    pub(super) fn check_preemption(
        &self,
        p: &Preemption,
        request: &Request,
    ) -> Result<(Placement, Vec<usize>), Invalid> {
        let snapshot = self.snapshot;
        let a = &p.assignment;
        if request.preemption == PreemptionPolicy::Never {
            return Err(Invalid::NeverPreempts);
        }
        if request.gang.is_some() {
            return Err(Invalid::GangPreemptor);
        }
        if p.victims.is_empty() {
            return Err(Invalid::NoVictims);
        }
        if snapshot.nodes.get(a.node as usize).is_none() {
            return Err(Invalid::UnknownNode { node: a.node });
        }
        let mut victims: Vec<usize> = Vec::with_capacity(p.victims.len());
        // GPUs each tenant loses: to earlier decisions of the round, then to
        // the victims of this one checked so far.
        let mut lost = self.tenant_lost.clone();
        for &v in &p.victims {
            let Some(running) = snapshot.running.get(v as usize) else {
                return Err(Invalid::UnknownVictim { victim: v });
            };
            let name = || running.pod.clone();
            if victims.contains(&(v as usize)) || self.victim[v as usize] {
                return Err(Invalid::VictimTwice { victim: name() });
            }
            victims.push(v as usize);
            if running.protected_ms > 0 {
                return Err(Invalid::VictimProtected {
                    victim: name(),
                    left_ms: running.protected_ms,
                });
            }
            if !running.evictable {
                return Err(Invalid::VictimNotEvictable { victim: name() });
            }
            if running.priority >= request.priority && !reclaimable(self, request, running, &lost) {
                return Err(Invalid::VictimNotLower {
                    victim: name(),
                    priority: running.priority,
                    preemptor: request.priority,
                });
            }
            if let Some(t) = running.tenant
                && let Some(lost) = lost.get_mut(t as usize)
            {
                *lost = lost.saturating_add(running.gpus.len() as u32);
            }
        }
        for &v in &victims {
            let running = &snapshot.running[v];
            if let Some(g) = running.gang
                && let Some(gang) = snapshot.gangs.get(g as usize)
                && let Some(&missing) = gang
                    .running
                    .iter()
                    .find(|&&m| !victims.contains(&(m as usize)))
            {
                return Err(Invalid::GangSplit {
                    gang: gang.name.clone(),
                    missing: snapshot.running_names(&[missing]).remove(0),
                });
            }
        }
        let here: Vec<usize> = victims
            .iter()
            .copied()
            .filter(|&v| snapshot.running[v].node == a.node)
            .collect();
        for &v in &victims {
            let running = &snapshot.running[v];
            let mate_here = running.gang.is_some()
                && here
                    .iter()
                    .any(|&h| snapshot.running[h].gang == running.gang);
            if running.node != a.node && !mate_here {
                return Err(Invalid::VictimElsewhere {
                    victim: running.pod.clone(),
                });
            }
        }
        let placement = self.check(a, request, &released(self, a.node, &here, &[]))?;
        // Without any one victim (a gang: without all of its members here) the
        // preemptor must not fit.
        for &v in &here {
            let kept: Vec<usize> = match snapshot.running[v].gang {
                Some(g) => here
                    .iter()
                    .copied()
                    .filter(|&h| snapshot.running[h].gang == Some(g))
                    .collect(),
                None => vec![v],
            };
            if self
                .check(a, request, &released(self, a.node, &here, &kept))
                .is_ok()
            {
                return Err(Invalid::NeedlessVictim {
                    victim: snapshot.running[v].pod.clone(),
                });
            }
        }
        Ok((placement, victims))
    }
}

/// Whether `running` may be reclaimed for `request` although its priority
/// is not lower: its tenant, without it and the GPUs it already `lost` this
/// round, still holds at least its quota, and the preemptor's (other)
/// tenant stays within its own with this pod.
fn reclaimable(replay: &Replay<'_>, request: &Request, running: &Running, lost: &[u32]) -> bool {
    let tenants = &replay.snapshot.tenants;
    let (Some(theirs), Some(ours)) = (running.tenant, request.tenant) else {
        return false;
    };
    if theirs == ours {
        return false;
    }
    let (Some(theirs), Some(ours_t)) = (tenants.get(theirs as usize), tenants.get(ours as usize))
    else {
        return false;
    };
    let wants = match &request.ask {
        Ask::Gpus(shape) => shape.count,
        Ask::Claims(claims) => claims
            .iter()
            .flat_map(|c| &c.requests)
            .filter_map(|r| r.alternatives.first())
            .map(|alt| alt.count)
            .sum(),
    };
    let ours_after = ours_t
        .holding
        .saturating_add(replay.tenant_took[ours as usize])
        .saturating_add(wants);
    let theirs_after = theirs
        .holding
        .saturating_sub(
            lost.get(running.tenant.unwrap_or(0) as usize)
                .copied()
                .unwrap_or(0),
        )
        .saturating_sub(running.gpus.len() as u32);
    theirs_after >= theirs.quota && ours_after <= ours_t.quota
}

/// The node's GPUs as they are with the victims `here` gone, but for
/// `kept` (to see whether it was needed).
fn released(replay: &Replay<'_>, node: u32, here: &[usize], kept: &[usize]) -> Vec<GpuLeft> {
    let snapshot = replay.snapshot;
    let mut left = replay.node_slice(node).to_vec();
    let gpus = &snapshot.nodes[node as usize].gpus;
    for &v in here {
        if kept.contains(&v) {
            continue;
        }
        let running = &snapshot.running[v];
        for &g in &running.gpus {
            let Some(info) = gpus.get(g as usize) else {
                continue;
            };
            let slot = &mut left[g as usize];
            if running.shared_mib == 0 {
                if slot.held == Some(Holder::Before) {
                    slot.held = None;
                    slot.free_mib = info.memory_mib;
                    if let Some(mig) = &info.mig
                        && let Some(parent) = left.get_mut(mig.parent as usize)
                    {
                        parent.mig_held = parent.mig_held.saturating_sub(1);
                    }
                }
            } else {
                slot.shares = slot.shares.saturating_sub(1);
                slot.free_mib = slot
                    .free_mib
                    .saturating_add(running.shared_mib)
                    .min(info.memory_mib);
            }
        }
    }
    left
}
