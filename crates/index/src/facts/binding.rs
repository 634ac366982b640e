//! A binding: what a pod gets (its allocation, and for a DRA pod what its
//! claims get), and what the index keeps of one sent until the pod watch
//! shows it.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim};
use wasmgpu_api::PodAllocation;

use crate::key::ObjectKey;

/// A pod to bind (again) with a known allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingBinding {
    /// The pod.
    pub pod: ObjectKey,
    /// The pod's UID the allocation is for.
    pub uid: String,
    /// What it gets.
    pub allocation: PodAllocation,
    /// For a DRA pod: what its claims get, written before the binding.
    pub claims: Vec<ClaimWrite>,
}

/// A binding this controller sent whose result the pod watch has not shown
/// yet. It holds its GPUs meanwhile.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct InFlight {
    pub uid: String,
    pub allocation: PodAllocation,
    /// A DRA pod's claim writes, sent again with the binding.
    pub claims: Vec<ClaimWrite>,
    /// The binding's outcome is unknown (timeout, unreadable pod): send it
    /// again (binding the same pod to the same node twice is refused, not
    /// applied twice).
    pub retry: bool,
}

/// One claim's part of a DRA pod's binding.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimWrite {
    /// The claim.
    pub claim: ObjectKey,
    /// Its UID when it was decided on: the write is for this claim, not a
    /// namesake made since.
    pub uid: String,
    /// The allocation to write; `None` when the claim is allocated already
    /// and the pod is only added to `status.reservedFor`.
    pub allocation: Option<AllocationResult>,
    /// The claim as the watch showed it when the write was decided. The
    /// writer starts from this copy instead of reading the claim again; its
    /// `resourceVersion` makes the server refuse the write (409) if the
    /// claim changed since, and the writer then reads it and decides again.
    pub seen: Option<Arc<ResourceClaim>>,
}
