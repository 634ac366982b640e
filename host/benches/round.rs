//! One scheduling round at scale: 1,000 nodes × 8 GPUs, 1,000 pending pods.
//!
//! `make bench` (or `cargo test --release -p wasmgpu --bench round` after `make policies`)
//! prints the median and p99 of each phase over repeated rounds:
//! binpack natively, binpack in Wasm (instantiate, call, reset, validate, full round),
//! marshalling alone (a policy that returns nothing), and the Wasm/native ratio.
//! The last rows time marshalling with parts of the snapshot emptied (GPU
//! UUIDs, NVLink peer lists, node labels): what a leaner encoding of those
//! parts could save at most.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use wasmgpu::engine::types::Snapshot;
use wasmgpu::engine::{Engine, Limits};
use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::validate::validate_host;

/// `NODES=` and `PODS=` change the scale (default 1,000 each).
fn scale(var: &str) -> u32 {
    std::env::var(var)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000)
}

fn policy(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("WASMGPU_POLICY_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wasm32-wasip2/policy")
        });
    let path = dir.join(format!("wasmgpu_{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{} ({e}): run `make policies` first", path.display()))
}

fn stats(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |p: usize| samples[((samples.len() * p).div_ceil(100)).clamp(1, samples.len()) - 1];
    (at(50), at(99))
}

fn time<T>(rounds: usize, mut f: impl FnMut() -> T) -> Vec<Duration> {
    std::hint::black_box(f());
    (0..rounds)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(f());
            started.elapsed()
        })
        .collect()
}

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(50);
    let (nodes, pods) = (scale("NODES"), scale("PODS"));
    // As the controller gives it to binpack: no node labels (binpack asks
    // for none), no UUIDs (they stay on the host).
    let mut host = HostSnapshot::from_snapshot(wasmgpu_contract::testing::large(nodes, pods));
    let snapshot: Snapshot = host.for_policy(&[]).clone();
    let labelled: Snapshot = host
        .for_policy(&[
            "kubernetes.io/hostname".to_owned(),
            "topology.kubernetes.io/zone".to_owned(),
        ])
        .clone();
    let sdk_snapshot = snapshot.clone();
    let engine = Engine::new(Limits::default()).unwrap();
    let binpack = engine.load(&policy("binpack")).unwrap();
    // The same component without fuel metering (`--fuel 0`): the deadline
    // alone bounds a call. Timed in the same loop, call for call.
    let unmetered = Engine::new(Limits {
        fuel: 0,
        ..Limits::default()
    })
    .unwrap();
    let binpack_unmetered = unmetered.load(&policy("binpack")).unwrap();
    let mut noop_snapshot = snapshot.clone();
    noop_snapshot.config = "noop".into();
    let noop = engine.load(&policy("hostile_policy")).unwrap();

    let native = time(rounds, || wasmgpu_binpack::allocate(&sdk_snapshot));
    let (mut instantiate, mut call, mut check, mut round) = (vec![], vec![], vec![], vec![]);
    let mut reset = vec![];
    let (mut call_unmetered, mut round_unmetered) = (vec![], vec![]);
    let mut placed = 0;
    binpack.allocate(&snapshot).unwrap();
    binpack_unmetered.allocate(&snapshot).unwrap();
    for _ in 0..rounds {
        let started = Instant::now();
        let result = binpack.allocate(&snapshot).unwrap();
        // Validated as the controller validates: GPUs named by their UUIDs.
        let verdict = validate_host(&host, &result.decisions);
        round.push(started.elapsed());
        instantiate.push(result.stats.instantiate);
        call.push(result.stats.call);
        reset.push(result.stats.reset);
        let started = Instant::now();
        std::hint::black_box(validate_host(&host, &result.decisions));
        check.push(started.elapsed());
        placed = verdict.accepted.len();
        assert!(verdict.refused.is_empty());

        let started = Instant::now();
        let result = binpack_unmetered.allocate(&snapshot).unwrap();
        let verdict = validate_host(&host, &result.decisions);
        round_unmetered.push(started.elapsed());
        call_unmetered.push(result.stats.call);
        assert_eq!(verdict.accepted.len(), placed, "the same decisions");
    }
    let marshal = |snapshot: &Snapshot| -> Vec<Duration> {
        (0..rounds)
            .map(|_| noop.allocate(snapshot).unwrap().stats.call)
            .collect()
    };
    let marshal_call = marshal(&noop_snapshot);
    let mut noop_labelled = labelled.clone();
    noop_labelled.config = "noop".into();
    let marshal_labelled = marshal(&noop_labelled);

    let gpus: usize = snapshot.nodes.iter().map(|n| n.gpus.len()).sum();
    println!(
        "round: {nodes} nodes, {gpus} GPUs, {pods} pending pods; binpack placed {placed}; {rounds} rounds each"
    );
    println!("{:<34} {:>10} {:>10}", "phase", "median", "p99");
    let rows = [
        ("binpack native (algorithm)", native.clone()),
        ("binpack wasm: instantiate", instantiate),
        ("binpack wasm: call (incl. marshal)", call.clone()),
        ("binpack wasm: reset (instance goes)", reset),
        ("validate", check),
        ("binpack wasm: full round", round),
        ("  without fuel: call", call_unmetered.clone()),
        ("  without fuel: full round", round_unmetered),
        ("marshalling alone (noop policy)", marshal_call.clone()),
        ("  asking for 2 node labels", marshal_labelled),
    ];
    for (name, samples) in rows {
        let (p50, p99) = stats(samples);
        println!("{name:<34} {:>10.3?} {:>10.3?}", p50, p99);
    }
    let (native_p50, _) = stats(native);
    let (call_p50, _) = stats(call);
    let (marshal_p50, _) = stats(marshal_call);
    let (unmetered_p50, _) = stats(call_unmetered);
    let algorithm_in_wasm = call_p50.saturating_sub(marshal_p50);
    println!(
        "ratio wasm/native: call {:.2}x, algorithm alone (call - marshalling) {:.2}x; without fuel: call {:.2}x",
        call_p50.as_secs_f64() / native_p50.as_secs_f64(),
        algorithm_in_wasm.as_secs_f64() / native_p50.as_secs_f64(),
        unmetered_p50.as_secs_f64() / native_p50.as_secs_f64()
    );
}
