//! # wasmgpu policy SDK
//!
//! Everything a Rust allocation policy needs: the types of the `wasmgpu:policy`
//! world (`wit/policy.wit`), a [`Policy`] trait, the [`export_policy!`] macro
//! that turns an implementation into a WebAssembly component, and helpers that
//! keep a policy short.
//!
//! ```text
//!  snapshot ──▶ Cluster::new ──▶ for each request (Cluster::pending_in_order)
//!                 │                 ├─ Cluster::fits / free_whole / load  (choose a node)
//!                 │                 ├─ Cluster::pick_gpus                 (choose GPUs)
//!                 │                 └─ Cluster::commit                    (count it)
//!                 │               gangs: Cluster::place_gang              (all or nothing)
//!                 │               DRA requests (Cluster::dra_pending):
//!                 │                      Cluster::place_claims            (node, devices, commit)
//!                 └────────────────────▶ Vec<Decision>
//! ```
//!
//! The algorithm is plain Rust over plain data, so the same source compiles
//! natively (unit tests, benchmarks, the host's tests) and to `wasm32-wasip2`
//! (the component shipped to the controller):
//!
//! ```
//! use wasmgpu_policy_sdk::{Cluster, Decision, Fit, Info, Policy, Snapshot, info};
//!
//! pub fn allocate(snapshot: &Snapshot) -> Vec<Decision> {
//!     let mut cluster = Cluster::new(snapshot);
//!     let mut decisions = Vec::new();
//!     for request in cluster.pending_in_order() {
//!         let want = cluster.want(request);
//!         let node = cluster.eligible(request).find(|&n| cluster.fits(n, &want));
//!         let placed = node.and_then(|n| cluster.place(n, &want, Fit::Tightest, true));
//!         decisions.push(placed.unwrap_or_else(|| cluster.unplaced(&want)));
//!     }
//!     decisions
//! }
//!
//! pub struct FirstFit;
//!
//! impl Policy for FirstFit {
//!     fn describe() -> Info { info("first-fit", "0.1.0", "First eligible node that fits") }
//!     fn allocate(snapshot: Snapshot) -> Vec<Decision> { allocate(&snapshot) }
//! }
//!
//! wasmgpu_policy_sdk::export_policy!(FirstFit);
//!
//! // Natively, the algorithm is plain Rust:
//! use wasmgpu_policy_sdk::Sharing::Exclusive;
//! use wasmgpu_policy_sdk::testing::{node, request, snapshot};
//! let snap = snapshot(vec![node("a", 2, "NVIDIA L4", 23034)], vec![request("ns/p", 2, Exclusive, 0)]);
//! // Decisions name pods, nodes and GPUs by position: pod 0 on node 0, GPUs 0 and 1.
//! assert!(matches!(&allocate(&snap)[0], Decision::Assign(a) if a.node == 0 && a.gpus == [0, 1]));
//! ```
//!
//! ## DRA requests
//!
//! A pod asking through ResourceClaims (`Ask::Claims`) is placed by
//! [`Cluster::place_claims`]: on one eligible node, each request of each
//! claim gets `count` free candidates of the first of its alternatives that
//! can be satisfied (`firstAvailable`), within the claims'
//! `matchAttribute` / `distinctAttribute` constraints; the devices are held
//! exclusively for the rest of the round. [`Cluster::claims_shortfall`] and
//! [`Cluster::claims_unplaced`] say why one cannot be placed, naming the
//! claim and request. [`place_each`] serves DRA and GPUResource requests
//! together, in one priority order ([`Cluster::all_pending_in_order`]);
//! DRA pods do not preempt yet, and gang members asking through claims are
//! left to their gang ([`Cluster::place_gang`] gives them no decision).
//!
//! ## Asking the round's state
//!
//! [`Cluster`] answers read-only questions about the state as it stands
//! after the placements committed so far: [`Cluster::gpu_now`] (one GPU),
//! [`Cluster::free_gpus`] (free whole GPUs of a node, optionally of a model
//! glob), [`Cluster::fitting_gpus`], [`Cluster::free_by_label`] (free GPUs
//! per zone, or any label, over a pod's eligible nodes), and the NVLink sets
//! of a node ([`Cluster::nvlink_groups`], [`Cluster::nvlink_clique`]). The
//! standard wait and reject wording is in [`reason`].
//!
//! ## NVLink
//!
//! An *NVLink group* is a connected component of a node's link graph; an
//! *NVLink clique* is a set of GPUs all linked to one another. Multi-GPU
//! exclusive requests are placed under an [`Nvlink`] mode: `Prefer` (the
//! default) takes one group when one holds the request and otherwise falls
//! back to any free GPUs; `Require` takes only a clique, on a node that has
//! one free, and otherwise leaves the pod waiting with a reason that says
//! so; `Ignore` disregards links. See [`Nvlink`].
//!
//! ## Testing
//!
//! [`testing`] builds snapshots ([`testing::node`], [`testing::request`],
//! [`testing::with_labels`], [`testing::with_nvlink`], [`testing::gang`],
//! [`testing::large`], …) and holds decisions to the controller's own rules:
//! [`testing::validate`] is the validator the controller runs: both come
//! from the `wasmgpu-contract` crate, whose types these are.
//!
//! ```
//! use wasmgpu_policy_sdk::{Fit, place_each};
//! use wasmgpu_policy_sdk::testing::{large, validate};
//!
//! let snap = large(50, 100);
//! let decisions = place_each(&snap, Fit::Tightest);
//! let verdict = validate(&snap, &decisions);
//! assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
//! ```
#![deny(unsafe_code)]

extern crate self as wasmgpu_policy_sdk;

#[allow(missing_docs, unsafe_code, clippy::all)]
pub mod bindings;
mod cluster;
mod config;
mod log;
mod nvlink;
mod placement;
pub mod reason;
#[cfg_attr(
    not(all(feature = "allocator", target_arch = "wasm32")),
    allow(dead_code)
)]
mod round_alloc;
pub mod testing;

/// Policies compiled to WebAssembly allocate with [`round_alloc`]'s size
/// classes unless the SDK's `allocator` feature is turned off.
#[cfg(all(
    feature = "allocator",
    target_arch = "wasm32",
    not(target_feature = "atomics")
))]
#[global_allocator]
static ALLOCATOR: round_alloc::RoundAllocator = round_alloc::RoundAllocator::new();

pub use cluster::{Cluster, Fit, GpuNow, Shortfall, Want};
mod usage;
pub use config::parse_config;
pub use log::{fail, log};
pub use nvlink::Nvlink;
pub use placement::{PlacementParams, place_each};

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

pub use cluster::{NO_SHAPE, devices_of, shape_of};
pub use usage::{Usage, usage};
pub use wasmgpu_contract::{
    Alternative, Ask, Assignment, AttributeValue, CONTRACT, Claim, ClaimChoice, ClaimRequest,
    Constraint, Decision, Deferral, Gang, Gpu, GpuRef, GpuShape, Info, MigInstance, Node,
    Preemption, PreemptionPolicy, Publisher, Request, Running, Sharing, Snapshot, Tenant, assign,
    bits, glob_match, info, preempt, reject, wait,
};

/// An allocation policy: what [`export_policy!`] exports as a component.
pub trait Policy {
    /// Who the policy is; called once when the controller loads it.
    fn describe() -> Info;
    /// Decide one round.
    fn allocate(snapshot: Snapshot) -> Vec<Decision>;
}

/// Exports a [`Policy`] implementation as the component's `describe` and
/// `allocate`. Expands to nothing when not compiling to WebAssembly, so a policy
/// crate links natively too (tests, benchmarks).
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct WasmgpuPolicyGuest;

            impl $crate::bindings::Guest for WasmgpuPolicyGuest {
                fn describe() -> $crate::Info {
                    <$policy as $crate::Policy>::describe()
                }
                fn allocate(snapshot: $crate::Snapshot) -> ::std::vec::Vec<$crate::Decision> {
                    <$policy as $crate::Policy>::allocate(snapshot)
                }
            }

            $crate::bindings::__export_wasmgpu_policy_world!(WasmgpuPolicyGuest with_types_in $crate::bindings);
        };
    };
}
