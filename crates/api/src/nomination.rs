//! A preemption in progress, carried by the preemptor itself.
//!
//! When the host accepts a policy's `preempt` decision, the controller first
//! writes the preemptor's nomination onto it (annotation
//! `wasmgpu.io/nomination`), then evicts the victims. The nominated GPUs are
//! the preemptor's from that write on: no other pod is given them, and the
//! pod is bound to them once every victim is gone. A controller that stops
//! half-way reads the nomination back and carries it on: it evicts the
//! victims not yet going, and binds when they are gone.
//!
//! A preemptor asking through DRA ResourceClaims also carries the devices
//! each of its claims is to get (`claims`): they are written to the claims
//! once the victims are gone and the claims that held the devices are
//! deallocated, then the pod is bound.
//!
//! ```text
//!  wasmgpu.io/nomination  {"uid":"…","allocation":{…as wasmgpu.io/allocation…},
//!                          "victims":[{"namespace":"batch","name":"p3","uid":"…"}],
//!                          "claims":[{"name":"train-gpus","uid":"…",
//!                                     "devices":[{"request":"gpus","uuid":"GPU-…"}]}]}
//! ```

use serde::{Deserialize, Serialize};

use super::allocation::PodAllocation;

/// Pod annotation the controller writes on a preemptor: its [`Nomination`]
/// as JSON.
pub const NOMINATION_ANNOTATION: &str = "wasmgpu.io/nomination";

/// GPUs nominated for a pending pod, and the pods that must go first.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Nomination {
    /// The UID of the pod it is for (a pod recreated under the name has
    /// none).
    pub uid: String,
    /// What the pod gets once the victims are gone.
    pub allocation: PodAllocation,
    /// The pods evicted to make room.
    pub victims: Vec<Victim>,
    /// For a pod asking through DRA claims: what each of its claims not
    /// yet allocated gets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<NominatedClaim>,
}

/// What one ResourceClaim of a preemptor gets once the victims are gone.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NominatedClaim {
    /// The claim's name (in the pod's namespace).
    pub name: String,
    /// Its UID: a claim recreated under the name is not this one.
    pub uid: String,
    /// Its devices, one per allocation result.
    pub devices: Vec<NominatedDevice>,
}

/// One device of a [`NominatedClaim`].
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NominatedDevice {
    /// The request it is for: `request`, or `request/subrequest` for an
    /// entry of `firstAvailable`.
    pub request: String,
    /// The device's UUID on the nominated node.
    pub uuid: String,
}

/// A pod evicted for a preemptor.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Victim {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID: a pod recreated under the name is not the victim.
    pub uid: String,
}

/// Why a pod's nomination annotation cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("annotation {NOMINATION_ANNOTATION}: {reason}")]
pub struct UnreadableNomination {
    /// What is wrong with it.
    pub reason: String,
}

impl Nomination {
    /// The nomination a pod's annotations record: `None` when there is
    /// none (or it is empty: a nomination dropped), an error when it is
    /// there but unusable.
    pub fn from_annotations(
        annotations: Option<&std::collections::BTreeMap<String, String>>,
    ) -> Option<Result<Self, UnreadableNomination>> {
        let raw = annotations?.get(NOMINATION_ANNOTATION)?;
        if raw.trim().is_empty() {
            return None;
        }
        Some(
            serde_json::from_str::<Nomination>(raw)
                .map_err(|e| UnreadableNomination {
                    reason: e.to_string(),
                })
                .and_then(|n| {
                    if n.allocation.devices.is_empty() || n.allocation.node.is_empty() {
                        Err(UnreadableNomination {
                            reason: "allocation names no node or no devices".into(),
                        })
                    } else {
                        Ok(n)
                    }
                }),
        )
    }

    /// The annotation that records it.
    pub fn annotation(&self) -> (String, String) {
        (
            NOMINATION_ANNOTATION.to_owned(),
            serde_json::to_string(self).expect("a nomination serializes"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpuresource::{Device, PolicyRef, Sharing};

    #[test]
    fn a_nomination_round_trips_and_an_empty_one_is_none() {
        let nomination = Nomination {
            uid: "u1".into(),
            allocation: PodAllocation {
                resource: "r".into(),
                node: "n".into(),
                sharing: Sharing::Exclusive,
                devices: vec![Device {
                    uuid: "GPU-a".into(),
                    index: 0,
                    memory_mib: 81920,
                }],
                policy: PolicyRef {
                    name: "binpack".into(),
                    digest: "sha256:00".into(),
                },
            },
            victims: vec![Victim {
                namespace: "batch".into(),
                name: "p".into(),
                uid: "v1".into(),
            }],
            claims: vec![NominatedClaim {
                name: "train".into(),
                uid: "c1".into(),
                devices: vec![NominatedDevice {
                    request: "gpus".into(),
                    uuid: "GPU-a".into(),
                }],
            }],
        };
        let annotations = std::collections::BTreeMap::from([nomination.annotation()]);
        assert_eq!(
            Nomination::from_annotations(Some(&annotations)),
            Some(Ok(nomination))
        );
        let empty =
            std::collections::BTreeMap::from([(NOMINATION_ANNOTATION.to_owned(), String::new())]);
        assert_eq!(Nomination::from_annotations(Some(&empty)), None);
        let bad =
            std::collections::BTreeMap::from([(NOMINATION_ANNOTATION.to_owned(), "{".into())]);
        assert!(Nomination::from_annotations(Some(&bad)).unwrap().is_err());
    }
}
