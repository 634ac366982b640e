//! Builders for snapshots in tests and benchmarks (of policies and of the host).
//!
//! GPU models, MIG profiles, namespaces and label keys are tables of the
//! snapshot that entries index; the builders take names and keep one
//! process-wide table of each, which [`snapshot`] (and [`refresh_tables`],
//! after later edits) copies into the snapshot. GPUs built here are named
//! as [`crate::HostSnapshot::from_snapshot`] names them: `GPU-{node}-{index}`,
//! and `MIG-GPU-{node}-{index}-{k}` for the k-th instance of a GPU.

use std::sync::Mutex;

use crate::types::{
    Ask, Gang, Gpu, GpuShape, MigInstance, Node, PreemptionPolicy, Publisher, Request, Running,
    Sharing, Snapshot,
};

/// The controller's own validator: the rules it applies to every decision a
/// policy returns ([`crate::validate`]). `validate(&snapshot, &decisions)` gives
/// the [`Verdict`]: what the controller would apply (`accepted`), leave
/// pending (`waiting`, including gang members held back), mark rejected
/// (`rejected`) and refuse as impossible (`refused`, each with an
/// [`Invalid`] reason).
///
/// ```
/// use wasmgpu_contract::Sharing::Exclusive;
/// use wasmgpu_contract::testing::{Invalid, node, request, snapshot, validate};
/// use wasmgpu_contract::assign;
///
/// let snap = snapshot(vec![node("a", 2, "NVIDIA L4", 23034)], vec![
///     request("ns/p", 1, Exclusive, 0),
///     request("ns/q", 1, Exclusive, 0),
/// ]);
/// // Both pods on GPU 0: the second is refused.
/// let verdict = validate(&snap, &[assign(0, 0, vec![0]), assign(1, 0, vec![0])]);
/// assert_eq!(verdict.accepted.len(), 1);
/// assert_eq!(verdict.refused[0].reason.code(), "gpu-taken");
/// assert!(matches!(verdict.refused[0].reason, Invalid::GpuTaken { .. }));
/// ```
pub use crate::validate::validate;
pub use crate::validate::{Deferred, Invalid, Placement, Refused, Verdict, describe};

static MODELS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static MIG_PROFILES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static NAMESPACES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static LABEL_KEYS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn intern(table: &Mutex<Vec<String>>, name: &str) -> u32 {
    let mut names = table.lock().unwrap_or_else(|e| e.into_inner());
    match names.iter().position(|n| n == name) {
        Some(i) => i as u32,
        None => {
            names.push(name.to_owned());
            (names.len() - 1) as u32
        }
    }
}

/// The index of GPU model `name` in the snapshots these builders make.
pub fn model(name: &str) -> u32 {
    intern(&MODELS, name)
}

/// The index of MIG profile `name` in the snapshots these builders make.
pub fn mig_profile(name: &str) -> u32 {
    intern(&MIG_PROFILES, name)
}

/// The index of namespace `name` in the snapshots these builders make.
pub fn namespace(name: &str) -> u32 {
    intern(&NAMESPACES, name)
}

/// The index of label key `key` in the snapshots these builders make.
pub fn label_key(key: &str) -> u32 {
    intern(&LABEL_KEYS, key)
}

fn table(names: &Mutex<Vec<String>>) -> Vec<String> {
    names.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Copies the tables into `snapshot` (after a builder named a model,
/// profile, namespace or label key the snapshot did not have yet), and gives
/// every node a value (or none) for each label key.
pub fn refresh_tables(snapshot: &mut Snapshot) {
    snapshot.models = table(&MODELS);
    snapshot.mig_profiles = table(&MIG_PROFILES);
    snapshot.namespaces = table(&NAMESPACES);
    snapshot.label_keys = table(&LABEL_KEYS);
    let keys = snapshot.label_keys.len();
    for node in &mut snapshot.nodes {
        node.labels.resize(keys, None);
    }
}

/// The namespace of a pending request, by name.
pub fn namespace_of<'s>(snapshot: &'s Snapshot, request: &Request) -> &'s str {
    snapshot
        .namespaces
        .get(request.namespace as usize)
        .map_or("?", String::as_str)
}

/// The GPU shape of a GPUResource request.
///
/// # Panics
///
/// When the request asks through DRA claims.
pub fn shape(request: &mut Request) -> &mut GpuShape {
    match &mut request.ask {
        Ask::Gpus(shape) => shape,
        Ask::Claims(_) => panic!("{} asks through DRA claims", request.pod),
    }
}

/// A node named `name` with `gpus` identical GPUs (indices 0…), all healthy
/// and free, no NVLink, published by the wasmgpu agent.
pub fn node(name: &str, gpus: u32, model: &str, memory_mib: u64) -> Node {
    Node {
        name: name.to_owned(),
        labels: Vec::new(),
        gpus: (0..gpus).map(|i| gpu(i, model, memory_mib)).collect(),
    }
}

/// A healthy, free GPU published by the wasmgpu agent.
pub fn gpu(index: u32, model: &str, memory_mib: u64) -> Gpu {
    Gpu {
        index,
        model: self::model(model),
        memory_mib,
        allocated_mib: 0,
        held: false,
        shared_owners: 0,
        numa_node: None,
        nvlink: 0,
        healthy: true,
        mig: None,
        published_by: Publisher::Agent,
    }
}

/// Adds `profiles` as MIG instances of the node's GPU at position `parent`
/// (named `MIG-GPU-{node}-{index}-{k}`), each with `memory_mib`, right after the
/// parent's other instances. Positions of later GPUs shift; build MIG nodes
/// last.
pub fn with_mig(mut node: Node, parent: usize, profiles: &[(&str, u64)]) -> Node {
    let base = node.gpus[parent].clone();
    let mut at = parent + 1;
    while node.gpus.get(at).is_some_and(|g| g.mig.is_some()) {
        at += 1;
    }
    for (k, (profile, memory_mib)) in profiles.iter().enumerate() {
        let instance = Gpu {
            memory_mib: *memory_mib,
            nvlink: 0,
            mig: Some(MigInstance {
                parent: parent as u32,
                profile: mig_profile(profile),
            }),
            ..base.clone()
        };
        node.gpus.insert(at + k, instance);
    }
    node
}

/// A gang `name` of the pending requests at `members` (positions), which
/// must hold GPUs `min_member` at a time; none bound yet. Sets the members'
/// `gang`.
pub fn gang(snapshot: &mut Snapshot, name: &str, min_member: u32, members: &[u32]) {
    let index = snapshot.gangs.len() as u32;
    snapshot.gangs.push(Gang {
        name: name.to_owned(),
        min_member,
        bound: 0,
        pending: members.to_vec(),
        running: Vec::new(),
    });
    for &m in members {
        snapshot.pending[m as usize].gang = Some(index);
    }
}

/// Adds a running pod `pod` (`namespace/name`) of priority `priority` on the
/// node at position `node`, holding the GPUs at positions `gpus`
/// exclusively: they are marked held. Started at `started_ms`, evictable, not
/// protected. Returns its position in `running`.
pub fn running(
    snapshot: &mut Snapshot,
    pod: &str,
    priority: i32,
    node: u32,
    gpus: &[u32],
    started_ms: u64,
) -> u32 {
    let ns = pod.split_once('/').map_or("default", |(ns, _)| ns);
    for &g in gpus {
        let gpu = &mut snapshot.nodes[node as usize].gpus[g as usize];
        gpu.held = true;
        gpu.allocated_mib = gpu.memory_mib;
    }
    snapshot.running.push(Running {
        pod: pod.to_owned(),
        namespace: namespace(ns),
        tenant: None,
        priority,
        node,
        gpus: gpus.to_vec(),
        shared_mib: 0,
        started_ms,
        gang: None,
        evictable: true,
        protected_ms: 0,
    });
    refresh_tables(snapshot);
    (snapshot.running.len() - 1) as u32
}

/// Fills node `node` with running pods `{prefix}{g}` of `priority`, one per
/// GPU `g` (exclusive), each started at `g` milliseconds: a full node a
/// preemption may free.
pub fn running_on_each_gpu(snapshot: &mut Snapshot, node: u32, prefix: &str, priority: i32) {
    for g in 0..snapshot.nodes[node as usize].gpus.len() as u32 {
        running(
            snapshot,
            &format!("{prefix}{g}"),
            priority,
            node,
            &[g],
            u64::from(g),
        );
    }
}

/// The assignments among `decisions`, by name: `(pod, node, GPU names)`,
/// GPUs named as in the module docs. Positions out of range read as `?`.
pub fn assigned(
    snapshot: &Snapshot,
    decisions: &[crate::types::Decision],
) -> Vec<(String, String, Vec<String>)> {
    decisions
        .iter()
        .filter_map(|d| match d {
            crate::types::Decision::Assign(a) => {
                let pod = snapshot
                    .pending
                    .get(a.pod as usize)
                    .map_or("?", |r| r.pod.as_str());
                let node = snapshot.nodes.get(a.node as usize);
                let gpus = a
                    .gpus
                    .iter()
                    .map(|&g| {
                        node.and_then(|n| crate::host_snapshot::made_up_uuid(n, g))
                            .unwrap_or_else(|| "?".to_owned())
                    })
                    .collect();
                Some((
                    pod.to_owned(),
                    node.map_or("?", |n| n.name.as_str()).to_owned(),
                    gpus,
                ))
            }
            _ => None,
        })
        .collect()
}

/// The decision about pod `pod` (`namespace/name`), if any.
pub fn decision_for<'d>(
    snapshot: &Snapshot,
    decisions: &'d [crate::types::Decision],
    pod: &str,
) -> Option<&'d crate::types::Decision> {
    let position = snapshot.pending.iter().position(|r| r.pod == pod)? as u32;
    decisions.iter().find(|d| d.pod() == position)
}

/// Links every pair of GPUs on the node with NVLink (as on an HGX board).
pub fn with_full_nvlink(mut node: Node) -> Node {
    let count = node.gpus.len() as u32;
    for (i, gpu) in node.gpus.iter_mut().enumerate() {
        let index = gpu.index;
        gpu.nvlink = crate::bits::nvlink_of((0..count).filter(|&j| j != index));
        let _ = i;
    }
    node
}

/// Links the GPUs of each pair `(a, b)` (positions) with NVLink, on both
/// ends: `with_nvlink(node, &[(0, 1), (2, 3)])` makes two bridged pairs.
/// Links already there are kept; a pair named twice is linked once.
///
/// # Panics
///
/// When a position is not one of the node's GPUs, or `a == b`.
pub fn with_nvlink(mut node: Node, pairs: &[(u32, u32)]) -> Node {
    let count = node.gpus.len() as u32;
    for &(a, b) in pairs {
        assert!(
            a < count && b < count && a != b,
            "with_nvlink: ({a}, {b}) is not a pair of distinct GPUs of node {} ({count} GPUs)",
            node.name
        );
        for (from, to) in [(a, b), (b, a)] {
            let index = node.gpus[to as usize].index;
            node.gpus[from as usize].nvlink |= crate::bits::nvlink_of([index]);
        }
    }
    node
}

/// Sets labels `(key, value)` on the node, replacing the value of a key it
/// already has: `with_labels(node, &[("topology.kubernetes.io/zone", "a")])`.
/// The key joins the builders' label-key table (as if the policy had asked
/// for it); [`snapshot`] gives every node a value or none for each key.
pub fn with_labels(mut node: Node, labels: &[(&str, &str)]) -> Node {
    for &(key, value) in labels {
        let at = label_key(key) as usize;
        if node.labels.len() <= at {
            node.labels.resize(at + 1, None);
        }
        node.labels[at] = Some(value.to_owned());
    }
    node
}

/// A request for `count` GPUs; its namespace is taken from `pod` (`ns/name`),
/// no model constraint, priority 0, created at 0, eligible on every node (set
/// 0 of [`snapshot`]).
pub fn request(pod: &str, count: u32, sharing: Sharing, memory_mib: u64) -> Request {
    let ns = pod.split_once('/').map_or("default", |(ns, _)| ns);
    Request {
        pod: pod.to_owned(),
        namespace: namespace(ns),
        tenant: None,
        priority: 0,
        preemption: PreemptionPolicy::PreemptLowerPriority,
        created_ms: 0,
        eligible_set: 0,
        gang: None,
        ask: Ask::Gpus(GpuShape {
            count,
            model: None,
            mig_profile: None,
            memory_mib,
            sharing,
        }),
    }
}

/// A snapshot of `nodes` and `pending` whose eligible set 0 is every node.
pub fn snapshot(nodes: Vec<Node>, pending: Vec<Request>) -> Snapshot {
    let all = crate::bits::from_indices(nodes.len(), 0..nodes.len() as u32);
    let mut snapshot = Snapshot {
        round: 1,
        nodes,
        pending,
        eligible_sets: vec![all],
        ..Snapshot::default()
    };
    refresh_tables(&mut snapshot);
    snapshot
}

/// Restricts pending request `pod` (by position) to `nodes`, through a new
/// eligible set.
pub fn restrict(snapshot: &mut Snapshot, pod: usize, nodes: &[u32]) {
    let len = snapshot.nodes.len();
    snapshot
        .eligible_sets
        .push(crate::bits::from_indices(len, nodes.iter().copied()));
    snapshot.pending[pod].eligible_set = (snapshot.eligible_sets.len() - 1) as u32;
}

/// A large, deterministic snapshot for benchmarks: `nodes` nodes of 8 GPUs
/// (alternating 8×H100 80GB with full NVLink and 8×A100 40GB in NVLink pairs),
/// about a quarter of the GPUs already in use, and `pods` pending requests of
/// 1, 2, 4 or 8 GPUs, mostly exclusive, a fifth shared, some pinned to a model,
/// a tenth restricted to one of three zones.
pub fn large(nodes: u32, pods: u32) -> Snapshot {
    let node_count = nodes;
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        // xorshift64*: deterministic, no dependency.
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let nodes: Vec<Node> = (0..nodes)
        .map(|n| {
            let name = format!("gpu-node-{n:04}");
            let mut node = if n % 2 == 0 {
                with_full_nvlink(node(&name, 8, "NVIDIA H100 80GB HBM3", 81559))
            } else {
                let mut node = node(&name, 8, "NVIDIA A100-SXM4-40GB", 40960);
                for gpu in &mut node.gpus {
                    gpu.nvlink = crate::bits::nvlink_of([gpu.index ^ 1]);
                }
                node
            };
            node = with_labels(
                node,
                &[
                    ("kubernetes.io/hostname", &name),
                    ("topology.kubernetes.io/zone", &format!("zone-{}", n % 3)),
                ],
            );
            for (i, gpu) in node.gpus.iter_mut().enumerate() {
                gpu.numa_node = Some(i as u32 / 4);
                match next() % 8 {
                    0 => {
                        gpu.held = true;
                        gpu.allocated_mib = gpu.memory_mib;
                    }
                    1 => {
                        gpu.shared_owners = 1;
                        gpu.allocated_mib = 8192;
                    }
                    _ => {}
                }
            }
            node
        })
        .collect();
    let pending = (0..pods)
        .map(|p| {
            let roll = next();
            let sharing = if roll % 5 == 0 {
                Sharing::Shared
            } else {
                Sharing::Exclusive
            };
            let count = match sharing {
                Sharing::Shared => 1,
                Sharing::Exclusive => [1, 1, 2, 4, 8][(roll >> 8) as usize % 5],
            };
            let memory = match sharing {
                Sharing::Shared => 4096 << ((roll >> 16) % 3),
                Sharing::Exclusive => [0, 40960, 65536][(roll >> 16) as usize % 3],
            };
            let mut r = request(
                &format!("team-{}/job-{p:05}", p % 7),
                count,
                sharing,
                memory,
            );
            shape(&mut r).model = match (roll >> 24) % 6 {
                0 => Some("NVIDIA H100*".into()),
                1 => Some("*A100*".into()),
                _ => None,
            };
            r.priority = ((roll >> 32) % 3) as i32;
            r.created_ms = 1_700_000_000_000 + u64::from(p) * 10;
            r
        })
        .collect();
    let zones: Vec<Vec<u64>> = (0..3)
        .map(|z| {
            crate::bits::from_indices(node_count as usize, (0..node_count).filter(|n| n % 3 == z))
        })
        .collect();
    let mut snapshot = snapshot(nodes, pending);
    snapshot.eligible_sets.extend(zones);
    for (p, request) in snapshot.pending.iter_mut().enumerate() {
        if p % 10 == 0 {
            request.eligible_set = 1 + (p as u32 / 10) % 3;
        }
    }
    snapshot
}

/// Runs `allocate` on a large round with a gang among its requests, under
/// each NVLink mode (`config` empty, `{"nvlink": "require"}`, `{"nvlink":
/// "ignore"}`), and asserts that the controller's validator refuses none
/// of its decisions, holds none back, and that it places over 100 pods.
pub fn assert_host_accepts_a_large_round(
    allocate: impl Fn(&Snapshot) -> Vec<crate::types::Decision>,
) {
    let mut snap = large(120, 400);
    gang(&mut snap, "team-1/train", 3, &[1, 8, 15]);
    for config in ["", r#"{"nvlink": "require"}"#, r#"{"nvlink": "ignore"}"#] {
        snap.config = config.into();
        let decisions = allocate(&snap);
        let verdict = validate(&snap, &decisions);
        assert!(
            verdict.refused.is_empty(),
            "{config}: {:?}",
            verdict.refused
        );
        let assigned = decisions
            .iter()
            .filter(|d| matches!(d, crate::types::Decision::Assign(_)))
            .count();
        assert!(assigned > 100, "{config}: {assigned} assigned");
        assert_eq!(verdict.accepted.len(), assigned, "{config}: none held back");
    }
}

/// `today`, the text of a snapshot file, in the first form of snapshot
/// files (snake_case keys, memory as `…_mib`, labels as `[key, value]`
/// pairs, sharing capitalised): what tests of the upgrade read.
pub fn first_form(today: &str) -> String {
    use serde_json::Value;
    fn walk(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (key, mut inner) in std::mem::take(map) {
                    let mut snake = String::new();
                    for c in key.replace("MiB", "Mib").chars() {
                        if c.is_uppercase() {
                            snake.push('_');
                        }
                        snake.extend(c.to_lowercase());
                    }
                    match (snake.as_str(), &mut inner) {
                        ("labels", Value::Object(labels)) => {
                            let pairs = labels
                                .iter()
                                .map(|(k, v)| Value::Array(vec![k.clone().into(), v.clone()]))
                                .collect();
                            inner = Value::Array(pairs);
                        }
                        ("sharing", Value::String(s)) => {
                            *s = format!("{}{}", s[..1].to_uppercase(), &s[1..]);
                        }
                        ("config", _) => {}
                        _ => walk(&mut inner),
                    }
                    map.insert(snake, inner);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut value: Value = serde_json::from_str(today).expect("a snapshot file's JSON");
    walk(&mut value);
    value.to_string()
}

/// `today`, a host snapshot, as the text of a 0.2 snapshot file (GPUs with
/// `nvlinkPeers` positions, requests with their shape at the top, namespaces
/// by name, `usage`): what tests of the upgrade read. Only what 0.2 could
/// say survives: running pods, tenants and DRA claims are left out.
pub fn previous_form(today: &crate::host_snapshot::HostSnapshot) -> String {
    use serde_json::{Value, json};
    let mut value: Value =
        serde_json::to_value(crate::snapshot_file::SnapshotFile::of(today)).expect("JSON");
    let top = value.as_object_mut().expect("an object");
    top.insert(
        "contract".into(),
        json!(crate::snapshot_file::PREVIOUS_CONTRACT),
    );
    let namespaces = top.remove("namespaces").unwrap_or(json!([]));
    for key in ["running", "candidateSets", "tenants"] {
        top.remove(key);
    }
    top.insert("usage".into(), json!([]));
    for node in top["nodes"].as_array_mut().expect("nodes") {
        let gpus = node["gpus"].as_array_mut().expect("gpus");
        let whole: Vec<(u64, usize)> = gpus
            .iter()
            .enumerate()
            .filter(|(_, g)| g["mig"].is_null())
            .map(|(p, g)| (g["index"].as_u64().expect("index"), p))
            .collect();
        for gpu in gpus {
            let gpu = gpu.as_object_mut().expect("a GPU");
            gpu.remove("publishedBy");
            let peers: Vec<usize> = gpu
                .remove("nvlink")
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|i| whole.iter().find(|(x, _)| Some(*x) == i.as_u64()))
                .map(|&(_, p)| p)
                .collect();
            gpu.insert("nvlinkPeers".into(), json!(peers));
        }
    }
    for request in top["pending"].as_array_mut().expect("pending") {
        let request = request.as_object_mut().expect("a request");
        let ns = namespaces[request["namespace"].as_u64().expect("an index") as usize].clone();
        request.insert(
            "resource".into(),
            json!(format!("{}/gpus", ns.as_str().unwrap_or(""))),
        );
        request.insert("namespace".into(), ns);
        request.remove("preemption");
        request.remove("tenant");
        if let Some(Value::Object(mut ask)) = request.remove("ask")
            && let Some(Value::Object(shape)) = ask.remove("gpus")
        {
            request.extend(shape);
        }
    }
    for gang in top["gangs"].as_array_mut().expect("gangs") {
        gang.as_object_mut().expect("a gang").remove("running");
    }
    value.to_string()
}
