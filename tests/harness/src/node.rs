//! Fake nodes: Node objects as a kubelet would register them, with no kubelet.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// A Node to create: Ready and schedulable unless told otherwise, with a
/// small capacity (8 CPUs, 32Gi, 110 pods).
///
/// ```no_run
/// # async fn f(client: kube::Client) -> anyhow::Result<()> {
/// use wasmgpu_test_harness::FakeNode;
/// FakeNode::new("gpu-node-1")
///     .label("nvidia.com/gpu.present", "true")
///     .taint("nvidia.com/gpu", Some("present"), "NoSchedule")
///     .create(&client)
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct FakeNode {
    name: String,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    capacity: BTreeMap<String, Quantity>,
    ready: bool,
    unschedulable: bool,
}

impl FakeNode {
    pub fn new(name: &str) -> Self {
        let capacity = [("cpu", "8"), ("memory", "32Gi"), ("pods", "110")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
            .collect();
        Self {
            name: name.to_owned(),
            labels: [("kubernetes.io/hostname".to_owned(), name.to_owned())].into(),
            taints: Vec::new(),
            capacity,
            ready: true,
            unschedulable: false,
        }
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// `effect` is `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub fn taint(mut self, key: &str, value: Option<&str>, effect: &str) -> Self {
        self.taints.push(Taint {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            effect: effect.to_owned(),
            ..Taint::default()
        });
        self
    }

    /// Capacity (and allocatable) of a resource, e.g. `("nvidia.com/gpu", "8")`.
    pub fn capacity(mut self, resource: &str, quantity: &str) -> Self {
        self.capacity
            .insert(resource.to_owned(), Quantity(quantity.to_owned()));
        self
    }

    /// The Ready condition is False.
    pub fn not_ready(mut self) -> Self {
        self.ready = false;
        self
    }

    /// Cordoned: `spec.unschedulable`.
    pub fn unschedulable(mut self) -> Self {
        self.unschedulable = true;
        self
    }

    /// The object, status included.
    pub fn to_node(&self) -> Node {
        let now = Time(Timestamp::now());
        let (status, reason, message) = if self.ready {
            ("True", "KubeletReady", "kubelet is posting ready status")
        } else {
            ("False", "KubeletNotReady", "kubelet is not ready")
        };
        Node {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(self.labels.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: (!self.taints.is_empty()).then(|| self.taints.clone()),
                unschedulable: self.unschedulable.then_some(true),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(self.capacity.clone()),
                allocatable: Some(self.capacity.clone()),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".to_owned(),
                    status: status.to_owned(),
                    reason: Some(reason.to_owned()),
                    message: Some(message.to_owned()),
                    last_heartbeat_time: Some(now.clone()),
                    last_transition_time: Some(now),
                }]),
                ..NodeStatus::default()
            }),
        }
    }

    /// Creates the Node, then writes its status through the status
    /// subresource (as a kubelet does), and returns the stored object.
    pub async fn create(&self, client: &Client) -> Result<Node> {
        let nodes = Api::<Node>::all(client.clone());
        let node = self.to_node();
        nodes
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating Node {}", self.name))?;
        let stored = nodes
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": node.status })),
            )
            .await
            .with_context(|| format!("writing the status of Node {}", self.name))?;
        if !self.ready {
            return Ok(stored);
        }
        // The API server taints new nodes `node.kubernetes.io/not-ready`
        // until the node lifecycle controller sees them Ready; no such
        // controller runs here, so play its part.
        nodes
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "taints": node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default() } })),
            )
            .await
            .with_context(|| format!("writing the taints of Node {}", self.name))
    }
}
