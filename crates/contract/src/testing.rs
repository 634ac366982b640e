//! Builders for snapshots in tests and benchmarks (of policies and of the host).
//!
//! GPU models and MIG profiles are indices into tables of the snapshot; the
//! builders take names and keep one process-wide table of each, which
//! [`snapshot`] (and [`refresh_tables`], after later edits) copies into the
//! snapshot.

use std::sync::Mutex;

use crate::{Gang, Gpu, MigInstance, Node, Request, Sharing, Snapshot};

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

/// Copies the model and profile tables into `snapshot` (after [`model`] or
/// [`mig_profile`] named one the snapshot did not have yet).
pub fn refresh_tables(snapshot: &mut Snapshot) {
    snapshot.models = MODELS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    snapshot.mig_profiles = MIG_PROFILES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
}

/// A node named `name` with `gpus` identical GPUs, UUIDs `GPU-{name}-{i}`, all
/// healthy and free, no NVLink.
pub fn node(name: &str, gpus: u32, model: &str, memory_mib: u64) -> Node {
    Node {
        name: name.to_owned(),
        labels: Vec::new(),
        gpus: (0..gpus)
            .map(|i| gpu(&format!("GPU-{name}-{i}"), i, model, memory_mib))
            .collect(),
    }
}

/// A healthy, free GPU.
pub fn gpu(uuid: &str, index: u32, model: &str, memory_mib: u64) -> Gpu {
    Gpu {
        uuid: uuid.to_owned(),
        index,
        model: self::model(model),
        memory_mib,
        allocated_mib: 0,
        held: false,
        shared_owners: 0,
        numa_node: None,
        nvlink_peers: Vec::new(),
        healthy: true,
        mig: None,
    }
}

/// Adds `profiles` as MIG instances of the node's GPU at position `parent`
/// (UUIDs `MIG-{parent uuid}-{k}`), each with `memory_mib`, right after the
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
            uuid: format!("MIG-{}-{k}", base.uuid),
            memory_mib: *memory_mib,
            nvlink_peers: Vec::new(),
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
    });
    for &m in members {
        snapshot.pending[m as usize].gang = Some(index);
    }
}

/// The assignments among `decisions`, by name: `(pod, node, GPU UUIDs)`.
/// Positions out of range read as `?`.
pub fn assigned(
    snapshot: &Snapshot,
    decisions: &[crate::Decision],
) -> Vec<(String, String, Vec<String>)> {
    decisions
        .iter()
        .filter_map(|d| match d {
            crate::Decision::Assign(a) => {
                let pod = snapshot
                    .pending
                    .get(a.pod as usize)
                    .map_or("?", |r| r.pod.as_str());
                let node = snapshot.nodes.get(a.node as usize);
                let gpus = a
                    .gpus
                    .iter()
                    .map(|&g| {
                        node.and_then(|n| n.gpus.get(g as usize))
                            .map_or("?".to_owned(), |g| g.uuid.clone())
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
    decisions: &'d [crate::Decision],
    pod: &str,
) -> Option<&'d crate::Decision> {
    let position = snapshot.pending.iter().position(|r| r.pod == pod)? as u32;
    decisions.iter().find(|d| d.pod() == position)
}

/// Links every pair of GPUs on the node with NVLink (as on an HGX board).
pub fn with_full_nvlink(mut node: Node) -> Node {
    let count = node.gpus.len() as u32;
    for (i, gpu) in node.gpus.iter_mut().enumerate() {
        gpu.nvlink_peers = (0..count).filter(|&j| j != i as u32).collect();
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
            let peers = &mut node.gpus[from as usize].nvlink_peers;
            if !peers.contains(&to) {
                peers.push(to);
                peers.sort_unstable();
            }
        }
    }
    node
}

/// Sets labels `(key, value)` on the node, replacing the value of a key it
/// already has: `with_labels(node, &[("topology.kubernetes.io/zone", "a")])`.
pub fn with_labels(mut node: Node, labels: &[(&str, &str)]) -> Node {
    for &(key, value) in labels {
        match node.labels.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value.to_owned(),
            None => node.labels.push((key.to_owned(), value.to_owned())),
        }
    }
    node
}

/// A request for `count` GPUs; its namespace is taken from `pod` (`ns/name`),
/// no model constraint, priority 0, created at 0, eligible on every node (set
/// 0 of [`snapshot`]).
pub fn request(pod: &str, count: u32, sharing: Sharing, memory_mib: u64) -> Request {
    let namespace = pod
        .split_once('/')
        .map_or("default", |(ns, _)| ns)
        .to_owned();
    Request {
        pod: pod.to_owned(),
        resource: format!("{namespace}/gpus"),
        namespace,
        count,
        model: None,
        mig_profile: None,
        memory_mib,
        sharing,
        priority: 0,
        created_ms: 0,
        eligible_set: 0,
        gang: None,
    }
}

/// A snapshot of `nodes` and `pending` whose eligible set 0 is every node.
pub fn snapshot(nodes: Vec<Node>, pending: Vec<Request>) -> Snapshot {
    let all: Vec<u32> = (0..nodes.len() as u32).collect();
    let mut snapshot = Snapshot {
        round: 1,
        models: Vec::new(),
        mig_profiles: Vec::new(),
        nodes,
        pending,
        eligible_sets: vec![all],
        gangs: Vec::new(),
        usage: Vec::new(),
        config: String::new(),
    };
    refresh_tables(&mut snapshot);
    snapshot
}

/// Restricts pending request `pod` (by position) to `nodes`, through a new
/// eligible set.
pub fn restrict(snapshot: &mut Snapshot, pod: usize, nodes: &[u32]) {
    snapshot.eligible_sets.push(nodes.to_vec());
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
                for (i, gpu) in node.gpus.iter_mut().enumerate() {
                    gpu.nvlink_peers.push(i as u32 ^ 1);
                }
                node
            };
            node.labels = vec![
                ("kubernetes.io/hostname".into(), name.clone()),
                (
                    "topology.kubernetes.io/zone".into(),
                    format!("zone-{}", n % 3),
                ),
            ];
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
            r.model = match (roll >> 24) % 6 {
                0 => Some("NVIDIA H100*".into()),
                1 => Some("*A100*".into()),
                _ => None,
            };
            r.priority = ((roll >> 32) % 3) as i32;
            r.created_ms = 1_700_000_000_000 + u64::from(p) * 10;
            r
        })
        .collect();
    let zones: Vec<Vec<u32>> = (0..3)
        .map(|z| (0..node_count).filter(|n| n % 3 == z).collect())
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
pub fn assert_host_accepts_a_large_round(allocate: impl Fn(&Snapshot) -> Vec<crate::Decision>) {
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
            .filter(|d| matches!(d, crate::Decision::Assign(_)))
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
