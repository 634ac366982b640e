//! `PodGroup` (`scheduling.x-k8s.io/v1alpha1`, from kubernetes-sigs
//! scheduler-plugins): the gang a pod joins through the
//! `scheduling.x-k8s.io/pod-group` label. wasmgpu reads `minMember` and
//! `scheduleTimeoutSeconds`; it does not install the CRD (scheduler-plugins,
//! Kubeflow's training operator and Volcano's coscheduling charts do).
//!
//! Before it binds the members of a gang, the controller writes the
//! round's allocations for them on the PodGroup
//! ([`GANG_RESERVATION_ANNOTATION`]): a controller that crashes half-way
//! reads them back and finishes those bindings, so a gang is never left
//! partly bound by a crash.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::allocation::PodAllocation;

/// The label a pod names its gang (a PodGroup in its namespace) with.
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// The annotation on a PodGroup with the bindings of a gang being applied
/// ([`GangReservation`] as JSON).
pub const GANG_RESERVATION_ANNOTATION: &str = "wasmgpu.io/gang-reservation";

/// The parts of a scheduler-plugins PodGroup that wasmgpu reads.
#[derive(CustomResource, Serialize, Deserialize, JsonSchema, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "scheduling.x-k8s.io",
    version = "v1alpha1",
    kind = "PodGroup",
    plural = "podgroups",
    shortname = "pg",
    namespaced,
    doc = "A gang of pods placed all together or not at all (scheduler-plugins coscheduling)."
)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// How many members must be placed together.
    #[serde(default)]
    pub min_member: i32,
    /// How long members may wait for room before they are reported as
    /// unschedulable, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// The bindings of one gang the controller is applying, written on the
/// PodGroup before the first of them is sent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GangReservation {
    /// Pod name (in the PodGroup's namespace) → its UID and allocation.
    pub members: BTreeMap<String, ReservedMember>,
}

/// One member of a [`GangReservation`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReservedMember {
    /// The pod's UID the allocation is for.
    pub uid: String,
    /// What it gets.
    pub allocation: PodAllocation,
}

impl GangReservation {
    /// The reservation recorded on a PodGroup, if any (an unreadable one
    /// reads as none, and is logged).
    pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> Option<Self> {
        let text = annotations?.get(GANG_RESERVATION_ANNOTATION)?;
        if text.is_empty() {
            return None;
        }
        match serde_json::from_str(text) {
            Ok(reservation) => Some(reservation),
            Err(error) => {
                tracing::warn!(%error, "Ignoring an unreadable gang reservation");
                None
            }
        }
    }
}
