//! What the controller's index costs as the cluster fills: the time of a
//! round's index work (its snapshot, what the round starts from, what it
//! reports) at 1,000 nodes × 8 GPUs with no pod bound and with 5,000 bound,
//! and the memory the index holds at 10,000 nodes with 50,000 bound pods.
//!
//! `cargo test --release --workspace --bench index` (docs/BENCHMARKS.md,
//! "The index as the cluster fills"). `ROUNDS=` (default 20), `NODES=`,
//! `BOUND=` and `BIG_NODES=`/`BIG_BOUND=` change the scale.

use std::time::{Duration, Instant};

use wasmgpu_api::Sharing;
use wasmgpu_index::Index;
use wasmgpu_index::testing::{H100_MIB, gpunode, gpuresource, node, pod};

const GPUS_PER_NODE: u32 = 8;
const PENDING: u32 = 1000;

fn env(var: &str, default: u32) -> u32 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// GPU `gpu` of node `node`, as long as NVML's UUIDs.
fn uuid(node: u32, gpu: u32) -> String {
    format!("GPU-{node:08x}-0000-4000-8000-{gpu:012x}")
}

/// An index of `nodes` nodes with `bound` pods bound (one GPU each, filling
/// nodes in turn) and `pending` pods waiting.
fn cluster(nodes: u32, bound: u32, pending: u32) -> Index {
    let mut index = Index::new("binpack");
    for n in 0..nodes {
        let name = format!("node-{n}");
        let zone = format!("zone-{}", n % 3);
        index.apply_node(
            &node(&name)
                .label("topology.kubernetes.io/zone", &zone)
                .build(),
        );
        index.apply_gpunode(
            &gpunode(&name)
                .with_gpus(GPUS_PER_NODE)
                .uuids(|g| uuid(n, g))
                .nvlinked()
                .build(),
        );
    }
    index.apply_gpuresource(&gpuresource("ml", "one-gpu").build());
    let gpus = nodes * GPUS_PER_NODE;
    assert!(
        bound <= gpus,
        "{bound} bound pods need more than {gpus} GPUs"
    );
    // Bound pods fill the nodes in turn, one GPU each.
    for k in 0..bound {
        let (n, g) = (k % nodes, k / nodes);
        let (node, uuid) = (format!("node-{n}"), uuid(n, g));
        let bound = pod("ml", &format!("pod-{k}")).resource("one-gpu").holds(
            &node,
            &[&uuid],
            Sharing::Exclusive,
            H100_MIB,
        );
        index.apply_pod(&bound.build());
    }
    for k in bound..bound + pending {
        index.apply_pod(&pod("ml", &format!("pod-{k}")).resource("one-gpu").build());
    }
    index
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Median time of the index work of one round: the snapshot for the policy,
/// what the round starts from and what it reports.
fn round(index: &Index, rounds: u32) -> (Duration, Duration, Duration) {
    let time = |f: &dyn Fn()| {
        f();
        median(
            (0..rounds)
                .map(|_| {
                    let started = Instant::now();
                    f();
                    started.elapsed()
                })
                .collect(),
        )
    };
    let snapshot = time(&|| {
        std::hint::black_box(index.snapshot("binpack", 1, 2_000));
    });
    let start = time(&|| {
        std::hint::black_box(index.round_start());
    });
    let report = time(&|| {
        std::hint::black_box(index.round_report(2_000));
    });
    (snapshot, start, report)
}

/// This process's resident memory and its peak, in MiB (Linux).
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() {
    let rounds = env("ROUNDS", 20);
    let nodes = env("NODES", 1000);
    let bound = env("BOUND", 5000);
    println!(
        "index work of one round, {nodes} nodes x {GPUS_PER_NODE} GPUs, {PENDING} pending pods; median of {rounds}"
    );
    println!(
        "{:<16} {:>12} {:>12} {:>12} {:>12}",
        "bound pods", "snapshot", "round start", "report", "together"
    );
    let mut rows = Vec::new();
    for bound in [0, bound] {
        let index = cluster(nodes, bound, PENDING);
        let (snapshot, start, report) = round(&index, rounds);
        let together = snapshot + start + report;
        println!("{bound:<16} {snapshot:>12.2?} {start:>12.2?} {report:>12.2?} {together:>12.2?}");
        rows.push(together);
    }
    println!(
        "ratio {bound} bound / empty: {:.2}x",
        rows[1].as_secs_f64() / rows[0].as_secs_f64()
    );

    let big_nodes = env("BIG_NODES", 10_000);
    let big_bound = env("BIG_BOUND", 50_000);
    let (before, _) = rss_mib();
    let started = Instant::now();
    let index = cluster(big_nodes, big_bound, 0);
    let fed = started.elapsed();
    let (after, _) = rss_mib();
    let started = Instant::now();
    std::hint::black_box(index.snapshot("binpack", 1, 2_000));
    let snapshot = started.elapsed();
    let (_, peak) = rss_mib();
    println!(
        "{big_nodes} nodes, {big_bound} bound pods: fed in {fed:.2?}; the index holds {:.1} MiB; \
         resident {after:.1} MiB, peak {peak:.1} MiB with one snapshot ({snapshot:.2?})",
        after - before
    );
    drop(index);
}
