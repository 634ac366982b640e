//! Checking a snapshot that did not come from the controller (a file given
//! to `wasmgpu policy run|compare|bench`).
//!
//! Serde checks the types; [`check`] checks what the types cannot say and
//! the controller's snapshots always obey, so that a policy is never tested
//! against a round that cannot happen: names are unique, indices point at
//! something, counts are in range, memory adds up, and a GPU is held either
//! exclusively or in shares, not both; model and profile indices point into
//! their tables, a MIG instance follows its parent, has a profile and takes
//! its parent's health; gangs have unique `namespace/name`s and list each
//! pending member of their namespace once, members that name them back, at
//! least one; no count or memory is past what any cluster has
//! ([`MAX_MEMORY_MIB`], [`MAX_MEMBERS`]). Names (nodes, GPUs, pods) are at most
//! [`NAME_BYTES`] long, so that a decision naming them survives the engine's
//! bounds. The error names the offending entry
//! the way the file spells it: `pending[3] ("ml/train").count: must be 1 to
//! 16, got 0`.

use std::collections::HashMap;
use std::fmt;

use crate::bounds::{MAX_COUNT, NAME_BYTES};
use crate::host_snapshot::HostSnapshot;
use crate::types::{Ask, Gpu, GpuShape, Node, Request, Sharing, Snapshot};

/// The most memory of one GPU (or one request on it) a snapshot may name:
/// 16 TiB, two orders of magnitude past the largest GPU made.
pub const MAX_MEMORY_MIB: u64 = 1 << 24;
/// The most members a gang may need or have bound: a PodGroup's
/// `minMember` is an `int32`.
pub const MAX_MEMBERS: u32 = i32::MAX as u32;

/// What is wrong with a snapshot, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {reason}")]
pub struct SnapshotError {
    /// The entry and field, e.g. `nodes[0] ("a").gpus[1] ("GPU-x").allocatedMiB`.
    pub at: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Checks `snapshot` against the rules in the module docs; the first
/// violation is the error.
pub fn check(host: &HostSnapshot) -> Result<(), SnapshotError> {
    let snapshot = &host.snapshot;
    let mut node_names: HashMap<&str, usize> = HashMap::new();
    let mut uuid_to_place: HashMap<&str, String> = HashMap::new();
    if host.nodes.len() != snapshot.nodes.len() {
        return fail("nodes".into(), "every node needs its labels and UUIDs");
    }
    let mut namespaces: HashMap<&str, usize> = HashMap::new();
    for (i, ns) in snapshot.namespaces.iter().enumerate() {
        if let Some(first) = namespaces.insert(ns, i) {
            return fail(
                format!("namespaces[{i}]"),
                format!("repeats namespaces[{first}]"),
            );
        }
    }
    for (n, node) in snapshot.nodes.iter().enumerate() {
        let at = format!("nodes[{n}] ({:?})", node.name);
        if node.name.trim().is_empty() {
            return fail(format!("nodes[{n}].name"), "must not be empty");
        }
        too_long(&node.name, || format!("nodes[{n}].name"))?;
        if let Some(first) = node_names.insert(&node.name, n) {
            return fail(format!("{at}.name"), format!("repeats nodes[{first}].name"));
        }
        check_gpus(
            snapshot,
            node,
            &host.nodes[n].uuids,
            &at,
            &mut uuid_to_place,
        )?;
    }
    let sets = snapshot.eligible_sets.len();
    for (s, set) in snapshot.eligible_sets.iter().enumerate() {
        if let Some(node) = crate::bits::indices(set).find(|&n| n as usize >= snapshot.nodes.len())
        {
            return fail(
                format!("eligibleSets[{s}]"),
                format!(
                    "node index {node} is out of range ({} nodes)",
                    snapshot.nodes.len()
                ),
            );
        }
    }
    for (c, set) in snapshot.candidate_sets.iter().enumerate() {
        for (i, d) in set.iter().enumerate() {
            let at = format!("candidateSets[{c}][{i}]");
            if snapshot
                .nodes
                .get(d.node as usize)
                .is_none_or(|n| d.gpu as usize >= n.gpus.len())
            {
                return fail(at, format!("no GPU {} on node {}", d.gpu, d.node));
            }
            if i > 0 && set[i - 1] >= *d {
                return fail(at, "candidates must be sorted by node then GPU, each once");
            }
        }
    }
    check_running(snapshot)?;
    let mut tenant_names: HashMap<&str, usize> = HashMap::new();
    for (t, tenant) in snapshot.tenants.iter().enumerate() {
        if let Some(first) = tenant_names.insert(&tenant.name, t) {
            return fail(
                format!("tenants[{t}] ({:?}).name", tenant.name),
                format!("repeats tenants[{first}].name"),
            );
        }
    }
    let mut pods: HashMap<&str, usize> = HashMap::new();
    for (p, request) in snapshot.pending.iter().enumerate() {
        too_long(&request.pod, || format!("pending[{p}].pod"))?;
        let at = format!("pending[{p}] ({:?})", request.pod);
        if let Some(first) = pods.insert(&request.pod, p) {
            return fail(format!("{at}.pod"), format!("repeats pending[{first}].pod"));
        }
        check_request(snapshot, request, &at, sets)?;
    }
    let mut gang_names: HashMap<&str, usize> = HashMap::new();
    for g in 0..snapshot.gangs.len() {
        check_gang(snapshot, g, &mut gang_names)?;
    }
    for (p, request) in snapshot.pending.iter().enumerate() {
        if let Some(g) = request.gang
            && !snapshot.gangs[g as usize].pending.contains(&(p as u32))
        {
            return fail(
                format!("pending[{p}] ({:?}).gang", request.pod),
                format!("gangs[{g}].pending does not list this request ({p})"),
            );
        }
    }
    Ok(())
}

fn check_running(snapshot: &Snapshot) -> Result<(), SnapshotError> {
    for (r, running) in snapshot.running.iter().enumerate() {
        let at = format!("running[{r}] ({:?})", running.pod);
        too_long(&running.pod, || format!("running[{r}].pod"))?;
        if running.namespace as usize >= snapshot.namespaces.len() {
            return fail(
                format!("{at}.namespace"),
                format!(
                    "{} is out of range ({} namespaces)",
                    running.namespace,
                    snapshot.namespaces.len()
                ),
            );
        }
        let Some(node) = snapshot.nodes.get(running.node as usize) else {
            return fail(
                format!("{at}.node"),
                format!(
                    "{} is out of range ({} nodes)",
                    running.node,
                    snapshot.nodes.len()
                ),
            );
        };
        if let Some(g) = running
            .gpus
            .iter()
            .find(|&&g| g as usize >= node.gpus.len())
        {
            return fail(
                format!("{at}.gpus"),
                format!(
                    "{g} is out of range (node {:?} has {} GPUs)",
                    node.name,
                    node.gpus.len()
                ),
            );
        }
        if running
            .tenant
            .is_some_and(|t| t as usize >= snapshot.tenants.len())
        {
            return fail(format!("{at}.tenant"), "is out of range");
        }
        if let Some(g) = running.gang
            && snapshot
                .gangs
                .get(g as usize)
                .is_none_or(|gang| !gang.running.contains(&(r as u32)))
        {
            return fail(
                format!("{at}.gang"),
                format!("gangs[{g}].running does not list this pod ({r})"),
            );
        }
    }
    Ok(())
}

fn check_gang<'a>(
    snapshot: &'a Snapshot,
    g: usize,
    gang_names: &mut HashMap<&'a str, usize>,
) -> Result<(), SnapshotError> {
    let gang = &snapshot.gangs[g];
    let at = format!("gangs[{g}] ({:?})", gang.name);
    let Some((namespace, _)) = gang
        .name
        .split_once('/')
        .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
    else {
        return fail(
            format!("{at}.name"),
            "must be namespace/name (its PodGroup's)",
        );
    };
    if let Some(first) = gang_names.insert(&gang.name, g) {
        return fail(format!("{at}.name"), format!("repeats gangs[{first}].name"));
    }
    if gang.min_member == 0 || gang.min_member > MAX_MEMBERS {
        return fail(
            format!("{at}.minMember"),
            format!(
                "must be 1 to {MAX_MEMBERS} (a PodGroup's minMember), got {}",
                gang.min_member
            ),
        );
    }
    if gang.bound > MAX_MEMBERS {
        return fail(
            format!("{at}.bound"),
            format!("must be at most {MAX_MEMBERS}, got {}", gang.bound),
        );
    }
    if gang.pending.is_empty() && gang.running.is_empty() {
        return fail(
            format!("{at}.pending"),
            "lists no member: a snapshot holds a gang only while one of its members waits or runs",
        );
    }
    if let Some(&r) = gang.running.iter().find(|&&r| {
        snapshot
            .running
            .get(r as usize)
            .is_none_or(|p| p.gang != Some(g as u32))
    }) {
        return fail(
            format!("{at}.running"),
            format!("{r} is not a running pod whose gang is {g}"),
        );
    }
    let mut listed: HashMap<u32, usize> = HashMap::new();
    for (i, &p) in gang.pending.iter().enumerate() {
        let at = format!("{at}.pending[{i}]");
        if let Some(first) = listed.insert(p, i) {
            return fail(at, format!("{p} repeats pending[{first}]"));
        }
        let Some(request) = snapshot
            .pending
            .get(p as usize)
            .filter(|r| r.gang == Some(g as u32))
        else {
            return fail(
                at,
                format!("{p} is not a pending request whose gang is {g}"),
            );
        };
        let theirs = namespace_name(snapshot, request.namespace);
        if theirs != namespace {
            return fail(
                at,
                format!(
                    "{p} ({:?}) is in namespace {theirs:?}: a gang's members are in its PodGroup's namespace ({namespace:?})",
                    request.pod
                ),
            );
        }
    }
    Ok(())
}

/// The namespace at `index` of the table, or `?`.
fn namespace_name(snapshot: &Snapshot, index: u32) -> &str {
    snapshot
        .namespaces
        .get(index as usize)
        .map_or("?", String::as_str)
}

fn check_gpus<'a>(
    snapshot: &Snapshot,
    node: &Node,
    uuids: &'a [String],
    node_at: &str,
    uuid_to_place: &mut HashMap<&'a str, String>,
) -> Result<(), SnapshotError> {
    if uuids.len() != node.gpus.len() {
        return fail(format!("{node_at}.gpus"), "every GPU needs a UUID");
    }
    let mut indices: HashMap<u32, usize> = HashMap::new();
    for (g, gpu) in node.gpus.iter().enumerate() {
        let uuid = &uuids[g];
        let at = format!("{node_at}.gpus[{g}] ({uuid:?})");
        if uuid.trim().is_empty() {
            return fail(format!("{node_at}.gpus[{g}].uuid"), "must not be empty");
        }
        too_long(uuid, || format!("{node_at}.gpus[{g}].uuid"))?;
        if gpu.model as usize >= snapshot.models.len() {
            return fail(
                format!("{at}.model"),
                format!(
                    "{} is out of range ({} models)",
                    gpu.model,
                    snapshot.models.len()
                ),
            );
        }
        match &gpu.mig {
            None => {
                if let Some(first) = indices.insert(gpu.index, g) {
                    return fail(
                        format!("{at}.index"),
                        format!("{} repeats gpus[{first}].index", gpu.index),
                    );
                }
            }
            Some(mig) => {
                let parent = node.gpus.get(mig.parent as usize);
                if mig.parent as usize >= g || parent.is_none_or(|p| p.mig.is_some()) {
                    return fail(
                        format!("{at}.mig.parent"),
                        format!(
                            "{} must be the position of a whole GPU listed before the instance",
                            mig.parent
                        ),
                    );
                }
                if mig.profile as usize >= snapshot.mig_profiles.len() {
                    return fail(
                        format!("{at}.mig.profile"),
                        format!(
                            "{} is out of range ({} migProfiles)",
                            mig.profile,
                            snapshot.mig_profiles.len()
                        ),
                    );
                }
                if gpu.shared_owners > 0 {
                    return fail(
                        format!("{at}.sharedOwners"),
                        "a MIG instance is never shared",
                    );
                }
                if gpu.healthy && parent.is_some_and(|p| !p.healthy) {
                    return fail(
                        format!("{at}.healthy"),
                        format!(
                            "true under an unhealthy parent (gpus[{}]): an instance takes its GPU's health",
                            mig.parent
                        ),
                    );
                }
            }
        }
        if let Some(first) = uuid_to_place.insert(uuid, format!("{node_at}.gpus[{g}]")) {
            return fail(format!("{at}.uuid"), format!("repeats {first}.uuid"));
        }
        check_gpu(gpu, &at)?;
    }
    for (g, gpu) in node.gpus.iter().enumerate() {
        for peer in crate::bits::nvlink_indices(gpu.nvlink) {
            let at = format!("{node_at}.gpus[{g}] ({:?}).nvlink", uuids[g]);
            if !indices.contains_key(&peer) {
                return fail(
                    at,
                    format!("{peer} is not the index of a whole GPU of the node"),
                );
            }
            if peer == gpu.index && gpu.mig.is_none() {
                return fail(at, format!("{peer} is the GPU itself"));
            }
        }
    }
    Ok(())
}

fn check_gpu(gpu: &Gpu, at: &str) -> Result<(), SnapshotError> {
    memory_in_range(gpu.memory_mib, at)?;
    if gpu.allocated_mib > gpu.memory_mib {
        return fail(
            format!("{at}.allocatedMiB"),
            format!(
                "{} is more than memoryMiB ({})",
                gpu.allocated_mib, gpu.memory_mib
            ),
        );
    }
    if gpu.held {
        if gpu.shared_owners > 0 {
            return fail(
                format!("{at}.held"),
                format!(
                    "a GPU held exclusively has no shared owners, got sharedOwners {}",
                    gpu.shared_owners
                ),
            );
        }
        if gpu.allocated_mib != gpu.memory_mib {
            return fail(
                format!("{at}.allocatedMiB"),
                format!(
                    "a GPU held exclusively has all its memory allocated ({} MiB), got {}",
                    gpu.memory_mib, gpu.allocated_mib
                ),
            );
        }
    }
    Ok(())
}

fn check_request(
    snapshot: &Snapshot,
    request: &Request,
    at: &str,
    sets: usize,
) -> Result<(), SnapshotError> {
    if request.namespace as usize >= snapshot.namespaces.len() {
        return fail(
            format!("{at}.namespace"),
            format!(
                "{} is out of range ({} namespaces)",
                request.namespace,
                snapshot.namespaces.len()
            ),
        );
    }
    let namespace = namespace_name(snapshot, request.namespace);
    match request.pod.split_once('/') {
        Some((ns, name)) if ns == namespace && !name.is_empty() => {}
        _ => {
            return fail(
                format!("{at}.pod"),
                format!("must be namespace/name with the request's namespace ({namespace:?})"),
            );
        }
    }
    if request
        .tenant
        .is_some_and(|t| t as usize >= snapshot.tenants.len())
    {
        return fail(format!("{at}.tenant"), "is out of range");
    }
    let gangs = snapshot.gangs.len();
    match &request.ask {
        Ask::Gpus(shape) => check_shape(shape, &format!("{at}.ask.gpus"))?,
        Ask::Claims(claims) => {
            for (c, claim) in claims.iter().enumerate() {
                for (r, req) in claim.requests.iter().enumerate() {
                    for (k, alt) in req.alternatives.iter().enumerate() {
                        if alt.candidates as usize >= snapshot.candidate_sets.len() {
                            return fail(
                                format!(
                                    "{at}.ask.claims[{c}].requests[{r}].alternatives[{k}].candidates"
                                ),
                                "is out of range",
                            );
                        }
                    }
                }
            }
        }
    }
    check_membership(request, at, sets, gangs)
}

fn check_shape(request: &GpuShape, at: &str) -> Result<(), SnapshotError> {
    if !(1..=MAX_COUNT).contains(&request.count) {
        return fail(
            format!("{at}.count"),
            format!("must be 1 to {MAX_COUNT}, got {}", request.count),
        );
    }
    if request
        .model
        .as_deref()
        .is_some_and(|m| m.trim().is_empty())
    {
        return fail(
            format!("{at}.model"),
            "must not be empty (null accepts any model)",
        );
    }
    memory_in_range(request.memory_mib, at)?;
    if request.sharing == Sharing::Shared && request.memory_mib == 0 {
        return fail(
            format!("{at}.memoryMiB"),
            "a shared request takes a share of each GPU: must be more than 0",
        );
    }
    if request
        .mig_profile
        .as_deref()
        .is_some_and(|m| m.trim().is_empty())
    {
        return fail(
            format!("{at}.migProfile"),
            "must not be empty (null asks for whole GPUs)",
        );
    }
    if request.mig_profile.is_some() && request.sharing == Sharing::Shared {
        return fail(
            format!("{at}.sharing"),
            "a MIG request is exclusive: MIG instances are not shared",
        );
    }
    Ok(())
}

fn check_membership(
    request: &Request,
    at: &str,
    sets: usize,
    gangs: usize,
) -> Result<(), SnapshotError> {
    if let Some(g) = request.gang
        && g as usize >= gangs
    {
        return fail(
            format!("{at}.gang"),
            format!("{g} is out of range ({gangs} gangs)"),
        );
    }
    if request.eligible_set as usize >= sets {
        return fail(
            format!("{at}.eligibleSet"),
            format!(
                "{} is out of range ({sets} eligibleSets)",
                request.eligible_set
            ),
        );
    }
    Ok(())
}

/// Memory past [`MAX_MEMORY_MIB`] is an error at `{at}.memoryMiB`.
fn memory_in_range(mib: u64, at: &str) -> Result<(), SnapshotError> {
    if mib > MAX_MEMORY_MIB {
        return fail(
            format!("{at}.memoryMiB"),
            format!("{mib} is more than any GPU has (at most {MAX_MEMORY_MIB})"),
        );
    }
    Ok(())
}

/// A name longer than [`NAME_BYTES`] is an error at `at()`.
fn too_long(name: &str, at: impl FnOnce() -> String) -> Result<(), SnapshotError> {
    if name.len() > NAME_BYTES {
        return fail(
            at(),
            format!("is {} bytes long, at most {NAME_BYTES}", name.len()),
        );
    }
    Ok(())
}

fn fail(at: String, reason: impl fmt::Display) -> Result<(), SnapshotError> {
    Err(SnapshotError {
        at,
        reason: reason.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{namespace, node, refresh_tables, request, shape, snapshot};
    use crate::types::Sharing as S;

    fn valid() -> Snapshot {
        let mut a = node("a", 4, "NVIDIA H100 80GB HBM3", 81920);
        a.gpus[0].held = true;
        a.gpus[0].allocated_mib = 81920;
        a.gpus[1].shared_owners = 2;
        a.gpus[1].allocated_mib = 16384;
        a.gpus[2].nvlink = 1 << 3;
        a.gpus[3].nvlink = 1 << 2;
        snapshot(
            vec![a, node("b", 2, "NVIDIA L4", 23034)],
            vec![
                request("ns/x", 2, S::Exclusive, 0),
                request("ns/y", 1, S::Shared, 8192),
            ],
        )
    }

    /// Adds gang `name` of `members` (positions in `pending`), then `change`s it.
    fn gang_of(
        s: &mut Snapshot,
        name: &str,
        min_member: u32,
        members: &[u32],
        change: impl FnOnce(&mut crate::types::Gang),
    ) {
        let g = s.gangs.len() as u32;
        let mut gang = crate::types::Gang {
            name: name.into(),
            min_member,
            bound: 0,
            pending: members.to_vec(),
            running: Vec::new(),
        };
        change(&mut gang);
        for &p in members {
            s.pending[p as usize].gang = Some(g);
        }
        s.gangs.push(gang);
    }

    /// The error for `valid()` changed by `change`.
    fn error(change: impl FnOnce(&mut Snapshot)) -> String {
        let mut snap = valid();
        change(&mut snap);
        check(&HostSnapshot::from_snapshot(snap))
            .expect_err("invalid")
            .to_string()
    }

    #[test]
    fn a_snapshot_like_the_controllers_passes() {
        assert_eq!(check(&HostSnapshot::from_snapshot(valid())), Ok(()));
        let large: Snapshot = crate::testing::large(30, 50);
        assert_eq!(check(&HostSnapshot::from_snapshot(large)), Ok(()));
    }

    #[test]
    fn uuids_are_unique_across_nodes() {
        let mut host = HostSnapshot::from_snapshot(valid());
        let mut uuids = host.nodes[1].uuids.to_vec();
        uuids[0] = "GPU-a-2".into();
        host.nodes[1].uuids = uuids.into();
        assert_eq!(
            check(&host).unwrap_err().to_string(),
            "nodes[1] (\"b\").gpus[0] (\"GPU-a-2\").uuid: repeats nodes[0] (\"a\").gpus[2].uuid"
        );
    }

    #[test]
    fn each_rule_names_the_entry_and_field() {
        type Change = Box<dyn FnOnce(&mut Snapshot)>;
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|s| s.nodes[1].name = "a".into()),
                "nodes[1] (\"a\").name: repeats nodes[0].name",
            ),
            (
                Box::new(|s| s.nodes[1].gpus[1].index = 0),
                ".gpus[1] (\"GPU-b-0\").index: 0 repeats gpus[0].index",
            ),
            (
                Box::new(|s| s.nodes[0].gpus[2].allocated_mib = 90000),
                "nodes[0] (\"a\").gpus[2] (\"GPU-a-2\").allocatedMiB: 90000 is more than memoryMiB (81920)",
            ),
            (
                Box::new(|s| s.nodes[0].gpus[0].shared_owners = 1),
                ".gpus[0] (\"GPU-a-0\").held: a GPU held exclusively has no shared owners",
            ),
            (
                Box::new(|s| s.nodes[0].gpus[0].allocated_mib = 0),
                ".gpus[0] (\"GPU-a-0\").allocatedMiB: a GPU held exclusively has all its memory",
            ),
            (
                Box::new(|s| s.nodes[0].gpus[2].nvlink = 1 << 3 | 1 << 4),
                ".gpus[2] (\"GPU-a-2\").nvlink: 4 is not the index of a whole GPU of the node",
            ),
            (
                Box::new(|s| s.nodes[0].gpus[2].nvlink = 1 << 2),
                "nvlink: 2 is the GPU itself",
            ),
            (
                Box::new(|s| s.eligible_sets[0] = crate::bits::from_indices(3, [0, 2])),
                "eligibleSets[0]: node index 2 is out of range (2 nodes)",
            ),
            (
                Box::new(|s| s.nodes[1].name = "b".repeat(513)),
                "nodes[1].name: is 513 bytes long, at most 512",
            ),
            (
                Box::new(|s| s.pending[0].pod = format!("ns/{}", "x".repeat(600))),
                "pending[0].pod: is 603 bytes long, at most 512",
            ),
            (
                Box::new(|s| s.pending[1].pod = "ns/x".into()),
                "pending[1] (\"ns/x\").pod: repeats pending[0].pod",
            ),
            (
                Box::new(|s| s.pending[1].pod = "other/y".into()),
                "pending[1] (\"other/y\").pod: must be namespace/name with the request's namespace (\"ns\")",
            ),
            (
                Box::new(|s| shape(&mut s.pending[0]).count = 0),
                "pending[0] (\"ns/x\").ask.gpus.count: must be 1 to 16, got 0",
            ),
            (
                Box::new(|s| shape(&mut s.pending[0]).count = 17),
                "pending[0] (\"ns/x\").ask.gpus.count: must be 1 to 16, got 17",
            ),
            (
                Box::new(|s| shape(&mut s.pending[0]).model = Some(" ".into())),
                "pending[0] (\"ns/x\").ask.gpus.model: must not be empty",
            ),
            (
                Box::new(|s| shape(&mut s.pending[1]).memory_mib = 0),
                "pending[1] (\"ns/y\").ask.gpus.memoryMiB: a shared request",
            ),
            (
                Box::new(|s| s.nodes[0].gpus[1].model = 9),
                ".gpus[1] (\"GPU-a-1\").model: 9 is out of range",
            ),
            (
                Box::new(|s| s.pending[0].gang = Some(0)),
                "pending[0] (\"ns/x\").gang: 0 is out of range (0 gangs)",
            ),
            (
                Box::new(|s| {
                    s.nodes[1].gpus[1].mig = Some(crate::types::MigInstance {
                        parent: 1,
                        profile: 0,
                    })
                }),
                ".gpus[1] (\"MIG-GPU-b-1-0\").mig.parent: 1 must be the position of a whole GPU listed before",
            ),
            (
                Box::new(|s| s.pending[0].eligible_set = 1),
                "pending[0] (\"ns/x\").eligibleSet: 1 is out of range (1 eligibleSets)",
            ),
            (
                Box::new(|s| shape(&mut s.pending[1]).memory_mib = u64::MAX - 1),
                "pending[1] (\"ns/y\").ask.gpus.memoryMiB: 18446744073709551614 is more than any GPU has",
            ),
            (
                Box::new(|s| s.nodes[1].gpus[0].memory_mib = 1 << 40),
                ".gpus[0] (\"GPU-b-0\").memoryMiB: 1099511627776 is more than any GPU has",
            ),
            (
                Box::new(|s| {
                    s.nodes[1].gpus[0].healthy = false;
                    s.mig_profiles = vec!["1g.5gb".into()];
                    s.nodes[1].gpus[1].mig = Some(crate::types::MigInstance {
                        parent: 0,
                        profile: 0,
                    });
                }),
                ".gpus[1] (\"MIG-GPU-b-1-0\").healthy: true under an unhealthy parent (gpus[0])",
            ),
            (
                Box::new(|s| gang_of(s, "ns/train", 2, &[0, 1], |g| g.pending = vec![0, 0])),
                "gangs[0] (\"ns/train\").pending[1]: 0 repeats pending[0]",
            ),
            (
                Box::new(|s| {
                    s.pending[1].pod = "lab/y".into();
                    s.pending[1].namespace = namespace("lab");
                    refresh_tables(s);
                    gang_of(s, "ns/train", 2, &[0, 1], |_| {});
                }),
                "gangs[0] (\"ns/train\").pending[1]: 1 (\"lab/y\") is in namespace \"lab\"",
            ),
            (
                Box::new(|s| {
                    gang_of(s, "ns/train", 1, &[0], |_| {});
                    gang_of(s, "ns/train", 1, &[1], |_| {});
                }),
                "gangs[1] (\"ns/train\").name: repeats gangs[0].name",
            ),
            (
                Box::new(|s| gang_of(s, "ns/train", 2, &[0], |g| g.min_member = u32::MAX)),
                "gangs[0] (\"ns/train\").minMember: must be 1 to 2147483647 (a PodGroup's minMember), got 4294967295",
            ),
            (
                Box::new(|s| gang_of(s, "ns/train", 2, &[0], |g| g.bound = u32::MAX - 1)),
                "gangs[0] (\"ns/train\").bound: must be at most 2147483647",
            ),
            (
                Box::new(|s| {
                    gang_of(s, "ns/train", 2, &[0], |g| g.pending.clear());
                    s.pending[0].gang = None;
                }),
                "gangs[0] (\"ns/train\").pending: lists no member",
            ),
            (
                Box::new(|s| gang_of(s, "train", 2, &[0], |_| {})),
                "gangs[0] (\"train\").name: must be namespace/name",
            ),
        ];
        for (change, want) in cases {
            let got = error(change);
            assert!(got.contains(want), "want: {want}\ngot:  {got}");
        }
    }
}
