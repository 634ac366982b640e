//! # The index: cluster state in memory, snapshots out
//!
//! Watches feed the index through small synchronous calls (`apply_*`,
//! `delete_*`, and `reset_*` after a relist; or generically through
//! [`IndexResource`]); it does no I/O and holds no API client. Out come the
//! [`Snapshot`](wasmgpu_contract::types::Snapshot)s the policies decide on, the
//! [`Problem`]s users must fix, and the bindings to finish.
//!
//! ```text
//!  Node ──────────▶ name_to_node        (Ready? cordoned? labels, taints)
//!  GPUNode ───────▶ node_to_inventory   (GPUs from the agent's status,
//!  ResourceSlice ─▶                      merged with a DRA driver's by UUID,
//!                                        laid out as snapshot records once)
//!  ResourceClaim ─▶ dra                 (allocated devices: held; the
//!  DeviceClass ───▶                      claims DRA pods ask through)
//!  GPUResource ───▶ key_to_resource     (spec, spec error, old ledger)
//!  Pod ───────────▶ key_to_pod          (schedulerName wasmgpu only;
//!                                        node, wasmgpu.io/allocation;
//!                                        bound pods' use and pods per
//!                                        GPUResource kept beside it)
//!  bindings sent ─▶ key_to_in_flight    (until the pod watch shows them)
//!  GPUTenant ─────▶ name_to_tenant      (namespace globs, quota, limit)
//!                          │
//!                          ▼
//!   holdings: bound pods' allocations (kept as pods change) + claims,
//!             nominations, in flight, reservations (+ old ledgers)
//!             → GPU use, usage per namespace
//!   survey:  unbound pods not holding GPUs → requests (by policy) | problems
//!   build:   candidate nodes (Ready, schedulable, inventory): their layouts
//!            with what holders keep filled in; eligible nodes per request
//!            (nodeSelector, required affinity, taints)
//!                          │
//!                          ▼
//!            snapshots(round) ─ one Snapshot per policy
//! ```
//!
//! `apply` never fails: an object without a name, or another scheduler's
//! pod, is skipped; a GPUResource whose spec is unusable is kept (its ledger
//! still holds GPUs), logged, and reported through [`Index::problems`].
//!
//! Pods are `namespace/name`; a ledger entry belongs to a pod only while the
//! UIDs match, so a pod recreated under the same name is another pod.
//!
//! Crate `wasmgpu-index`: below it `wasmgpu-api` and `wasmgpu-contract`; no API
//! client, no tokio. The controller feeds it; the CLI's `allocations` reads it.
#![forbid(unsafe_code)]

mod backoff;
mod bound;
mod budgets;
mod claim_asks;
mod claim_records;
mod claim_writes;
mod dra;
mod drift;
mod eligibility;
mod extended;
mod facts;
mod fast_map;
mod feed;
mod gangs;
mod holdings;
mod index;
mod inventory;
mod key;
mod layout;
mod nominations;
mod problem;
mod snapshot;
mod tally;
mod tenants;
mod views;
mod watch;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;

pub use claim_writes::Chosen;
pub use dra::PoolProblem;
pub use drift::{OutdatedHoldings, UnhealthyHolding};
pub use eligibility::Ineligible;
pub use extended::{EXTENDED_CLAIM_ANNOTATION, ExtendedClaim};
pub use facts::binding::{ClaimWrite, PendingBinding};
pub use holdings::{GpuState, Release, ReleaseReason};
pub use index::Index;
pub use key::ObjectKey;
pub use nominations::Eviction;
pub use problem::{Problem, Subject};
pub use tenants::TenantView;
pub use views::{PodCounts, ResourceView, RoundReport, RoundStart};
pub use watch::IndexResource;
