//! What the index keeps of a `Node`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint};

/// The facts about a node that decide whether pods may be placed on it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NodeFacts {
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// Shared with the snapshots' host records (`HostNode::labels`).
    pub labels: Arc<BTreeMap<String, String>>,
    pub taints: Vec<Taint>,
}

impl NodeFacts {
    pub fn from_node(node: &Node) -> Self {
        let ready = node
            .status
            .as_ref()
            .and_then(|status| status.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let spec = node.spec.as_ref();
        Self {
            ready,
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            labels: Arc::new(node.metadata.labels.clone().unwrap_or_default()),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
        }
    }

    /// Ready and not cordoned: new pods may go there now.
    pub fn schedulable(&self) -> bool {
        self.ready && !self.unschedulable
    }
}
