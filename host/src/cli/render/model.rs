//! What the picture shows, worked out without drawing: every GPU of the
//! snapshot once the round's accepted decisions are applied.

use std::collections::{BTreeMap, BTreeSet};

use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::types::{Request, Sharing, Snapshot};
use wasmgpu_contract::validate::Verdict;

/// What colours a GPU in the picture: the namespace or the tenant
/// (`GPUTenant`) of the pod that holds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ColorBy {
    #[default]
    Namespace,
    Tenant,
}

/// One policy's round, ready to draw.
pub(crate) struct Panel {
    /// The policy (name and version).
    pub title: String,
    /// The round's outcome in one line.
    pub summary: String,
    pub nodes: Vec<NodeView>,
    /// Pods left pending: waiting, rejected, or refused by the host.
    pub pending: Vec<PendingLine>,
    /// Every owner (namespace or tenant) holding something, sorted.
    pub owners: BTreeSet<String>,
}

pub(crate) struct NodeView {
    pub name: String,
    /// Its whole GPUs, in the node's order; MIG instances inside their parent.
    pub gpus: Vec<GpuView>,
}

pub(crate) struct GpuView {
    pub uuid: String,
    pub model: String,
    pub memory_mib: u64,
    pub healthy: bool,
    /// The NVLink group (connected GPUs) it belongs to, numbered per node,
    /// when the group has more than one GPU.
    pub nvlink_group: Option<usize>,
    pub fill: Fill,
    pub instances: Vec<InstanceView>,
}

pub(crate) struct InstanceView {
    pub uuid: String,
    pub profile: String,
    pub fill: Fill,
}

/// What holds a GPU (or MIG instance).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    Free,
    /// Held whole by one pod.
    Held {
        owner: String,
        pod: String,
        mark: Mark,
    },
    /// Shares of its memory (`used_mib` of `memory_mib` promised).
    Shared {
        shares: Vec<Share>,
        used_mib: u64,
    },
    /// Held, by a pod the snapshot does not name (a nomination of an
    /// earlier round, say).
    Unknown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Held before this round.
    Running,
    /// Placed by this round.
    Placed,
    /// Promised to a preemptor of this round (its victims still on it).
    Nominated,
    /// Held by a pod this round evicts.
    Victim,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Share {
    /// `None` for memory promised to pods the snapshot does not name.
    pub owner: Option<String>,
    pub pod: String,
    pub mib: u64,
    pub placed: bool,
}

pub(crate) struct PendingLine {
    pub pod: String,
    pub what: &'static str,
    pub reason: String,
}

/// Per unit (position in a node's `gpus`) while the round is applied.
#[derive(Default, Clone)]
struct Unit {
    held: Option<(String, String, Mark)>,
    shares: Vec<Share>,
}

impl Panel {
    pub(crate) fn of(title: &str, host: &HostSnapshot, verdict: &Verdict, by: ColorBy) -> Panel {
        let snapshot = &host.snapshot;
        let owner_of = |namespace: u32, tenant: Option<u32>| match by {
            ColorBy::Namespace => snapshot.namespace(namespace).to_owned(),
            ColorBy::Tenant => tenant
                .and_then(|t| snapshot.tenants.get(t as usize))
                .map_or_else(|| "(no tenant)".to_owned(), |t| t.name.clone()),
        };
        let mut units: Vec<Vec<Unit>> = snapshot
            .nodes
            .iter()
            .map(|n| vec![Unit::default(); n.gpus.len()])
            .collect();
        let victims: BTreeSet<usize> = verdict
            .preempting
            .iter()
            .flat_map(|p| p.victim_positions.iter().copied())
            .collect();
        for (position, running) in snapshot.running.iter().enumerate() {
            let owner = owner_of(running.namespace, running.tenant);
            for &gpu in &running.gpus {
                let Some(u) = unit(&mut units, running.node as usize, gpu) else {
                    continue;
                };
                if running.shared_mib > 0 {
                    u.shares.push(Share {
                        owner: Some(owner.clone()),
                        pod: running.pod.clone(),
                        mib: running.shared_mib,
                        placed: false,
                    });
                } else {
                    let mark = if victims.contains(&position) {
                        Mark::Victim
                    } else {
                        Mark::Running
                    };
                    u.held = Some((owner.clone(), running.pod.clone(), mark));
                }
            }
        }
        let placements = verdict.accepted.iter().map(|p| (p, Mark::Placed)).chain(
            verdict
                .preempting
                .iter()
                .map(|p| (&p.placement, Mark::Nominated)),
        );
        for (placement, mark) in placements {
            let Some(request) = snapshot.pending.get(placement.request) else {
                continue;
            };
            let owner = owner_of(request.namespace, request.tenant);
            let (node, gpus) = &placement.at;
            for &gpu in gpus {
                let Some(u) = unit(&mut units, *node, gpu) else {
                    continue;
                };
                match shared_mib(request) {
                    Some(mib) if mark == Mark::Placed => u.shares.push(Share {
                        owner: Some(owner.clone()),
                        pod: placement.pod.clone(),
                        mib,
                        placed: true,
                    }),
                    _ => u.held = Some((owner.clone(), placement.pod.clone(), mark)),
                }
            }
        }
        let nodes: Vec<NodeView> = snapshot
            .nodes
            .iter()
            .enumerate()
            .map(|(n, node)| NodeView {
                name: node.name.clone(),
                gpus: gpu_views(snapshot, host, n, &units[n]),
            })
            .collect();
        let owners = nodes
            .iter()
            .flat_map(|n| &n.gpus)
            .flat_map(|g| std::iter::once(&g.fill).chain(g.instances.iter().map(|i| &i.fill)))
            .flat_map(|fill| match fill {
                Fill::Held { owner, .. } => vec![owner.clone()],
                Fill::Shared { shares, .. } => {
                    shares.iter().filter_map(|s| s.owner.clone()).collect()
                }
                Fill::Free | Fill::Unknown => vec![],
            })
            .collect();
        Panel {
            title: title.to_owned(),
            summary: format!(
                "{} assigned · {} preempting · {} waiting · {} rejected · {} refused by the host",
                verdict.accepted.len(),
                verdict.preempting.len(),
                verdict.waiting.len(),
                verdict.rejected.len(),
                verdict.refused.len()
            ),
            nodes,
            pending: pending_lines(verdict),
            owners,
        }
    }
}

/// The unit at `gpu` of node `node`, when both exist.
fn unit(units: &mut [Vec<Unit>], node: usize, gpu: u32) -> Option<&mut Unit> {
    units.get_mut(node)?.get_mut(gpu as usize)
}

/// The memory a shared request takes on each GPU; `None` for the others.
fn shared_mib(request: &Request) -> Option<u64> {
    let shape = wasmgpu_policy_sdk::shape_of(request)?;
    (shape.sharing == Sharing::Shared && shape.mig_profile.is_none()).then_some(shape.memory_mib)
}

fn gpu_views(snapshot: &Snapshot, host: &HostSnapshot, n: usize, units: &[Unit]) -> Vec<GpuView> {
    let node = &snapshot.nodes[n];
    let uuid = |p: usize| {
        host.nodes
            .get(n)
            .and_then(|h| h.uuids.get(p))
            .cloned()
            .unwrap_or_default()
    };
    let groups = nvlink_groups(snapshot, n);
    let mut views: Vec<GpuView> = Vec::new();
    let mut position_of_view = BTreeMap::new();
    for (p, gpu) in node.gpus.iter().enumerate() {
        if gpu.mig.is_some() {
            continue;
        }
        position_of_view.insert(p, views.len());
        views.push(GpuView {
            uuid: uuid(p),
            model: model_name(snapshot, gpu.model),
            memory_mib: gpu.memory_mib,
            healthy: gpu.healthy,
            nvlink_group: groups.get(&p).copied(),
            fill: fill(gpu, &units[p]),
            instances: Vec::new(),
        });
    }
    for (p, gpu) in node.gpus.iter().enumerate() {
        let Some(mig) = gpu.mig else { continue };
        let Some(&view) = position_of_view.get(&(mig.parent as usize)) else {
            continue;
        };
        views[view].instances.push(InstanceView {
            uuid: uuid(p),
            profile: snapshot
                .mig_profiles
                .get(mig.profile as usize)
                .cloned()
                .unwrap_or_default(),
            fill: fill(gpu, &units[p]),
        });
    }
    views
}

fn model_name(snapshot: &Snapshot, model: u32) -> String {
    snapshot
        .models
        .get(model as usize)
        .cloned()
        .unwrap_or_default()
}

fn fill(gpu: &wasmgpu_contract::types::Gpu, unit: &Unit) -> Fill {
    if let Some((owner, pod, mark)) = &unit.held {
        return Fill::Held {
            owner: owner.clone(),
            pod: pod.clone(),
            mark: *mark,
        };
    }
    if gpu.held {
        return Fill::Unknown;
    }
    let named: u64 = unit
        .shares
        .iter()
        .filter(|s| !s.placed)
        .map(|s| s.mib)
        .sum();
    let mut shares = unit.shares.clone();
    if gpu.allocated_mib > named {
        shares.push(Share {
            owner: None,
            pod: "pods not in the snapshot".into(),
            mib: gpu.allocated_mib - named,
            placed: false,
        });
    }
    if shares.is_empty() {
        return Fill::Free;
    }
    let used_mib = shares.iter().map(|s| s.mib).sum();
    Fill::Shared { shares, used_mib }
}

/// The NVLink group of each whole GPU (by position) whose group has more
/// than one GPU: connected components of the link graph, numbered in the
/// order of their first GPU.
fn nvlink_groups(snapshot: &Snapshot, n: usize) -> BTreeMap<usize, usize> {
    let gpus = &snapshot.nodes[n].gpus;
    let whole: Vec<usize> = (0..gpus.len()).filter(|&p| gpus[p].mig.is_none()).collect();
    let by_index: BTreeMap<u32, usize> = whole.iter().map(|&p| (gpus[p].index, p)).collect();
    let linked = |a: usize, b: usize| {
        let (ia, ib) = (gpus[a].index, gpus[b].index);
        (ib < 64 && gpus[a].nvlink & (1 << ib) != 0) || (ia < 64 && gpus[b].nvlink & (1 << ia) != 0)
    };
    let mut group: BTreeMap<usize, usize> = BTreeMap::new();
    let mut next = 0;
    for &start in &whole {
        if group.contains_key(&start) {
            continue;
        }
        let mut members = vec![start];
        let mut stack = vec![start];
        group.insert(start, next);
        while let Some(a) = stack.pop() {
            for &b in by_index.values() {
                if !group.contains_key(&b) && linked(a, b) {
                    group.insert(b, next);
                    members.push(b);
                    stack.push(b);
                }
            }
        }
        if members.len() == 1 {
            group.remove(&start);
        } else {
            next += 1;
        }
    }
    group
}

fn pending_lines(verdict: &Verdict) -> Vec<PendingLine> {
    let deferred = |what: &'static str| {
        move |d: &wasmgpu_contract::validate::Deferred| PendingLine {
            pod: d.pod.clone(),
            what,
            reason: d.reason.clone(),
        }
    };
    verdict
        .waiting
        .iter()
        .map(deferred("waits"))
        .chain(verdict.rejected.iter().map(deferred("rejected")))
        .chain(verdict.refused.iter().map(|r| {
            PendingLine {
                pod: r
                    .pod
                    .clone()
                    .unwrap_or_else(|| format!("decision {}", r.index)),
                what: "refused",
                reason: r.reason.to_string(),
            }
        }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgpu_contract::Sharing::{Exclusive, Shared};
    use wasmgpu_contract::assign;
    use wasmgpu_contract::testing::{node, request, running, snapshot, with_mig, with_nvlink};
    use wasmgpu_contract::validate::validate_host;

    #[test]
    fn gpus_show_what_the_round_left_on_them() {
        let a = with_nvlink(node("a", 4, "NVIDIA H100", 81559), &[(0, 1), (1, 2)]);
        let b = with_mig(node("b", 1, "NVIDIA A100", 40960), 0, &[("1g.5gb", 4864)]);
        let mut snap = snapshot(
            vec![a, b],
            vec![
                request("team-a/train", 2, Exclusive, 0),
                request("team-b/infer", 1, Shared, 20000),
            ],
        );
        running(&mut snap, "team-c/old", 0, 0, &[3], 0);
        let host = HostSnapshot::from_snapshot(snap);
        let decisions = vec![assign(0, 0, vec![0, 1]), assign(1, 0, vec![2])];
        let verdict = validate_host(&host, &decisions);
        assert_eq!(verdict.accepted.len(), 2, "{:?}", verdict.refused);
        let panel = Panel::of("binpack", &host, &verdict, ColorBy::Namespace);

        let gpus = &panel.nodes[0].gpus;
        assert!(
            matches!(&gpus[0].fill, Fill::Held { owner, mark: Mark::Placed, .. } if owner == "team-a")
        );
        assert!(matches!(
            &gpus[2].fill,
            Fill::Shared {
                used_mib: 20000,
                ..
            }
        ));
        assert!(
            matches!(&gpus[3].fill, Fill::Held { owner, mark: Mark::Running, .. } if owner == "team-c")
        );
        assert_eq!(
            gpus.iter().map(|g| g.nvlink_group).collect::<Vec<_>>(),
            [Some(0), Some(0), Some(0), None]
        );
        let b = &panel.nodes[1].gpus;
        assert_eq!(
            (b.len(), b[0].instances.len()),
            (1, 1),
            "the MIG instance sits in its parent"
        );
        assert_eq!(
            panel.owners.iter().collect::<Vec<_>>(),
            ["team-a", "team-b", "team-c"]
        );
    }
}
