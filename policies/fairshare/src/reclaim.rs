//! Reclaim: GPUs taken back for a tenant under its quota from tenants over
//! theirs, counted as the host counts them (devices, from
//! `snapshot.tenants`), so that every victim named passes the host's rule.
//!
//! ```text
//!  pod of tenant T fits nowhere ─▶ T + its GPUs ≤ T's quota? ─▶ evict on the
//!  best node pods of tenants U ≠ T with U − the pod's GPUs ≥ U's quota
//!  (lowest priority, then youngest) ─▶ preempt decision; T gains, U loses
//! ```

use wasmgpu_policy_sdk::{Cluster, Decision, Fit, Nvlink, Request, Running, Snapshot, Want};

/// What each tenant of `snapshot.tenants` holds as the round goes, in
/// devices (a MIG instance or a share is one).
pub(crate) struct Reclaim<'s> {
    snapshot: &'s Snapshot,
    on: bool,
    holding: Vec<u32>,
}

impl<'s> Reclaim<'s> {
    /// Holdings from the snapshot; `on` is `config.json`'s `reclaim`.
    pub fn new(snapshot: &'s Snapshot, on: bool) -> Self {
        Reclaim {
            snapshot,
            on,
            holding: snapshot.tenants.iter().map(|t| t.holding).collect(),
        }
    }

    /// `request` was given the devices `decision` names (a DRA pod's
    /// claim choices included).
    pub fn placed(&mut self, request: &Request, decision: &Decision) {
        let given = match decision {
            Decision::Assign(a) => a.devices(),
            Decision::Preempt(p) => p.assignment.devices(),
            Decision::Wait(_) | Decision::Reject(_) => 0,
        };
        if let Some(h) = request
            .tenant
            .and_then(|t| self.holding.get_mut(t as usize))
        {
            *h = h.saturating_add(given as u32);
        }
    }

    /// A preemption that makes room for `want` by evicting pods of tenants
    /// over their quota, when its tenant stays within its own; `None` when
    /// reclaim is off, the tenant would pass its quota, or no eviction
    /// makes room. The victims' tenants lose what they held.
    pub fn evict_for(
        &mut self,
        cluster: &mut Cluster<'s>,
        want: &Want<'s>,
        fit: Fit,
        prefer_nvlink: bool,
    ) -> Option<Decision> {
        let request = want.request;
        let ours = request.tenant? as usize;
        let quota = self.snapshot.tenants.get(ours)?.quota;
        if !self.on || self.holding[ours].saturating_add(devices(request)) > quota {
            return None;
        }
        let holding = &self.holding;
        let tenants = &self.snapshot.tenants;
        let may_evict = |pod: &Running| {
            pod.tenant
                .map(|t| t as usize)
                .filter(|&t| t != ours && t < tenants.len())
                .is_some_and(|t| {
                    holding[t].saturating_sub(pod.gpus.len() as u32) >= tenants[t].quota
                })
        };
        let decision = cluster.preempt_where(want, fit, Nvlink::from(prefer_nvlink), &may_evict)?;
        if let Decision::Preempt(p) = &decision {
            for &v in &p.victims {
                let pod = &self.snapshot.running[v as usize];
                if let Some(h) = pod.tenant.and_then(|t| self.holding.get_mut(t as usize)) {
                    *h = h.saturating_sub(pod.gpus.len() as u32);
                }
            }
        }
        Some(decision)
    }
}

/// Devices `request` takes (a DRA request: its first alternatives').
fn devices(request: &Request) -> u32 {
    wasmgpu_policy_sdk::devices_of(request)
}
