//! Errors users can act on, found while reading the cluster state.

use std::fmt;

use super::key::ObjectKey;
use wasmgpu_api::InvalidSpec;

/// Something a user must fix before a pod can get GPUs. The index only
/// reports these; the controller turns them into Events and conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A pod with `schedulerName: wasmgpu` names no GPUResource.
    NoResourceAnnotation {
        /// The pod.
        pod: ObjectKey,
    },
    /// A pod names a GPUResource that does not exist (in its namespace).
    MissingResource {
        /// The pod.
        pod: ObjectKey,
        /// The GPUResource it names.
        resource: ObjectKey,
    },
    /// A GPUResource's spec is unusable; its pods wait until it is fixed.
    InvalidResource {
        /// The GPUResource.
        resource: ObjectKey,
        /// The field and what is wrong with it.
        error: InvalidSpec,
    },
    /// A pod joins a gang (`scheduling.x-k8s.io/pod-group`) whose PodGroup
    /// does not exist (or whose CRD is not installed): it waits.
    MissingPodGroup {
        /// The pod.
        pod: ObjectKey,
        /// The GPUResource it uses.
        resource: ObjectKey,
        /// The PodGroup it names.
        group: ObjectKey,
    },
    /// The pod's containers ask the kubelet for another number of
    /// `wasmgpu.io/gpu` than its GPUResource's `count`: the node could not
    /// hand it the GPUs it would be given. It waits until fixed.
    LimitMismatch {
        /// The pod.
        pod: ObjectKey,
        /// The GPUResource it uses.
        resource: ObjectKey,
        /// The GPUs the containers' `wasmgpu.io/gpu` limits ask for, by
        /// the Kubernetes rule ([`wasmgpu_api::pod_gpus`]).
        limit: u64,
        /// The GPUResource's `count`.
        count: u32,
    },
    /// A pod's `wasmgpu.io/gpu` limit is not a whole number of GPUs.
    UnreadableLimit {
        /// The pod.
        pod: ObjectKey,
        /// The container and its value.
        error: wasmgpu_api::UnreadableGpuLimit,
    },
    /// A gang member has waited longer than its PodGroup's
    /// `scheduleTimeoutSeconds` and the gang is still short of
    /// `minMember`. It keeps waiting (the gang may fit later); the gang
    /// holds nothing to release.
    GangTimedOut {
        /// The pod.
        pod: ObjectKey,
        /// The GPUResource it uses.
        resource: ObjectKey,
        /// Its PodGroup.
        group: ObjectKey,
        /// The PodGroup's `scheduleTimeoutSeconds`.
        timeout_s: u32,
        /// The PodGroup's `minMember`.
        min_member: u32,
        /// Members holding GPUs.
        bound: u32,
        /// Members waiting.
        waiting: u32,
    },
    /// A DRA driver's pool of ResourceSlices is unusable (incomplete, or a
    /// device name repeated): none of its devices is used until fixed.
    UnusableResourcePool {
        /// A slice of the pool (its newest, by name), to report on.
        slice: String,
        /// The pool, as `pool "<name>" of driver <driver>`.
        pool: String,
        /// Why.
        problem: crate::dra::PoolProblem,
    },
    /// A DRA pod's claim cannot be used as it is: missing, being deleted,
    /// naming a missing DeviceClass, a CEL selector that does not compile
    /// or fails on a device, a field wasmgpu does not support. The pod
    /// waits until it is fixed.
    UnusableClaim {
        /// The pod.
        pod: ObjectKey,
        /// The claim (`namespace/name`), or empty when the pod itself is
        /// at fault.
        claim: String,
        /// The field and what is wrong, in words.
        reason: String,
    },
    /// No node could ever hold a DRA pod's claim as posed: a request none
    /// of whose alternatives has enough eligible devices on one node the
    /// pod may run on. It is not sent to a policy until that changes.
    UnsatisfiableClaim {
        /// The pod.
        pod: ObjectKey,
        /// The claim (`namespace/name`).
        claim: String,
        /// Why, in words.
        reason: String,
    },
    /// No node could ever hold the pod's request as posed.
    Unsatisfiable {
        /// The pod.
        pod: ObjectKey,
        /// The GPUResource it uses.
        resource: ObjectKey,
        /// Why, in words.
        reason: String,
    },
}

/// The object a [`Problem`] should be reported on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject<'a> {
    /// A pod.
    Pod(&'a ObjectKey),
    /// A GPUResource.
    GPUResource(&'a ObjectKey),
    /// A ResourceSlice (cluster-scoped), by name.
    ResourceSlice(&'a str),
}

impl Problem {
    /// Where to report it: the pod, or the GPUResource for an invalid spec.
    pub fn subject(&self) -> Subject<'_> {
        match self {
            Self::NoResourceAnnotation { pod }
            | Self::MissingResource { pod, .. }
            | Self::MissingPodGroup { pod, .. }
            | Self::LimitMismatch { pod, .. }
            | Self::UnreadableLimit { pod, .. }
            | Self::GangTimedOut { pod, .. }
            | Self::UnusableClaim { pod, .. }
            | Self::UnsatisfiableClaim { pod, .. }
            | Self::Unsatisfiable { pod, .. } => Subject::Pod(pod),
            Self::InvalidResource { resource, .. } => Subject::GPUResource(resource),
            Self::UnusableResourcePool { slice, .. } => Subject::ResourceSlice(slice),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoResourceAnnotation { pod } => write!(
                f,
                "pod {pod} has schedulerName wasmgpu but no {} annotation",
                wasmgpu_api::GPURESOURCE_ANNOTATION
            ),
            Self::MissingResource { pod, resource } => {
                write!(
                    f,
                    "pod {pod} uses GPUResource {resource}, which does not exist"
                )
            }
            Self::InvalidResource { resource, error } => {
                write!(f, "GPUResource {resource} is invalid: {error}")
            }
            Self::LimitMismatch {
                pod,
                resource,
                limit,
                count,
            } => write!(
                f,
                "pod {pod} asks the kubelet for {limit} wasmgpu.io/gpu in its limits, but GPUResource {resource} gives each pod {count}; set the limit to {count} (or let deploy/admission/gpu-pods.yaml fill it in)"
            ),
            Self::UnreadableLimit { pod, error } => write!(f, "pod {pod}: {error}"),
            Self::MissingPodGroup { pod, group, .. } => write!(
                f,
                "pod {pod} joins gang {group} ({} label), but no PodGroup {group} exists; create it (scheduling.x-k8s.io/v1alpha1, with minMember) or remove the label",
                wasmgpu_api::POD_GROUP_LABEL
            ),
            Self::GangTimedOut {
                pod,
                group,
                timeout_s,
                min_member,
                bound,
                waiting,
                ..
            } => write!(
                f,
                "pod {pod} of gang {group} has waited longer than the PodGroup's scheduleTimeoutSeconds ({timeout_s} s): {bound} member(s) hold GPUs and {waiting} wait, short of minMember {min_member}; the gang keeps waiting until all of it fits at once and holds no GPUs meanwhile (free GPUs, lower minMember, or delete the gang's pods)"
            ),
            Self::UnusableResourcePool { pool, problem, .. } => {
                write!(f, "ResourceSlice {pool} is {problem}")
            }
            Self::UnusableClaim { pod, claim, reason } if claim.is_empty() => {
                write!(f, "pod {pod}: {reason}")
            }
            Self::UnusableClaim { pod, claim, reason } => {
                write!(f, "pod {pod} waits for ResourceClaim {claim}: {reason}")
            }
            Self::UnsatisfiableClaim { pod, claim, reason } => write!(
                f,
                "pod {pod} (ResourceClaim {claim}) can never be placed: {reason}"
            ),
            Self::Unsatisfiable {
                pod,
                resource,
                reason,
            } => write!(
                f,
                "pod {pod} (GPUResource {resource}) can never be placed: {reason}"
            ),
        }
    }
}
