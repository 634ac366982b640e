//! The `wasmgpu:policy` world (`wit/policy.wit`), bound over the contract's
//! own types: `wasmgpu_contract::types` derive wasmtime's component traits,
//! so a snapshot is lowered into the guest and decisions are lifted out of
//! it with no copy into other types, and the SDK's guests use the same types.
//!
//! The world is small enough to bind by hand: two exports, `describe` and
//! `allocate`, found once per component; its one import, `log`, is linked
//! with WASI by the sandbox.

use wasmtime::component::{ComponentExportIndex, InstancePre, TypedFunc};
use wasmtime::{Store, format_err};

use super::sandbox::Sandbox;
use wasmgpu_contract::types::{Decision, Info, Snapshot};

/// A component that does not export what the world says, or exports it
/// with other types: it was built against another contract (or is not a
/// policy at all).
#[derive(Debug)]
pub(crate) struct WorldMismatch(pub(crate) wasmtime::Error);

impl std::fmt::Display for WorldMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for WorldMismatch {}

/// A linked component and where its exports are.
#[derive(Clone)]
pub(crate) struct PolicyPre {
    pre: InstancePre<Sandbox>,
    describe: ComponentExportIndex,
    allocate: ComponentExportIndex,
}

/// The exports of one instance, for snapshots that live `'s`.
pub(crate) struct Policy<'s> {
    describe: TypedFunc<(), (Info,)>,
    allocate: TypedFunc<(&'s Snapshot,), (Vec<Decision>,)>,
}

impl PolicyPre {
    /// Finds the world's exports in a linked component.
    pub(crate) fn new(pre: InstancePre<Sandbox>) -> Result<Self, WorldMismatch> {
        let export = |name: &str| {
            pre.component()
                .get_export_index(None, name)
                .ok_or_else(|| WorldMismatch(format_err!("no export `{name}` found")))
        };
        Ok(PolicyPre {
            describe: export("describe")?,
            allocate: export("allocate")?,
            pre,
        })
    }

    /// A fresh instance in `store`. Exports of other types than the
    /// contract's fail as [`WorldMismatch`].
    pub(crate) fn instantiate<'s>(
        &self,
        store: &mut Store<Sandbox>,
    ) -> wasmtime::Result<Policy<'s>> {
        let instance = self.pre.instantiate(&mut *store)?;
        let mismatch = |name: &str, e: wasmtime::Error| {
            wasmtime::Error::new(WorldMismatch(
                e.context(format!("type-checking export func `{name}`")),
            ))
        };
        Ok(Policy {
            describe: instance
                .get_typed_func(&mut *store, self.describe)
                .map_err(|e| mismatch("describe", e))?,
            allocate: instance
                .get_typed_func(&mut *store, self.allocate)
                .map_err(|e| mismatch("allocate", e))?,
        })
    }
}

impl<'s> Policy<'s> {
    /// `describe()`.
    pub(crate) fn call_describe(&self, store: &mut Store<Sandbox>) -> wasmtime::Result<Info> {
        let (info,) = self.describe.call(store, ())?;
        Ok(info)
    }

    /// `allocate(snapshot)`.
    pub(crate) fn call_allocate(
        &self,
        store: &mut Store<Sandbox>,
        snapshot: &'s Snapshot,
    ) -> wasmtime::Result<Vec<Decision>> {
        let (decisions,) = self.allocate.call(store, (snapshot,))?;
        Ok(decisions)
    }
}
