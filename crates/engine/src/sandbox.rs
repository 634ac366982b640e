//! The store data of one policy call: an empty, deterministic WASI, the
//! `log` import, and a resource limiter that records peak memory.
//!
//! WASI is linked because components built by ordinary toolchains import it,
//! but it grants nothing: no preopened directories, no environment, no
//! arguments, no sockets, closed stdin, discarded stdout, stderr kept for the
//! log (bounded like `log`, never refused: [`GuestLog`]), clocks stuck
//! at zero, seeded random numbers, and sleeping traps. A policy's decisions are
//! therefore a pure function of its bytes and the snapshot.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::{
    HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView,
};

use super::guest_log::GuestLog;
use crate::limits::Limits;

/// Store data for one call.
pub(crate) struct Sandbox {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    pub(crate) log: GuestLog,
}

impl Sandbox {
    pub(crate) fn new(limits: &Limits) -> Self {
        let log = GuestLog::new(limits.log_lines, limits.log_line_bytes);
        let wasi = WasiCtxBuilder::new()
            .stderr(log.stderr())
            .wall_clock(FrozenClock)
            .monotonic_clock(FrozenClock)
            .secure_random(StdRng::seed_from_u64(0x5eed))
            .insecure_random(StdRng::seed_from_u64(0x5eed + 1))
            .insecure_random_seed(0x5eed)
            .max_random_size(1 << 16)
            .allow_blocking_current_thread(false)
            .build();
        Sandbox {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter {
                memory_bytes: limits.memory_bytes,
                table_elements: limits.table_elements,
                peak_memory: 0,
            },
            log,
        }
    }
}

impl Sandbox {
    /// The policy's log lines, then what it wrote to stderr as `stderr: …`
    /// lines, and how many lines went past the limits.
    pub(crate) fn take_log(&mut self) -> (Vec<String>, usize) {
        self.log.take()
    }
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Links WASI (sync, without capabilities) and the world's own import,
/// `log(message)`, to the call's log.
pub(crate) fn link(linker: &mut Linker<Sandbox>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker)?;
    linker
        .root()
        .func_wrap("log", |mut store, (message,): (String,)| {
            store.data_mut().log.log(message);
            Ok(())
        })?;
    // Timers would block the host thread where neither fuel nor the epoch
    // deadline can stop them: a policy may not sleep.
    linker.allow_shadowing(true);
    let mut clock = linker.instance("wasi:clocks/monotonic-clock@0.2.12")?;
    clock.func_wrap(
        "subscribe-duration",
        |_, (_,): (u64,)| -> wasmtime::Result<(Resource<DynPollable>,)> {
            Err(wasmtime::format_err!(
                "a policy may not sleep (wasi:clocks/monotonic-clock.subscribe-duration)"
            ))
        },
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |_, (_,): (u64,)| -> wasmtime::Result<(Resource<DynPollable>,)> {
            Err(wasmtime::format_err!(
                "a policy may not sleep (wasi:clocks/monotonic-clock.subscribe-instant)"
            ))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Both clocks, stopped at zero.
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// Enforces the memory and table limits and remembers the largest memory seen.
pub(crate) struct Limiter {
    memory_bytes: usize,
    table_elements: usize,
    pub(crate) peak_memory: usize,
}

/// The error a limiter returns; it ends the call and is classified as
/// [`super::PolicyError::MemoryLimit`].
#[derive(Debug)]
pub(crate) struct LimitExceeded(pub(crate) String);

impl std::fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LimitExceeded {}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            return Err(wasmtime::Error::new(LimitExceeded(format!(
                "memory would grow from {} to {} MiB, limit {} MiB",
                current >> 20,
                desired >> 20,
                self.memory_bytes >> 20
            ))));
        }
        self.peak_memory = self.peak_memory.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            return Err(wasmtime::Error::new(LimitExceeded(format!(
                "table would grow from {current} to {desired} elements, limit {}",
                self.table_elements
            ))));
        }
        Ok(true)
    }
}

/// What every loaded policy needs from its engine: the compiled-code
/// engine, the sandbox's linker, the limits of each call.
pub(crate) struct EngineCore {
    pub(crate) engine: wasmtime::Engine,
    pub(crate) linker: Linker<Sandbox>,
    pub(crate) limits: Limits,
}
