//! # The `wasmgpu:policy` contract
//!
//! What host and policy agree on, in one place: the types of `wit/policy.wit`
//! ([`types`]), the rules the host holds every decision to ([`validate`]),
//! the model globs both sides match with ([`glob_match`]), and the snapshot
//! files authors export, edit and share ([`snapshot_file`], checked by
//! [`snapshot_check`]).
//!
//! ```text
//!                 wasmgpu-contract (this crate: types, rules, files)
//!                 ▲                ▲
//!   wasmgpu-policy-sdk            wasmgpu-engine ◀── wasmgpu-index ◀── controller, CLI
//!   (guests, wit-bindgen)         (host, wasmtime)
//! ```
//!
//! The SDK maps the WIT `types` interface onto [`types`] (wit-bindgen's
//! `with`), and the host passes the same values to wasmtime (feature
//! `wasmtime`), so a policy's unit tests and the controller run one
//! validator on one set of types, and nothing is converted between them.
//!
//! Pure and synchronous: no I/O, no clock; it compiles to `wasm32-wasip2`.
#![forbid(unsafe_code)]

pub mod bits;
mod bounds;
mod decision;
mod glob;
pub mod host_snapshot;
pub mod snapshot_check;
pub mod snapshot_file;
pub mod testing;
pub mod types;
mod upgrade;
pub mod validate;

pub use bounds::{CONTRACT, MAX_COUNT, NAME_BYTES};
pub use decision::{assign, info, preempt, reject, wait};
pub use glob::glob_match;
pub use host_snapshot::{HostNode, HostSnapshot, SharedCounters};
pub use types::{
    Alternative, Ask, Assignment, AttributeValue, Claim, ClaimChoice, ClaimRequest, Constraint,
    Decision, Deferral, Gang, Gpu, GpuRef, GpuShape, Info, MigInstance, Node, Preemption,
    PreemptionPolicy, Publisher, Request, Running, Sharing, Snapshot, Tenant,
};
pub use validate::{
    Deferred, Invalid, Placement, Preempting, Refused, Verdict, describe, describe_host,
    validate_host,
};
