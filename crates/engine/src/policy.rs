//! A loaded policy and one call of it.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;
use wasmtime::{Store, Trap};

use super::bounds::{self, CALL_BYTES};
use super::error::{PolicyError, Result};
use super::sandbox::{LimitExceeded, Sandbox};
use super::world::{Policy, PolicyPre, WorldMismatch};
use crate::error::Cause;
use crate::limits::Limits;
use crate::sandbox::EngineCore;
use wasmgpu_contract::types::{Decision, Info, Snapshot};

/// A component's sha256, written `sha256:<hex>`.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Digest(String);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Digest(format!("sha256:{}", hex::encode(Sha256::digest(bytes))))
    }

    /// `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A compiled, linked and described policy. Cloning is cheap.
#[derive(Clone)]
pub struct LoadedPolicy {
    shared: Arc<EngineCore>,
    pre: PolicyPre,
    component: Component,
    digest: Digest,
    size: usize,
    info: Info,
}

/// What one `allocate` call produced.
#[derive(Clone, Debug)]
pub struct Round {
    /// The decisions, as returned (not yet validated).
    pub decisions: Vec<Decision>,
    /// What the call cost.
    pub stats: RoundStats,
}

/// What one call cost, and what the policy logged.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RoundStats {
    /// Time to create the store and instantiate the component.
    pub instantiate: Duration,
    /// Time in the call, marshalling included.
    pub call: Duration,
    /// Time to give the instance back: its memory reset for the next call
    /// of the policy (the pages it wrote zeroed; where the kernel cannot
    /// tell which, all it could reach, up to 16 MiB).
    pub reset: Duration,
    /// Fuel used.
    pub fuel_used: u64,
    /// Largest linear memory seen, in bytes.
    pub peak_memory_bytes: usize,
    /// The policy's log lines.
    pub log: Vec<String>,
    /// Log lines over the limit, dropped.
    pub log_dropped: usize,
}

// === impl LoadedPolicy ===

impl LoadedPolicy {
    pub(super) fn new(
        shared: Arc<EngineCore>,
        digest: Digest,
        size: usize,
        component: Component,
    ) -> Result<Self> {
        let instance_pre = shared
            .linker
            .instantiate_pre(&component)
            .map_err(|e| PolicyError::WrongWorld(Cause::new(e)))?;
        let pre =
            PolicyPre::new(instance_pre).map_err(|e| PolicyError::WrongWorld(Cause::new(e.0)))?;
        let placeholder = wasmgpu_contract::info("", "", "");
        let mut policy = LoadedPolicy {
            shared,
            pre,
            component,
            digest,
            size,
            info: placeholder,
        };
        let (info, _) = policy.call(CALL_BYTES, |p, store| p.call_describe(store));
        let mut info = info?;
        bounds::bound_info(&mut info).map_err(PolicyError::InvalidOutput)?;
        policy.info = info;
        Ok(policy)
    }

    /// What the policy says it is.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The sha256 of its bytes.
    pub fn digest(&self) -> &Digest {
        &self.digest
    }

    /// Its size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// What it imports (WASI interfaces, `log`), sorted.
    pub fn imports(&self) -> Vec<String> {
        let ty = self.component.component_type();
        let mut names: Vec<String> = ty
            .imports(&self.shared.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        names.sort();
        names
    }

    /// The limits its calls run under.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// Runs one round on a fresh instance. The decisions are returned as the
    /// policy made them, their reasons and names cut to the bounds of
    /// [`super::bounds`]; check them with [`wasmgpu_contract::validate`] before use.
    ///
    /// A policy that returns more than [`bounds::most_decisions`] decisions,
    /// or more bytes than [`bounds::output_budget`] for the pending pods, fails
    /// the round with [`PolicyError::InvalidOutput`]; the byte budget is
    /// enforced while copying, before the list's elements are read.
    pub fn allocate(&self, snapshot: &Snapshot) -> Result<Round> {
        let pending = snapshot.pending.len();
        let budget = bounds::output_budget(pending);
        let (decisions, stats) = self.call(budget, |p, store| p.call_allocate(store, snapshot));
        let mut decisions = decisions?;
        let most = bounds::most_decisions(pending);
        if decisions.len() > most {
            return Err(PolicyError::InvalidOutput(format!(
                "{} decisions for {pending} pending pods (at most {most} accepted)",
                decisions.len(),
            )));
        }
        decisions.iter_mut().for_each(bounds::bound_decision);
        Ok(Round { decisions, stats })
    }

    /// Instantiates a fresh store and runs `f` in it, under the limits.
    /// `transfer_bytes` bounds what one transfer from the policy to the host
    /// (the result, or an argument of an import) may copy.
    fn call<'s, R>(
        &self,
        transfer_bytes: usize,
        f: impl FnOnce(&Policy<'s>, &mut Store<Sandbox>) -> wasmtime::Result<R>,
    ) -> (Result<R>, RoundStats) {
        let limits = &self.shared.limits;
        let start = Instant::now();
        let mut store = Store::new(&self.shared.engine, Sandbox::new(limits));
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(transfer_bytes);
        let mut stats = RoundStats::default();
        if limits.metered()
            && let Err(e) = store.set_fuel(limits.fuel)
        {
            return (Err(PolicyError::Engine(Cause::new(e))), stats);
        }
        store.set_epoch_deadline(limits.deadline_ticks());
        store.epoch_deadline_trap();
        let result = match self.pre.instantiate(&mut store) {
            Ok(policy) => {
                let called = Instant::now();
                stats.instantiate = called - start;
                let result = f(&policy, &mut store);
                stats.call = called.elapsed();
                result
            }
            Err(e) => {
                stats.instantiate = start.elapsed();
                Err(e)
            }
        };
        if limits.metered() {
            stats.fuel_used = limits.fuel - store.get_fuel().unwrap_or(0);
        }
        let data = store.data_mut();
        stats.peak_memory_bytes = data.limiter.peak_memory;
        (stats.log, stats.log_dropped) = data.take_log();
        let going = Instant::now();
        drop(store);
        stats.reset = going.elapsed();
        let result = result.map_err(|e| classify(e, limits, transfer_bytes, &stats.log));
        (result, stats)
    }
}

impl fmt::Debug for LoadedPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedPolicy")
            .field("info", &self.info)
            .field("digest", &self.digest)
            .field("size", &self.size)
            .finish()
    }
}

/// Turns what wasmtime reports into a [`PolicyError`].
fn classify(
    error: wasmtime::Error,
    limits: &Limits,
    transfer_bytes: usize,
    log: &[String],
) -> PolicyError {
    if bounds::is_over_budget(&error) {
        return PolicyError::InvalidOutput(format!(
            "more than {transfer_bytes} bytes passed to the host at once (the limit is {} bytes \
             per decision the round may return, for its decisions and for each log line)",
            bounds::DECISION_BYTES
        ));
    }
    if error.is::<WorldMismatch>() {
        return PolicyError::WrongWorld(Cause::new(error));
    }
    if let Some(exceeded) = error.downcast_ref::<LimitExceeded>() {
        return PolicyError::MemoryLimit(exceeded.0.clone());
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => PolicyError::OutOfFuel { fuel: limits.fuel },
        Some(Trap::Interrupt) => PolicyError::Deadline {
            deadline: limits.deadline,
        },
        Some(Trap::AllocationTooLarge) => PolicyError::MemoryLimit(error.root_cause().to_string()),
        trap => {
            let tail = log.iter().rev().take(3).rev().cloned().collect();
            // Rust keeps most of its stack in linear memory, below the
            // data: a policy recursing too deep runs off its start.
            let hint = match trap {
                Some(Trap::MemoryOutOfBounds) => {
                    " (a policy built from Rust traps this way when its stack overflows: deep recursion?)"
                }
                _ => "",
            };
            PolicyError::Trap {
                message: format!("{}{hint}", error.root_cause()),
                log_tail: tail,
            }
        }
    }
}
