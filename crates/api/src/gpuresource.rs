//! `GPUResource`: what a workload needs, and how its pods are doing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Most GPUs one pod may ask for (all on one node): the contract's bound.
pub use wasmgpu_contract::MAX_COUNT;

/// What each pod referencing this `GPUResource` gets: `count` GPUs on one
/// node, of a model matching `model`, used exclusively or shared.
///
/// Pods ask for it with `spec.schedulerName: wasmgpu` and the annotation
/// `wasmgpu.io/gpuresource: <name>` (same namespace). Each such pod gets its
/// own allocation of this shape, recorded on the pod itself (annotation
/// `wasmgpu.io/allocation`, written with the binding).
// The printer columns repeat `type_` values, which clippy takes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "wasmgpu.io",
    version = "v1alpha1",
    kind = "GPUResource",
    plural = "gpuresources",
    namespaced,
    shortname = "gpur",
    category = "wasmgpu",
    status = "GPUResourceStatus",
    derive = "PartialEq",
    doc = "GPUs a workload needs; each pod referencing it gets its own allocation of this shape.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Pods",
        type_ = "string",
        description = "Pods holding GPUs / pods asking for this shape",
        json_path = ".status.pods"
    ),
    printcolumn(name = "Count", type_ = "integer", json_path = ".spec.count"),
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.model"),
    printcolumn(name = "Sharing", type_ = "string", json_path = ".spec.sharing"),
    printcolumn(name = "Policy", type_ = "string", json_path = ".spec.policy"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(
    "!has(self.sharing) || self.sharing != 'Shared' || (has(self.memoryMiB) && self.memoryMiB > 0)"
).message("sharing: Shared needs memoryMiB > 0 (the share taken on each GPU)"))]
#[x_kube(validation = Rule::new(
    "!has(self.migProfile) || !has(self.sharing) || self.sharing != 'Shared'"
).message("migProfile: MIG instances are not shared; remove sharing: Shared"))]
#[serde(rename_all = "camelCase")]
pub struct GPUResourceSpec {
    /// GPUs per pod, 1 to 16, all on one node.
    #[schemars(range(min = 1, max = 16))]
    pub count: u32,

    /// Glob on the GPU product name as NVML reports it (`*` and `?`,
    /// case-sensitive), e.g. `NVIDIA H100*`. Unset: any model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub model: Option<String>,

    /// A MIG profile, e.g. `1g.10gb` or `3g.40gb`: each pod then gets `count`
    /// MIG instances of exactly this profile (created by the operator;
    /// static MIG) instead of whole GPUs. Not with `sharing: Shared`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub mig_profile: Option<String>,

    /// Exclusive: the minimum total memory of each GPU. Shared: the share of
    /// memory taken on each GPU (required, above 0). With `migProfile`: the
    /// minimum memory of each MIG instance (its own, not its parent GPU's).
    /// MiB.
    #[serde(default, rename = "memoryMiB")]
    pub memory_mib: u64,

    /// Whether each GPU is held by the pod alone or shared with other pods.
    #[serde(default)]
    pub sharing: Sharing,

    /// Name of the policy (its ConfigMap) that places pods of this
    /// GPUResource. Unset: the controller's default policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub policy: Option<String>,
}

/// How a pod uses the GPUs it gets.
#[derive(
    Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash,
)]
pub enum Sharing {
    /// Each GPU is held by one pod alone.
    #[default]
    Exclusive,
    /// Each GPU may be shared by several pods, each taking `memoryMiB`.
    Shared,
}

/// What the controller observed and decided for a `GPUResource`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GPUResourceStatus {
    /// `Allocated` when every referencing pod holds GPUs, `Pending` while
    /// some wait, `Failed` when the GPUResource or a request is unusable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// Entries written by earlier versions, which kept a ledger here: a
    /// controller of this version moves each onto its pod (annotation
    /// `wasmgpu.io/allocation`) without moving the pod, then empties it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<Allocation>,

    /// Pods of this GPUResource that hold GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub holding: Option<i32>,

    /// Pods referencing this GPUResource that have not finished (holding
    /// or waiting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub asking: Option<i32>,

    /// `holding/asking` as text, for `kubectl get`, e.g. `2/3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<String>,

    /// The `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Ready`, `Invalid`, `PolicyError`, `Unsatisfiable`, each with a reason
    /// and a message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// Where a `GPUResource` stands.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Some referencing pod still waits for GPUs.
    Pending,
    /// Every referencing pod holds its GPUs.
    Allocated,
    /// The GPUResource is invalid, or a request can never be met.
    Failed,
}

/// One entry of the ledger earlier versions kept: the GPUs one pod holds.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Allocation {
    /// The pod's name (same namespace as the GPUResource).
    pub pod: String,
    /// The pod's UID: a pod recreated under the same name is another pod.
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    /// The node the pod is bound to.
    pub node: String,
    /// How the GPUs are held; decided when the entry was written.
    #[serde(default)]
    pub sharing: Sharing,
    /// The GPUs, in the order the policy chose them.
    pub devices: Vec<Device>,
    /// The policy that made the decision.
    pub policy: PolicyRef,
}

/// One GPU of an allocation.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// NVML UUID of the GPU.
    pub uuid: String,
    /// Index of the GPU on its node.
    pub index: u32,
    /// Memory promised to the pod on this GPU: the whole GPU when held
    /// exclusively, the share when shared. MiB.
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
}

/// The policy behind a decision, pinned by digest.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
pub struct PolicyRef {
    /// The policy's name (its ConfigMap).
    pub name: String,
    /// `sha256:<hex>` of the component that decided.
    pub digest: String,
}

// === impl GPUResourceSpec ===

/// A spec field the API server's schema could not check (or that was stored
/// before the schema was installed), with the reason in words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("spec.{field}: {reason}")]
pub struct InvalidSpec {
    /// The field's name as written in YAML, e.g. `memoryMiB`.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl GPUResourceSpec {
    /// Checks what the controller relies on, whether or not the API server
    /// enforced the schema: the count range, a non-empty model glob, a share
    /// for shared GPUs, and a policy name that can name a ConfigMap.
    pub fn check(&self) -> Result<(), InvalidSpec> {
        if !(1..=MAX_COUNT).contains(&self.count) {
            return Err(InvalidSpec {
                field: "count",
                reason: format!("must be 1 to {MAX_COUNT}, got {}", self.count),
            });
        }
        if self.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(InvalidSpec {
                field: "model",
                reason: "must not be empty when set (unset it to accept any model)".into(),
            });
        }
        if self
            .mig_profile
            .as_deref()
            .is_some_and(|m| m.trim().is_empty())
        {
            return Err(InvalidSpec {
                field: "migProfile",
                reason: "must not be empty when set (unset it to ask for whole GPUs)".into(),
            });
        }
        if self.mig_profile.is_some() && self.sharing == Sharing::Shared {
            return Err(InvalidSpec {
                field: "migProfile",
                reason: "MIG instances are not shared; remove sharing: Shared".into(),
            });
        }
        if self.sharing == Sharing::Shared && self.memory_mib == 0 {
            return Err(InvalidSpec {
                field: "memoryMiB",
                reason: "sharing: Shared needs memoryMiB > 0 (the share taken on each GPU)".into(),
            });
        }
        if let Some(policy) = &self.policy
            && !is_dns_subdomain(policy)
        {
            return Err(InvalidSpec {
                field: "policy",
                reason: format!("{policy:?} is not a valid ConfigMap name"),
            });
        }
        Ok(())
    }
}

/// A Kubernetes object name (RFC 1123 subdomain): lower-case alphanumerics,
/// `-` and `.`, starting and ending with an alphanumeric, at most 253 long.
fn is_dns_subdomain(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 253
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name.chars().all(|c| alnum(c) || c == '-' || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(count: u32) -> GPUResourceSpec {
        GPUResourceSpec {
            mig_profile: None,
            count,
            model: None,
            memory_mib: 0,
            sharing: Sharing::Exclusive,
            policy: None,
        }
    }

    #[test]
    fn check_accepts_a_plain_spec() {
        assert_eq!(spec(1).check(), Ok(()));
        assert_eq!(spec(16).check(), Ok(()));
    }

    #[test]
    fn check_names_the_bad_field() {
        assert_eq!(spec(0).check().unwrap_err().field, "count");
        assert_eq!(spec(17).check().unwrap_err().field, "count");
        let empty_model = GPUResourceSpec {
            model: Some(" ".into()),
            ..spec(1)
        };
        assert_eq!(empty_model.check().unwrap_err().field, "model");
        let shared = GPUResourceSpec {
            sharing: Sharing::Shared,
            ..spec(1)
        };
        let err = shared.check().unwrap_err();
        assert_eq!(err.field, "memoryMiB");
        assert!(err.to_string().starts_with("spec.memoryMiB: "), "{err}");
        let policy = GPUResourceSpec {
            policy: Some("Not_A_Name".into()),
            ..spec(1)
        };
        assert_eq!(policy.check().unwrap_err().field, "policy");
    }

    #[test]
    fn spec_defaults_and_names_match_the_api() {
        let spec: GPUResourceSpec =
            serde_json::from_value(serde_json::json!({"count": 2})).unwrap();
        assert_eq!(spec.sharing, Sharing::Exclusive);
        assert_eq!(spec.memory_mib, 0);
        let json = serde_json::to_value(GPUResourceSpec {
            memory_mib: 8,
            ..spec
        })
        .unwrap();
        assert_eq!(json["memoryMiB"], 8);
        assert_eq!(json["sharing"], "Exclusive");
    }
}
