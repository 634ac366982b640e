//! # The policy engine
//!
//! Loads policy components and runs them in a sandbox. It knows nothing about
//! Kubernetes: it takes bytes and a [`types::Snapshot`], and gives back
//! decisions or a typed [`PolicyError`].
//!
//! ```text
//!  bytes ──▶ Engine::load ──▶ kind check ──▶ compile (cached by sha256) ──▶ link (PolicyPre)
//!                                                                              │
//!                          describe() on a fresh instance ◀───────────────────┘
//!                                        │
//!  snapshot ──▶ LoadedPolicy::allocate ──▶ fresh Store (fuel, epoch deadline, memory limit)
//!                                        ──▶ instantiate from PolicyPre ──▶ allocate() ──▶ Round
//! ```
//!
//! One [`Engine`] serves the whole process: it owns the wasmtime engine (with
//! the pooling allocator), the linker, the compiled-component cache and the
//! epoch ticker thread. A [`LoadedPolicy`] is cheap to clone and safe to share
//! between threads; every call gets its own store, so calls never share state.
//!
//! Crate `wasmgpu-engine`: below it only `wasmgpu-contract` (the types it passes)
//! and `wasmgpu-support`; above it the controller and the CLI.
// One use of `unsafe`, with its argument: loading a compiled component
// from the command line's disk cache (`disk_cache.rs`).
#![deny(unsafe_code)]

pub mod bounds;
mod disk_cache;
mod error;
mod guest_log;
mod limits;
mod policy;
mod sandbox;
mod world;

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Enabled, InstanceAllocationStrategy, PoolingAllocationConfig};

pub use error::{Cause, PolicyError, Result};
pub use limits::{EPOCH_TICK, Limits};
pub use policy::{Digest, LoadedPolicy, Round, RoundStats};

use sandbox::EngineCore;

/// The contract's types (`wasmgpu_contract::types`), as guests get them.
pub use wasmgpu_contract::types;

/// The contract this host implements (`wit/policy.wit`).
pub use wasmgpu_contract::CONTRACT;

/// Bytes of each instance slot's linear memory kept resident between calls
/// where the kernel tells which pages a call wrote (`PAGEMAP_SCAN`): only
/// those are zeroed, so this bounds memory, not work. A round at 10,000 nodes
/// × 8 GPUs and 10,000 pending pods peaks near 40 MiB.
const KEEP_RESIDENT_BYTES: usize = 64 << 20;
/// The same without `PAGEMAP_SCAN`: then all of it that the instance could
/// reach is zeroed with `memset` each time, written or not (the SDK's
/// allocator starts in an 8 MiB arena of the initial memory, mostly
/// untouched by small rounds).
const KEEP_RESIDENT_BYTES_WITHOUT_SCAN: usize = 16 << 20;

/// Concurrent calls the pooling allocator has room for.
const INSTANCE_SLOTS: u32 = 64;
/// Compiled components kept in the cache.
const CACHE_CAPACITY: usize = 32;

/// Compiles, caches and runs policy components.
pub struct Engine {
    shared: Arc<EngineCore>,
    digest_to_component: Mutex<HashMap<Digest, (u64, Component)>>,
    clock: Mutex<u64>,
    disk: Option<disk_cache::DiskCache>,
    _ticker: Ticker,
}

// === impl Engine ===

impl Engine {
    /// An engine whose calls run under `limits`.
    pub fn new(limits: Limits) -> Result<Self> {
        let keep_resident = if PoolingAllocationConfig::is_pagemap_scan_available() {
            KEEP_RESIDENT_BYTES
        } else {
            KEEP_RESIDENT_BYTES_WITHOUT_SCAN
        };
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(INSTANCE_SLOTS)
            .total_core_instances(INSTANCE_SLOTS * 8)
            .total_memories(INSTANCE_SLOTS * 2)
            .total_tables(INSTANCE_SLOTS * 4)
            .max_memory_size(limits.memory_bytes)
            .table_elements(limits.table_elements)
            // A slot's memory is zeroed with memset up to this size when an
            // instance goes, instead of decommitted and faulted back in by
            // the next round's instance: 12% less wall time per round at
            // 1,000 nodes × 1,000 pods (a round's guest peaks near 4 MiB).
            // With `PAGEMAP_SCAN`, only the pages it wrote (see the constants).
            .linear_memory_keep_resident(keep_resident)
            .pagemap_scan(Enabled::Auto);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            // Fuel costs a counter update in every block of guest code;
            // `fuel: 0` turns metering off (the deadline alone bounds a call).
            .consume_fuel(limits.metered())
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        // For `perf record`: name the compiled policy functions in
        // /tmp/perf-PID.map (docs/BENCHMARKS.md, "Profiling a round").
        if std::env::var_os("WASMGPU_PERFMAP").is_some() {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine =
            wasmtime::Engine::new(&config).map_err(|e| PolicyError::Engine(Cause::new(e)))?;
        let mut linker = Linker::new(&engine);
        sandbox::link(&mut linker).map_err(|e| PolicyError::Engine(Cause::new(e)))?;
        let ticker = Ticker::start(engine.clone());
        Ok(Engine {
            shared: Arc::new(EngineCore {
                engine,
                linker,
                limits,
            }),
            digest_to_component: Mutex::new(HashMap::new()),
            clock: Mutex::new(0),
            disk: None,
            _ticker: ticker,
        })
    }

    /// Also keeps compiled components in `dir` between processes (for the
    /// command line; see `disk_cache.rs`): a component compiled once by an
    /// engine of this build and configuration loads from there in
    /// milliseconds instead of compiling again.
    pub fn use_disk_cache(&mut self, dir: &Path) -> Result<()> {
        let cache = disk_cache::DiskCache::open(dir, &self.shared.engine).map_err(|e| {
            PolicyError::Engine(Cause::msg(format!(
                "cannot use {} for compiled components: {e}",
                dir.display()
            )))
        })?;
        self.disk = Some(cache);
        Ok(())
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// Checks, compiles (or takes from the cache), links and describes a
    /// policy. Any failure is typed: not Wasm, a core module, does not compile,
    /// wrong world, or `describe()` failing.
    pub fn load(&self, bytes: &[u8]) -> Result<LoadedPolicy> {
        check_kind(bytes)?;
        check_contract(bytes)?;
        let digest = Digest::of(bytes);
        let component = self.compile(&digest, bytes)?;
        LoadedPolicy::new(self.shared.clone(), digest, bytes.len(), component)
    }

    /// Number of compiled components in the cache.
    pub fn cached(&self) -> usize {
        wasmgpu_support::lock(&self.digest_to_component).len()
    }

    fn compile(&self, digest: &Digest, bytes: &[u8]) -> Result<Component> {
        let tick = {
            let mut clock = wasmgpu_support::lock(&self.clock);
            *clock += 1;
            *clock
        };
        if let Some((used, component)) =
            wasmgpu_support::lock(&self.digest_to_component).get_mut(digest)
        {
            *used = tick;
            return Ok(component.clone());
        }
        // Compile outside the lock: it can take a while, and other digests
        // should not wait for it.
        let component = match self
            .disk
            .as_ref()
            .and_then(|disk| disk.load(&self.shared.engine, digest))
        {
            Some(component) => component,
            None => {
                let component = Component::new(&self.shared.engine, bytes)
                    .map_err(|e| PolicyError::Compile(Cause::new(e)))?;
                if let Some(disk) = &self.disk {
                    disk.store(digest, &component);
                }
                component
            }
        };
        let mut cache = wasmgpu_support::lock(&self.digest_to_component);
        if cache.len() >= CACHE_CAPACITY
            && let Some(oldest) = cache
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(d, _)| d.clone())
        {
            cache.remove(&oldest);
        }
        cache.insert(digest.clone(), (tick, component.clone()));
        Ok(component)
    }
}

/// Rejects what is not a component before compiling, with a precise reason.
fn check_kind(bytes: &[u8]) -> Result<()> {
    if wasmparser::Parser::is_component(bytes) {
        Ok(())
    } else if wasmparser::Parser::is_core_wasm(bytes) {
        Err(PolicyError::CoreModule)
    } else if bytes.starts_with(b"\0asm") {
        Err(PolicyError::NotWasm(
            "unknown WebAssembly version or layer".into(),
        ))
    } else {
        let head: String = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        Err(PolicyError::NotWasm(format!(
            "it starts with 0x{head}, not with the Wasm magic 0x0061736d"
        )))
    }
}

/// Refuses a component built for another version of the contract, naming
/// both: its imports name the contract's interfaces with their version
/// (`wasmgpu:policy/types@0.1.0`). A component that names none is left to
/// linking, which says what is missing.
fn check_contract(bytes: &[u8]) -> Result<()> {
    const PACKAGE: &str = "wasmgpu:policy/";
    let expected_version = CONTRACT.rsplit_once('@').map_or("", |(_, v)| v);
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        // Malformed sections are compile's to report.
        let Ok(wasmparser::Payload::ComponentImportSection(imports)) = payload else {
            continue;
        };
        for import in imports.into_iter().flatten() {
            let name = import.name.0;
            let Some(rest) = name.strip_prefix(PACKAGE) else {
                continue;
            };
            let version = rest.split_once('@').map_or("", |(_, v)| v);
            if version != expected_version {
                return Err(PolicyError::WrongContract {
                    found: if version.is_empty() {
                        "(unversioned)".into()
                    } else {
                        version.to_owned()
                    },
                    expected: CONTRACT,
                });
            }
        }
    }
    Ok(())
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
struct Ticker {
    _stop: mpsc::Sender<()>,
}

impl Ticker {
    fn start(engine: wasmtime::Engine) -> Self {
        let (stop, stopped) = mpsc::channel::<()>();
        thread::Builder::new()
            .name("wasmgpu-epoch".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EPOCH_TICK) {
                    engine.increment_epoch();
                }
            })
            .expect("spawn the epoch ticker thread");
        Ticker { _stop: stop }
    }
}
