//! The placement loop most policies share: serve requests in order, choose a
//! node by headroom, pick GPUs, and explain the pods left over.

use serde::Deserialize;

use crate::cluster::{Cluster, Fit, Want};
use crate::config::parse_config;
use crate::log::fail;
use crate::nvlink::Nvlink;
use wasmgpu_contract::{Decision, Snapshot};

/// Parameters understood by [`place_each`] (`config.json`, all optional):
///
/// ```json
/// { "nvlink": "prefer", "preemption": true }
/// ```
///
/// `nvlink` is `"prefer"` (the default), `"require"` or `"ignore"`; see
/// [`Nvlink`]. The older `"preferNvlink": true | false` means `"prefer"` |
/// `"ignore"`; when both are given, `nvlink` wins. `preemption` (default
/// `true`) lets a pod that fits nowhere now evict lower-priority pods, as
/// kube-scheduler does ([`Cluster::preempt`]); `false` leaves it waiting.
#[derive(Debug, Deserialize, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PlacementParams {
    /// Keep multi-GPU exclusive requests on GPUs joined by NVLink when
    /// possible (`nvlink: "prefer"`), or not (`"ignore"`).
    pub prefer_nvlink: bool,
    /// How multi-GPU exclusive requests use NVLink; overrides
    /// `prefer_nvlink` when set.
    pub nvlink: Option<Nvlink>,
    /// Preempt lower-priority pods for a pod that fits nowhere now.
    pub preemption: bool,
}

impl Default for PlacementParams {
    fn default() -> Self {
        PlacementParams {
            prefer_nvlink: true,
            nvlink: None,
            preemption: true,
        }
    }
}

impl PlacementParams {
    /// The NVLink mode these parameters ask for.
    pub fn nvlink(&self) -> Nvlink {
        self.nvlink.unwrap_or(self.prefer_nvlink.into())
    }
}

/// Serves the snapshot's requests, GPUResource and DRA alike, by priority
/// then age ([`Cluster::all_pending_in_order`]); each GPUResource request
/// goes to the eligible node [`Cluster::choose_node`] picks for `fit`, on
/// the GPUs [`Cluster::pick_gpus`] picks for the same `fit`, and each DRA
/// request where [`Cluster::place_claims`] puts it for `fit`. A gang is
/// served whole, all or nothing ([`Cluster::place_gang`]), when its first
/// GPUResource member's turn comes (members asking through DRA claims get
/// no decision: they wait). A GPUResource request that fits nowhere now
/// preempts lower-priority pods when the config allows it
/// ([`Cluster::preempt`]), DRA requests alike. The others that fit nowhere
/// get `wait` or `reject` with the reason (for a DRA request,
/// [`Cluster::claims_unplaced`]'s), a wait with what keeps the pod from
/// preempting ([`Cluster::preemption_blocked`]).
/// Every request is held to its tenant's limit first
/// ([`Cluster::over_tenant_limit`]).
/// Multi-GPU exclusive requests follow the config's NVLink mode
/// ([`PlacementParams::nvlink`]). An invalid `config.json` fails the round
/// (see [`fail`]).
pub fn place_each(snapshot: &Snapshot, fit: Fit) -> Vec<Decision> {
    let params: PlacementParams = parse_config(&snapshot.config).unwrap_or_else(|e| fail(&e));
    let nvlink = params.nvlink();
    let mut cluster = Cluster::new(snapshot);
    let mut decisions = Vec::with_capacity(snapshot.pending.len());
    let mut gang_served = vec![false; snapshot.gangs.len()];
    for request in cluster.all_pending_in_order() {
        let dra = crate::cluster::shape_of(request).is_none();
        if let Some(gang) = request.gang
            && let Some(served) = gang_served.get_mut(gang as usize)
        {
            if !dra && !std::mem::replace(served, true) {
                decisions.extend(cluster.place_gang(gang, fit, nvlink));
            }
            continue;
        }
        let want = cluster.want(request);
        if let Some(wait) = cluster.over_tenant_limit(&want) {
            decisions.push(wait);
            continue;
        }
        if dra {
            decisions.push(place_claims(&mut cluster, &want, fit, params.preemption));
            continue;
        }
        let placed = cluster
            .choose_node_with(&want, fit, nvlink)
            .and_then(|node| cluster.place(node, &want, fit, nvlink))
            .or_else(|| {
                let now = !cluster.shortfall_with(&want, nvlink).is_permanent();
                (params.preemption && now)
                    .then(|| cluster.preempt(&want, fit, nvlink))
                    .flatten()
            });
        let decision = placed.unwrap_or_else(|| {
            let unplaced = cluster.unplaced_with(&want, nvlink);
            match (unplaced, params.preemption) {
                (Decision::Wait(mut wait), true) => {
                    if let Some(blocked) = cluster.preemption_blocked(&want) {
                        wait.reason = format!("{}; {blocked}", wait.reason);
                    }
                    Decision::Wait(wait)
                }
                (other, _) => other,
            }
        });
        decisions.push(decision);
    }
    decisions
}

/// A DRA request's decision in [`place_each`]: placed by
/// [`Cluster::place_claims`]; else, when waiting could help and the config
/// allows it (`preemption`), a preemption of lower-priority pods
/// ([`Cluster::preempt`]); else [`Cluster::claims_unplaced`]'s, a wait
/// saying what keeps the pod from preempting
/// ([`Cluster::preemption_blocked`]).
fn place_claims<'s>(
    cluster: &mut Cluster<'s>,
    want: &Want<'s>,
    fit: Fit,
    preemption: bool,
) -> Decision {
    if let Some(placed) = cluster.place_claims(want, fit) {
        return placed;
    }
    let now = !cluster.claims_shortfall(want).is_permanent();
    if preemption
        && now
        && let Some(preempted) = cluster.preempt(want, fit, Nvlink::Ignore)
    {
        return preempted;
    }
    match cluster.claims_unplaced(want) {
        Decision::Wait(mut wait) if preemption => {
            if let Some(blocked) = cluster.preemption_blocked(want) {
                wait.reason = format!("{}; {blocked}", wait.reason);
            }
            Decision::Wait(wait)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use crate::cluster::Fit;
    use crate::place_each;
    use crate::testing::{node, request, snapshot, validate};
    use wasmgpu_contract::{Decision, Sharing, Tenant};

    #[test]
    fn a_pod_whose_tenant_is_at_its_limit_waits_saying_so() {
        let mut snap = snapshot(
            vec![node("n", 8, "NVIDIA H100", 81920)],
            (0..3)
                .map(|i| request(&format!("ml/p{i}"), 1, Sharing::Exclusive, 0))
                .collect(),
        );
        snap.tenants = vec![Tenant {
            name: "ml".into(),
            weight: 1,
            quota: 0,
            limit: Some(3),
            holding: 1,
            waiting: 3,
        }];
        for r in &mut snap.pending {
            r.tenant = Some(0);
        }
        let decisions = place_each(&snap, Fit::Tightest);
        let verdict = validate(&snap, &decisions);
        assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
        assert_eq!(verdict.accepted.len(), 2, "1 held + 2 = the limit of 3");
        let Some(Decision::Wait(wait)) = decisions.last() else {
            panic!("the third waits: {decisions:?}");
        };
        assert_eq!(
            wait.reason,
            "tenant ml holds 3 of its limit 3 GPUs (GPUTenant ml: spec.limit); this pod needs 1 more"
        );
    }
}
