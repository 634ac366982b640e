//! What a pod holds: its allocation, carried by the pod itself.
//!
//! The controller binds a pod with a `Binding` whose annotations the API
//! server copies onto the pod in the same write: a pod is either bound with
//! its GPUs recorded, or neither. Nothing else grows with the number of pods.
//!
//! ```text
//!  wasmgpu.io/allocation  {"resource":"trainer","node":"n3","sharing":"Exclusive",
//!                          "devices":[{"uuid":"GPU-…","index":0,"memoryMiB":81559}],
//!                          "policy":{"name":"binpack","digest":"sha256:…"}}
//!  wasmgpu.io/devices     GPU-…,GPU-…        (for the container and the node)
//!  wasmgpu.io/node        n3
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::gpuresource::{Device, PolicyRef, Sharing};

/// Pod annotation the controller writes with the binding: the pod's
/// [`PodAllocation`] as JSON.
pub const ALLOCATION_ANNOTATION: &str = "wasmgpu.io/allocation";
/// Pod annotation the controller writes: the chosen GPU UUIDs, comma-separated.
pub const DEVICES_ANNOTATION: &str = "wasmgpu.io/devices";
/// Pod annotation the controller writes: the node the GPUs are on.
pub const NODE_ANNOTATION: &str = "wasmgpu.io/node";

/// The GPUs one pod holds, as recorded on the pod (annotation
/// `wasmgpu.io/allocation`).
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PodAllocation {
    /// The GPUResource (same namespace) whose shape the pod got.
    pub resource: String,
    /// The node the pod is bound to.
    pub node: String,
    /// How the GPUs are held.
    #[serde(default)]
    pub sharing: Sharing,
    /// The GPUs, in the order the policy chose them.
    pub devices: Vec<Device>,
    /// The policy that made the decision.
    pub policy: PolicyRef,
}

/// Why a pod's allocation annotation cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("annotation {ALLOCATION_ANNOTATION}: {reason}")]
pub struct UnreadableAllocation {
    /// What is wrong with it.
    pub reason: String,
}

// === impl PodAllocation ===

impl PodAllocation {
    /// The annotations that record this allocation on its pod.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                ALLOCATION_ANNOTATION.to_string(),
                serde_json::to_string(self).expect("an allocation serialises"),
            ),
            (DEVICES_ANNOTATION.to_string(), self.device_list()),
            (NODE_ANNOTATION.to_string(), self.node.clone()),
        ])
    }

    /// The GPU UUIDs, comma-separated.
    pub fn device_list(&self) -> String {
        self.devices
            .iter()
            .map(|d| d.uuid.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The allocation a pod's annotations record: `None` when there is
    /// none, an error when the annotation is there but unusable.
    pub fn from_annotations(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Option<Result<Self, UnreadableAllocation>> {
        let raw = annotations?.get(ALLOCATION_ANNOTATION)?;
        Some(Self::parse(raw))
    }

    fn parse(raw: &str) -> Result<Self, UnreadableAllocation> {
        let allocation: Self = serde_json::from_str(raw).map_err(|e| UnreadableAllocation {
            reason: e.to_string(),
        })?;
        if allocation.node.is_empty() {
            return Err(UnreadableAllocation {
                reason: "node is empty".into(),
            });
        }
        if allocation.devices.is_empty() {
            return Err(UnreadableAllocation {
                reason: "devices is empty".into(),
            });
        }
        Ok(allocation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocation() -> PodAllocation {
        PodAllocation {
            resource: "trainer".into(),
            node: "n3".into(),
            sharing: Sharing::Shared,
            devices: vec![Device {
                uuid: "GPU-a".into(),
                index: 0,
                memory_mib: 8192,
            }],
            policy: PolicyRef {
                name: "binpack".into(),
                digest: "sha256:00".into(),
            },
        }
    }

    #[test]
    fn annotations_round_trip() {
        let annotations = allocation().annotations();
        assert_eq!(annotations[DEVICES_ANNOTATION], "GPU-a");
        assert_eq!(annotations[NODE_ANNOTATION], "n3");
        assert!(annotations[ALLOCATION_ANNOTATION].contains(r#""memoryMiB":8192"#));
        assert_eq!(
            PodAllocation::from_annotations(Some(&annotations)),
            Some(Ok(allocation()))
        );
    }

    #[test]
    fn absent_and_unreadable_annotations_differ() {
        assert_eq!(PodAllocation::from_annotations(None), None);
        assert_eq!(
            PodAllocation::from_annotations(Some(&BTreeMap::new())),
            None
        );
        for raw in [
            "{",
            r#"{"resource":"r","node":"","devices":[{"uuid":"u","index":0,"memoryMiB":1}],"policy":{"name":"p","digest":"d"}}"#,
            r#"{"resource":"r","node":"n","devices":[],"policy":{"name":"p","digest":"d"}}"#,
        ] {
            let annotations =
                BTreeMap::from([(ALLOCATION_ANNOTATION.to_string(), raw.to_string())]);
            let error = PodAllocation::from_annotations(Some(&annotations))
                .expect("present")
                .expect_err(raw);
            assert!(
                error
                    .to_string()
                    .starts_with("annotation wasmgpu.io/allocation: "),
                "{error}"
            );
        }
    }
}
