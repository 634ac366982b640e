//! Publishing a node's status to its `GPUNode`, by server-side apply, only
//! when something changed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use wasmgpu_api::{GPUNode, GPUNodeStatus};

/// The field manager of the agent's writes.
pub const FIELD_MANAGER: &str = "wasmgpu-agent";

/// Why a publication failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The API server refused or could not be reached.
    #[error("{action} GPUNode {node}: {error}")]
    Api {
        /// What was being done.
        action: &'static str,
        /// The node.
        node: String,
        /// kube's error (in the message, so not also a `source`).
        error: kube::Error,
    },
}

impl PublishError {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            PublishError::Api { .. } => "api",
        }
    }
}

/// Writes one node's `GPUNode` status.
pub struct StatusPublisher {
    api: Api<GPUNode>,
    node: String,
    /// The uid of the `GPUNode` last read or written: another uid, or none,
    /// means it was deleted (and perhaps created again by someone else).
    uid: Option<String>,
    published: Option<GPUNodeStatus>,
}

impl StatusPublisher {
    /// Ensures `GPUNode/<node>` exists (creating it by server-side apply) and
    /// remembers its current status, so that an unchanged status is not
    /// written again after a restart.
    pub async fn start(client: Client, node: &str) -> Result<Self, PublishError> {
        let mut publisher = Self {
            api: Api::all(client),
            node: node.to_owned(),
            uid: None,
            published: None,
        };
        let existing = publisher
            .api
            .get_opt(node)
            .await
            .map_err(|error| publisher.error("reading", error))?;
        match existing {
            Some(object) => {
                publisher.uid = object.uid();
                publisher.published = object.status;
            }
            None => publisher.create().await?,
        }
        Ok(publisher)
    }

    /// Publishes `status` unless it says what the last published one said
    /// and the `GPUNode` is still the one it was published to; true when it
    /// wrote. A `GPUNode` deleted since is created again, with the status.
    pub async fn publish(&mut self, mut status: GPUNodeStatus) -> Result<bool, PublishError> {
        keep_transition_times(&mut status, self.published.as_ref());
        let unchanged = self
            .published
            .as_ref()
            .is_some_and(|published| same(published, &status));
        if unchanged && self.still_there().await? {
            return Ok(false);
        }
        status.last_updated = Some(Time(Timestamp::now()));
        match self.apply_status(&status).await {
            Err(error) if is_not_found(&error) => {
                tracing::warn!(node = %self.node, "GPUNode was deleted; creating it again");
                self.create().await?;
                self.apply_status(&status).await?;
            }
            result => result?,
        }
        tracing::info!(
            node = %self.node,
            gpus = status.gpus_total,
            healthy = status.gpus_healthy,
            "Published GPUNode status"
        );
        self.published = Some(status);
        Ok(true)
    }

    /// Whether the `GPUNode` last written is still there (one read of its
    /// metadata). When it is gone it is created again, and the status must
    /// be published anew; so must it when another object took its name.
    async fn still_there(&mut self) -> Result<bool, PublishError> {
        let current = self
            .api
            .get_metadata_opt(&self.node)
            .await
            .map_err(|error| self.error("reading", error))?;
        match current {
            Some(meta) if meta.uid() == self.uid => Ok(true),
            Some(meta) => {
                tracing::warn!(
                    node = %self.node,
                    uid = ?meta.uid(),
                    "GPUNode was replaced; publishing the status again"
                );
                self.uid = meta.uid();
                Ok(false)
            }
            None => {
                tracing::warn!(node = %self.node, "GPUNode was deleted; creating it again");
                self.create().await?;
                Ok(false)
            }
        }
    }

    /// Creates `GPUNode/<node>` (an apply of the object, without status).
    async fn create(&mut self) -> Result<(), PublishError> {
        let body = json!({
            "apiVersion": GPUNode::api_version(&()),
            "kind": GPUNode::kind(&()),
            "metadata": { "name": self.node },
            "spec": {},
        });
        let created = self
            .api
            .patch(&self.node, &params(), &Patch::Apply(body))
            .await
            .map_err(|error| self.error("creating", error))?;
        tracing::info!(node = %self.node, "Created GPUNode");
        self.uid = created.uid();
        Ok(())
    }

    async fn apply_status(&mut self, status: &GPUNodeStatus) -> Result<(), PublishError> {
        let body = json!({
            "apiVersion": GPUNode::api_version(&()),
            "kind": GPUNode::kind(&()),
            "status": status,
        });
        let written = self
            .api
            .patch_status(&self.node, &params(), &Patch::Apply(body))
            .await
            .map_err(|error| self.error("updating the status of", error))?;
        self.uid = written.uid();
        Ok(())
    }

    fn error(&self, action: &'static str, error: kube::Error) -> PublishError {
        PublishError::Api {
            action,
            node: self.node.clone(),
            error,
        }
    }
}

fn is_not_found(error: &PublishError) -> bool {
    matches!(
        error,
        PublishError::Api { error: kube::Error::Api(status), .. } if status.is_not_found()
    )
}

fn params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Conditions whose status did not change keep the transition time they
/// were published with.
pub fn keep_transition_times(status: &mut GPUNodeStatus, published: Option<&GPUNodeStatus>) {
    let Some(published) = published else {
        return;
    };
    for condition in &mut status.conditions {
        if let Some(before) = published
            .conditions
            .iter()
            .find(|c| c.type_ == condition.type_ && c.status == condition.status)
        {
            condition.last_transition_time = before.last_transition_time.clone();
        }
    }
}

/// Whether two statuses say the same, ignoring `lastUpdated`.
pub fn same(a: &GPUNodeStatus, b: &GPUNodeStatus) -> bool {
    let strip = |s: &GPUNodeStatus| GPUNodeStatus {
        last_updated: None,
        ..s.clone()
    };
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    use super::*;

    fn status(ready: &str, at: &str, gpus_healthy: u32) -> GPUNodeStatus {
        GPUNodeStatus {
            gpus_total: 2,
            gpus_healthy,
            last_updated: Some(Time(at.parse().unwrap())),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: ready.into(),
                reason: "GPUsRead".into(),
                message: "2 GPUs read from NVML".into(),
                last_transition_time: Time(at.parse().unwrap()),
                observed_generation: None,
            }],
            ..GPUNodeStatus::default()
        }
    }

    #[test]
    fn an_unchanged_status_is_the_same_whatever_the_times() {
        let published = status("True", "2026-11-30T10:00:00Z", 2);
        let mut next = status("True", "2026-11-30T11:00:00Z", 2);
        assert!(!same(&published, &next));
        keep_transition_times(&mut next, Some(&published));
        assert!(same(&published, &next));
        assert_eq!(
            next.conditions[0].last_transition_time,
            published.conditions[0].last_transition_time
        );
    }

    #[test]
    fn a_change_is_not_the_same_and_a_flipped_condition_gets_a_new_time() {
        let published = status("True", "2026-11-30T10:00:00Z", 2);
        let mut fewer = status("True", "2026-11-30T11:00:00Z", 1);
        keep_transition_times(&mut fewer, Some(&published));
        assert!(!same(&published, &fewer));

        let mut failed = status("False", "2026-11-30T11:00:00Z", 2);
        keep_transition_times(&mut failed, Some(&published));
        assert!(!same(&published, &failed));
        assert_eq!(
            failed.conditions[0].last_transition_time,
            Time("2026-11-30T11:00:00Z".parse().unwrap())
        );
    }
}
