//! What a request asks for, as the fit checks read it, and how a policy
//! asks for the fit (tightest or loosest) and learns why nothing fits.

use crate::nvlink::Nvlink;
use crate::reason;
use wasmgpu_contract::{Ask, Claim, GpuShape, Request, Sharing};

/// A profile name no MIG instance of the snapshot has.
pub(super) const NO_PROFILE: u32 = u32::MAX;

/// Which end to prefer when several candidates fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// The candidate with the least room left that still fits (packing).
    Tightest,
    /// The candidate with the most room (spreading).
    Loosest,
}

/// Why a request cannot be placed this round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shortfall {
    /// The request has no eligible node at all.
    NoEligibleNode,
    /// No eligible node could hold it even if all its GPUs were free.
    Never(String),
    /// Some eligible node could hold it once GPUs are released.
    NotNow(String),
}

impl Shortfall {
    /// True when waiting cannot help.
    pub fn is_permanent(&self) -> bool {
        !matches!(self, Shortfall::NotNow(_))
    }

    /// The reason, in words (the wording of [`reason`]).
    pub fn reason(&self) -> String {
        match self {
            Shortfall::NoEligibleNode => reason::no_eligible_node(),
            Shortfall::Never(what) => reason::never(what),
            Shortfall::NotNow(what) => reason::not_now(what),
        }
    }
}

/// A request prepared for fast fit checks (see [`Cluster::want`](crate::Cluster::want)).
#[derive(Clone, Debug)]
pub struct Want<'s> {
    /// The request.
    pub request: &'s Request,
    /// What it asks for: its GPUResource's shape ([`NO_SHAPE`] for a DRA
    /// request, which fits nowhere through the GPU fit helpers: place it
    /// with [`Cluster::place_claims`](crate::Cluster::place_claims)).
    pub shape: &'s GpuShape,
    /// The request's position in `snapshot.pending`: what decisions name.
    pub position: u32,
    pub(super) model_ok: Vec<bool>,
    /// For a MIG request: the profile, as an index into `snapshot.mig_profiles`.
    pub(super) mig: Option<u32>,
}

/// The shape the GPU fit helpers give a DRA request: no GPU fits it
/// ([`Cluster::place_claims`](crate::Cluster::place_claims) places DRA requests). Its sharing is
/// `Exclusive`, so [`Cluster::commit`](crate::Cluster::commit) holds a DRA request's devices
/// exclusively.
pub static NO_SHAPE: GpuShape = GpuShape {
    count: 0,
    model: None,
    mig_profile: None,
    memory_mib: u64::MAX,
    sharing: Sharing::Exclusive,
};

/// The GPU shape of a GPUResource request; none for a DRA request.
pub fn shape_of(request: &Request) -> Option<&GpuShape> {
    match &request.ask {
        Ask::Gpus(shape) => Some(shape),
        Ask::Claims(_) => None,
    }
}

/// The devices `request` asks for: its GPUResource's `count`, or for a DRA
/// request the sum over its claims' requests of each one's first
/// alternative's `count` (a later alternative may want another number).
///
/// ```
/// use wasmgpu_policy_sdk::{Sharing::Exclusive, devices_of};
/// use wasmgpu_policy_sdk::testing::{claim, dra_request, request};
///
/// assert_eq!(devices_of(&request("ns/p", 2, Exclusive, 0)), 2);
/// let dra = dra_request("ml/train", vec![claim("ml/train", &[("gpus", 2, 0), ("nic", 1, 1)])]);
/// assert_eq!(devices_of(&dra), 3);
/// ```
pub fn devices_of(request: &Request) -> u32 {
    match &request.ask {
        Ask::Gpus(shape) => shape.count,
        Ask::Claims(claims) => claims
            .iter()
            .map(Claim::devices_asked)
            .fold(0, u32::saturating_add),
    }
}

impl<'s> Want<'s> {
    pub(super) fn exclusive(&self) -> bool {
        self.shape.sharing == Sharing::Exclusive
    }

    /// True for a DRA request (claims): the GPU fit helpers place none;
    /// [`Cluster::place_claims`](crate::Cluster::place_claims) does.
    pub fn is_dra(&self) -> bool {
        shape_of(self.request).is_none()
    }

    /// The claims of a DRA request (empty when all are allocated already
    /// and the pod only needs a node); `None` for a GPUResource request.
    pub fn claims(&self) -> Option<&'s [Claim]> {
        match &self.request.ask {
            Ask::Claims(claims) => Some(claims),
            Ask::Gpus(_) => None,
        }
    }

    /// The devices the request asks for ([`devices_of`]): what the tenant
    /// limit counts before placing.
    pub fn devices(&self) -> u32 {
        devices_of(self.request)
    }

    /// True when the request asks for MIG instances, not whole GPUs.
    pub fn is_mig(&self) -> bool {
        self.mig.is_some()
    }

    /// True when the request asks for whole GPUs of its own (not shares,
    /// not MIG instances).
    pub fn is_exclusive_whole(&self) -> bool {
        self.exclusive() && !self.is_mig()
    }

    /// True when `nvlink` changes which GPUs the request gets: an exclusive
    /// request for more than one whole GPU, and `nvlink` is not `Ignore`.
    pub fn uses_nvlink(&self, nvlink: Nvlink) -> bool {
        nvlink != Nvlink::Ignore && self.is_exclusive_whole() && self.shape.count > 1
    }

    /// What the request asks for, in words ([`reason::asked`]).
    pub fn describe(&self) -> String {
        reason::asked(self.request)
    }
}
