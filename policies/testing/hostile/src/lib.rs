//! A test-only policy that misbehaves on request. The snapshot's `config` names
//! the misbehaviour (bare, or as a JSON string: `"trap"`); the engine's tests use
//! it to prove each one is contained.
//!
//! | config           | what it does                                              |
//! |------------------|-----------------------------------------------------------|
//! | `noop`           | returns no decisions (measures marshalling alone)         |
//! | `loop`           | spins forever                                             |
//! | `memory-bomb`    | allocates until something stops it                        |
//! | `trap`           | panics                                                    |
//! | `trap-over-2`    | panics with more than 2 pods pending, else decides nothing |
//! | `recursion`      | recurses without end                                      |
//! | `huge-output`    | returns 200,000 decisions                                 |
//! | `decisions:N`    | returns N decisions (waits for made-up pods)              |
//! | `long-reason:N`  | makes the first pod wait with a reason N bytes long       |
//! | `no-gpus`        | assigns the first pod no GPUs on the first node           |
//! | `ghost-gpu`      | assigns the first pod GPUs that do not exist              |
//! | `taken-gpu`      | assigns a one-GPU pod a GPU another pod holds             |
//! | `same-gpu-twice` | gives the first GPU to the first two pods                 |
//! | `past-limit`     | gives every pending pod a free GPU, whatever its tenant's limit |
//! | `preempt-first`  | the first pod takes the GPUs of the first running pod, evicting it |
//! | `preempt-needless` | the same, naming the next running pod of that node too |
//! | `preempt-elsewhere` | the same, naming a running pod of another node too  |
//! | `clock-random`   | reports the clocks and random numbers it sees             |
//! | `sleep`          | sleeps for a second                                       |
//! | `snoop`          | tries to read files and the environment, reports results  |
//! | `log-flood`      | logs 10,000 lines (one of 4,104 bytes), then a decision   |
//! | `stderr-flood`   | writes 10,000 lines (~1 MB) to stderr, then a decision    |

#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use wasmgpu_policy_sdk::{
    Cluster, Decision, Info, Policy, Snapshot, assign, info, log, preempt, shape_of, wait,
};

struct Hostile;

impl Policy for Hostile {
    fn describe() -> Info {
        info("hostile", "0.0.0", "Misbehaves on request, for tests")
    }

    fn allocate(snapshot: Snapshot) -> Vec<Decision> {
        // Decisions name pods and nodes by position: the first of each.
        let first_pod = || 0u32;
        let first_node = || 0u32;
        // A JSON string (`"trap"`, as a config.json holds it) names the same.
        match snapshot.config.trim().trim_matches('"') {
            "noop" => Vec::new(),
            "loop" => {
                let mut i: u64 = 0;
                loop {
                    i = std::hint::black_box(i.wrapping_add(1));
                }
            }
            "memory-bomb" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "trap" => panic!("deliberate trap"),
            "trap-over-2" if snapshot.pending.len() > 2 => panic!("deliberate trap: busy"),
            "trap-over-2" => Vec::new(),
            "recursion" => vec![wait(
                first_pod(),
                format!("{}", recurse(std::hint::black_box(1))),
            )],
            "huge-output" => (0..200_000).map(|i| wait(i as u32, "x")).collect(),
            "no-gpus" => vec![assign(first_pod(), first_node(), Vec::new())],
            other if other.starts_with("decisions:") => {
                (0..number(other)).map(|i| wait(i as u32, "x")).collect()
            }
            other if other.starts_with("long-reason:") => {
                vec![wait(first_pod(), "x".repeat(number(other)))]
            }
            "ghost-gpu" => {
                let count = snapshot
                    .pending
                    .first()
                    .and_then(shape_of)
                    .map_or(1, |s| s.count);
                // Positions past the end of the node's GPU list.
                let ghosts = (0..count).map(|i| 1_000 + i).collect();
                vec![assign(first_pod(), first_node(), ghosts)]
            }
            "taken-gpu" => {
                let taken = snapshot.nodes.iter().enumerate().find_map(|(n, node)| {
                    let g = node.gpus.iter().position(|g| g.held)?;
                    Some((n as u32, g as u32))
                });
                let single = snapshot
                    .pending
                    .iter()
                    .position(|r| shape_of(r).is_some_and(|s| s.count == 1));
                match (taken, single) {
                    (Some((n, g)), Some(r)) => vec![assign(r as u32, n, vec![g])],
                    _ => Vec::new(),
                }
            }
            "past-limit" => {
                // Free whole GPUs per node, taken in order.
                let mut free: Vec<Vec<u32>> = snapshot
                    .nodes
                    .iter()
                    .map(|node| {
                        (0..node.gpus.len() as u32)
                            .filter(|&g| {
                                let gpu = &node.gpus[g as usize];
                                !gpu.held && gpu.healthy && gpu.mig.is_none()
                            })
                            .collect()
                    })
                    .collect();
                let cluster = Cluster::new(&snapshot);
                let mut decisions = Vec::new();
                for (p, request) in snapshot.pending.iter().enumerate() {
                    let count = shape_of(request).map_or(1, |s| s.count) as usize;
                    let fits = cluster
                        .eligible(request)
                        .find(|&n| free.get(n as usize).is_some_and(|f| f.len() >= count));
                    if let Some(n) = fits.map(|n| n as usize) {
                        let gpus = free[n].drain(..count).collect();
                        decisions.push(assign(p as u32, n as u32, gpus));
                    }
                }
                decisions
            }
            "preempt-first" | "preempt-needless" | "preempt-elsewhere" => {
                // The first running pod on a node the first pending pod may
                // use; then another on the same node, or on another one.
                let Some(request) = snapshot.pending.first() else {
                    return Vec::new();
                };
                let eligible: Vec<u32> = Cluster::new(&snapshot).eligible(request).collect();
                let running = &snapshot.running;
                let Some(first) = running.iter().position(|r| eligible.contains(&r.node)) else {
                    return Vec::new();
                };
                let node = running[first].node;
                let mut victims = vec![first as u32];
                let same_node = snapshot.config.contains("needless");
                let more = running.iter().enumerate().position(|(i, r)| {
                    i != first && eligible.contains(&r.node) && (r.node == node) == same_node
                });
                if !snapshot.config.contains("first")
                    && let Some(k) = more
                {
                    victims.push(k as u32);
                }
                vec![preempt(
                    first_pod(),
                    node,
                    running[first].gpus.clone(),
                    victims,
                )]
            }
            "same-gpu-twice" => (0..snapshot.pending.len().min(2) as u32)
                .map(|r| assign(r, first_node(), vec![0]))
                .collect(),
            "clock-random" => {
                let wall = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos();
                let start = Instant::now();
                let spun: u64 = (0..10_000u64).map(std::hint::black_box).sum();
                let elapsed = start.elapsed().as_nanos();
                let random = RandomState::new().hash_one(spun);
                vec![wait(
                    first_pod(),
                    format!("wall={wall} elapsed={elapsed} random={random:x}"),
                )]
            }
            "sleep" => {
                std::thread::sleep(Duration::from_secs(1));
                Vec::new()
            }
            "snoop" => {
                let file = std::fs::read_to_string("/etc/hostname").map_err(|e| e.to_string());
                let dir = std::fs::read_dir("/")
                    .map(|_| "listed")
                    .map_err(|e| e.to_string());
                let env: Vec<(String, String)> = std::env::vars().collect();
                let args: Vec<String> = std::env::args().collect();
                vec![wait(
                    first_pod(),
                    format!("file={file:?} dir={dir:?} env={env:?} args={args:?}"),
                )]
            }
            "log-flood" => {
                log(&"x".repeat(4_104));
                for i in 1..10_000 {
                    log(&format!("line {i}"));
                }
                vec![wait(first_pod(), "logged")]
            }
            "stderr-flood" => {
                eprintln!("{}", "x".repeat(4_104));
                for i in 1..10_000 {
                    eprintln!("line {i} {}", "y".repeat(90));
                }
                vec![wait(first_pod(), "logged")]
            }
            other => wasmgpu_policy_sdk::fail(&format!("unknown misbehaviour {other:?}")),
        }
    }
}

/// The number after the `:` of a misbehaviour such as `decisions:30`.
fn number(misbehaviour: &str) -> usize {
    misbehaviour
        .split_once(':')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or_else(|| wasmgpu_policy_sdk::fail(&format!("no number in {misbehaviour:?}")))
}

#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let local = [depth; 16];
    std::hint::black_box(&local);
    recurse(depth + 1) + local[3]
}

wasmgpu_policy_sdk::export_policy!(Hostile);
