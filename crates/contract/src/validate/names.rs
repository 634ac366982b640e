//! How verdicts name things: pods by `namespace/name`, GPUs by UUID (or,
//! for a bare snapshot, by the made-up names of
//! [`HostSnapshot::from_snapshot`]), decisions in words.

use crate::host_snapshot::{HostSnapshot, made_up_uuid};
use crate::types::{Assignment, Decision, Snapshot};

/// The pod of a decision, by name, when its position names one.
pub(super) fn pod_name(snapshot: &Snapshot, position: u32) -> Option<&str> {
    snapshot
        .pending
        .get(position as usize)
        .map(|r| r.pod.as_str())
}

/// How GPUs are named in verdicts: by UUID for a [`HostSnapshot`], by the
/// made-up name of [`HostSnapshot::from_snapshot`] otherwise.
pub(super) type Names<'n> = &'n dyn Fn(u32, u32) -> String;

pub(super) fn made_up(snapshot: &Snapshot) -> impl Fn(u32, u32) -> String + '_ {
    move |node, gpu| {
        snapshot
            .nodes
            .get(node as usize)
            .and_then(|n| made_up_uuid(n, gpu))
            .unwrap_or_else(|| format!("#{gpu}"))
    }
}

pub(super) fn host_names(host: &HostSnapshot) -> impl Fn(u32, u32) -> String + '_ {
    move |node, gpu| {
        host.uuid(node, gpu)
            .map_or_else(|| format!("#{gpu}"), str::to_owned)
    }
}

pub(super) fn describe_named(snapshot: &Snapshot, decision: &Decision, names: Names) -> String {
    let pod = |p: u32| pod_name(snapshot, p).map_or(format!("pod #{p}"), str::to_owned);
    let placed = |a: &Assignment| {
        let node = snapshot.nodes.get(a.node as usize);
        let gpus: Vec<String> = a
            .gpus
            .iter()
            .chain(a.claims.iter().flat_map(|c| &c.gpus))
            .map(|&g| {
                if node.is_some_and(|n| (g as usize) < n.gpus.len()) {
                    names(a.node, g)
                } else {
                    format!("#{g}")
                }
            })
            .collect();
        format!(
            "{} on {} GPUs {}",
            pod(a.pod),
            node.map_or(format!("node #{}", a.node), |n| n.name.clone()),
            gpus.join(",")
        )
    };
    match decision {
        Decision::Assign(a) => placed(a),
        Decision::Wait(d) => format!("wait for {}", pod(d.pod)),
        Decision::Reject(d) => format!("reject {}", pod(d.pod)),
        Decision::Preempt(p) => {
            let victims = snapshot.running_names(&p.victims);
            format!("{}, evicting {}", placed(&p.assignment), victims.join(","))
        }
    }
}
