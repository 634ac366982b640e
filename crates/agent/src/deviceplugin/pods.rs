//! The pods on this node, as the hand-off needs them: a watch of the pods
//! bound here, which of them wait for their GPUs, and the writes that record
//! a hand-over (pod annotation) or a refusal (Event on the pod).

use std::sync::Arc;
use tracing::Instrument;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use super::handoff::{Grant, PodRef, WaitingPod};
pub use wasmgpu_api::HANDOFF_ANNOTATION;
use wasmgpu_api::{self as api, ContainerGpus, PodAllocation};

/// The extended resource the plugin serves.
pub const RESOURCE_NAME: &str = api::GPU_RESOURCE;
/// The field manager and Event reporter of the plugin's writes.
pub const PLUGIN_MANAGER: &str = "wasmgpu-device-plugin";

/// The pod as the hand-off sees it, when it waits on `node` for its GPUs:
/// bound there with an allocation for that node, not started, not deleted,
/// not handed over.
pub fn waiting_pod(pod: &Pod, node: &str) -> Option<WaitingPod> {
    let spec = pod.spec.as_ref()?;
    if spec.node_name.as_deref() != Some(node) || pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if !matches!(phase, None | Some("Pending")) {
        return None;
    }
    let annotations = pod.metadata.annotations.as_ref();
    if annotations.is_some_and(|a| a.contains_key(HANDOFF_ANNOTATION)) {
        return None;
    }
    let allocation = match PodAllocation::from_annotations(annotations)? {
        Ok(allocation) => allocation,
        Err(error) => {
            tracing::info!(pod = %pod.name_any(), %error, "Ignoring pod");
            return None;
        }
    };
    if allocation.node != node {
        return None;
    }
    let mut requests = match api::container_gpus(spec) {
        Ok(requests) => requests,
        Err(error) => {
            tracing::info!(pod = %pod.name_any(), %error, "Ignoring pod");
            return None;
        }
    };
    if requests.is_empty() {
        requests.push(ContainerGpus {
            count: allocation.devices.len() as u32,
            gives_back: false,
        });
    }
    Some(WaitingPod {
        pod: PodRef {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
            uid: pod.uid().unwrap_or_default(),
        },
        bound_ms: pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "True")
            })
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0.as_millisecond())
            .unwrap_or(i64::MAX),
        created_ms: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond())
            .unwrap_or(i64::MAX),
        allocation,
        requests,
    })
}

/// The pods bound to one node, kept current by a watch.
#[derive(Clone)]
pub struct NodePods {
    node: String,
    store: Store<Pod>,
    client: Client,
    recorder: Arc<Recorder>,
}

impl NodePods {
    /// Starts watching the pods bound to `node` (field selector
    /// `spec.nodeName`), on the current runtime.
    pub fn watch(client: Client, node: &str) -> Self {
        let (store, writer) = reflector::store();
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let stream = reflector::reflector(writer, watcher(Api::<Pod>::all(client.clone()), config))
            .default_backoff()
            .touched_objects();
        let span = tracing::info_span!("node_pods", %node);
        tokio::spawn(
            async move {
                use futures::StreamExt;
                let mut stream = std::pin::pin!(stream);
                while let Some(item) = stream.next().await {
                    if let Err(error) = item {
                        tracing::warn!(%error, "Watching this node's pods");
                    }
                }
            }
            .instrument(span),
        );
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: PLUGIN_MANAGER.into(),
                instance: Some(node.to_owned()),
            },
        );
        Self {
            node: node.to_owned(),
            store,
            client,
            recorder: Arc::new(recorder),
        }
    }

    /// Waits until the first list of pods arrived.
    pub async fn ready(&self) {
        let _ = self.store.wait_until_ready().await;
    }

    /// The pods waiting for their GPUs on this node now.
    pub fn waiting(&self) -> Vec<WaitingPod> {
        self.store
            .state()
            .iter()
            .filter_map(|pod| waiting_pod(pod, &self.node))
            .collect()
    }

    /// Whether a pod with `uid` is still bound to this node and not handed
    /// over on the API server.
    pub fn still_waiting(&self, uid: &str) -> bool {
        self.store
            .state()
            .iter()
            .any(|p| p.uid().as_deref() == Some(uid) && waiting_pod(p, &self.node).is_some())
    }

    /// Records on the pod that its devices were handed over (so that a
    /// restarted plugin does not choose it again), and a Normal Event.
    pub async fn record_handover(&self, grant: &Grant) {
        let pod = &grant.pod;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let value = json!({ "node": self.node, "podUID": pod.uid, "devices": grant.ids });
        let patch = json!({
            "metadata": {
                "uid": pod.uid,
                "annotations": { HANDOFF_ANNOTATION: value.to_string() },
            }
        });
        if let Err(error) = api
            .patch(&pod.name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            tracing::warn!(%pod, %error, "Cannot record the hand-over on the pod");
        }
        let gpus: Vec<&str> = grant.gpus.iter().map(|(u, _)| u.as_str()).collect();
        self.event(
            pod,
            EventType::Normal,
            "DevicesHandedOver",
            format!(
                "The kubelet on {} was given {} for this pod",
                self.node,
                gpus.join(",")
            ),
        )
        .await;
    }

    /// A Warning Event on the pod: the kubelet was refused its devices.
    pub async fn record_refusal(&self, pod: &PodRef, message: &str) {
        self.event(
            pod,
            EventType::Warning,
            "AllocationMismatch",
            message.to_owned(),
        )
        .await;
    }

    async fn event(&self, pod: &PodRef, type_: EventType, reason: &str, note: String) {
        let mut reference = Pod::object_ref(&Pod::default(), &());
        reference.namespace = Some(pod.namespace.clone());
        reference.name = Some(pod.name.clone());
        reference.uid = Some(pod.uid.clone());
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: "Allocate".into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(%pod, %error, "Cannot publish Event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use wasmgpu_api::{Device, PolicyRef, Sharing};

    fn pod(node: &str, allocation_node: &str, limits: &[Option<&str>]) -> Pod {
        let allocation = PodAllocation {
            resource: "r".into(),
            node: allocation_node.into(),
            sharing: Sharing::Exclusive,
            devices: vec![
                Device {
                    uuid: "GPU-a".into(),
                    index: 0,
                    memory_mib: 1,
                },
                Device {
                    uuid: "GPU-b".into(),
                    index: 1,
                    memory_mib: 1,
                },
            ],
            policy: PolicyRef {
                name: "binpack".into(),
                digest: "d".into(),
            },
        };
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("ml".into());
        pod.metadata.uid = Some("u".into());
        pod.metadata.annotations = Some(allocation.annotations());
        pod.spec = Some(PodSpec {
            node_name: Some(node.into()),
            containers: limits
                .iter()
                .map(|l| Container {
                    resources: l.map(|l| ResourceRequirements {
                        limits: Some(BTreeMap::from([(
                            RESOURCE_NAME.to_string(),
                            Quantity(l.into()),
                        )])),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn a_bound_pod_with_its_allocation_waits_with_its_containers_requests() {
        let waiting = waiting_pod(&pod("n1", "n1", &[Some("1"), None, Some("1")]), "n1").unwrap();
        let counts = |w: &WaitingPod| w.requests.iter().map(|r| r.count).collect::<Vec<_>>();
        assert_eq!(counts(&waiting), [1, 1]);
        assert_eq!(waiting.pod.uid, "u");
        let whole = waiting_pod(&pod("n1", "n1", &[None]), "n1").unwrap();
        assert_eq!(counts(&whole), [2], "no limits: one request for all");
    }

    #[test]
    fn other_nodes_started_and_handed_over_pods_do_not_wait() {
        assert!(waiting_pod(&pod("n2", "n2", &[None]), "n1").is_none());
        assert!(waiting_pod(&pod("n1", "n2", &[None]), "n1").is_none());
        let mut running = pod("n1", "n1", &[None]);
        running.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        assert!(waiting_pod(&running, "n1").is_none());
        let mut handed = pod("n1", "n1", &[None]);
        handed
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(HANDOFF_ANNOTATION.into(), "{}".into());
        assert!(waiting_pod(&handed, "n1").is_none());
    }
}
