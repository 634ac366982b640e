//! The `DevicePlugin` gRPC service: ListAndWatch from the inventory,
//! GetPreferredAllocation and Allocate through the hand-off.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status};

use super::handoff::{Grant, Handoff, HandoffError, PreferenceRequest};
use super::pods::NodePods;
use super::proto::device_plugin_server::DevicePlugin;
use super::proto::{
    AllocateRequest, AllocateResponse, ContainerPreferredAllocationResponse, Device,
    DevicePluginOptions, Empty, ListAndWatchResponse, PreStartContainerRequest,
    PreStartContainerResponse, PreferredAllocationRequest, PreferredAllocationResponse,
};
use super::response::{ResponseOptions, container_response};

/// The plugin's service, shared by every connection of the kubelet.
#[derive(Clone)]
pub struct Plugin {
    devices: watch::Receiver<Vec<Device>>,
    pods: NodePods,
    handoff: Arc<Mutex<Handoff>>,
    options: ResponseOptions,
    /// How long to wait for a pod the kubelet starts to show up in the
    /// watch (the kubelet may see it first).
    pod_wait: Duration,
}

impl Plugin {
    /// A plugin advertising `devices`, handing over the pods of `pods`.
    pub fn new(
        devices: watch::Receiver<Vec<Device>>,
        pods: NodePods,
        handoff: Handoff,
        options: ResponseOptions,
        pod_wait: Duration,
    ) -> Self {
        Self {
            devices,
            pods,
            handoff: Arc::new(Mutex::new(handoff)),
            options,
            pod_wait,
        }
    }

    /// Runs `step` on the hand-off with the waiting pods, again while no
    /// pod waits, until `pod_wait` passes.
    async fn with_waiting<T>(
        &self,
        step: impl Fn(&mut Handoff, &[super::handoff::WaitingPod]) -> Result<T, HandoffError>,
    ) -> Result<T, HandoffError> {
        let deadline = Instant::now() + self.pod_wait;
        loop {
            let waiting = self.pods.waiting();
            let result = {
                let mut handoff = wasmgpu_support::lock(&self.handoff);
                handoff.retain_handed_over(|uid| self.pods.still_waiting(uid));
                step(&mut handoff, &waiting)
            };
            match result {
                Err(HandoffError::NoPodWaiting { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return other,
            }
        }
    }

    async fn refuse(&self, error: HandoffError) -> Status {
        let message = format!("wasmgpu device plugin: {error}");
        tracing::warn!(kind = error.kind(), %error, "Refused");
        if let HandoffError::Mismatch { pod, .. } = &error {
            self.pods.record_refusal(pod, &message).await;
        }
        Status::failed_precondition(message)
    }
}

type DeviceStream =
    Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl DevicePlugin for Plugin {
    type ListAndWatchStream = DeviceStream;

    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        tracing::info!("Kubelet opened ListAndWatch");
        let stream = WatchStream::new(self.devices.clone())
            .map(|devices| Ok(ListAndWatchResponse { devices }));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let mut container_responses = Vec::new();
        for container in request.into_inner().container_requests {
            let request = PreferenceRequest {
                available: container.available_device_i_ds,
                must_include: container.must_include_device_i_ds,
                size: usize::try_from(container.allocation_size).unwrap_or(0),
            };
            let ids = self
                .with_waiting(|handoff, waiting| handoff.prefer(Instant::now(), waiting, &request))
                .await;
            match ids {
                Ok(ids) => container_responses
                    .push(ContainerPreferredAllocationResponse { device_i_ds: ids }),
                Err(error) => return Err(self.refuse(error).await),
            }
        }
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let mut container_responses = Vec::new();
        let mut grants: Vec<Grant> = Vec::new();
        for container in request.into_inner().container_requests {
            let offered = container.devices_ids;
            let grant = self
                .with_waiting(|handoff, waiting| {
                    handoff.allocate(Instant::now(), waiting, &offered)
                })
                .await;
            match grant {
                Ok(grant) => {
                    tracing::info!(pod = %grant.pod, ids = ?grant.ids, "Allocated");
                    container_responses.push(container_response(&grant, self.options));
                    grants.push(grant);
                }
                Err(error) => return Err(self.refuse(error).await),
            }
        }
        for grant in grants {
            let handed_over = {
                let handoff = wasmgpu_support::lock(&self.handoff);
                handoff.is_handed_over(&grant.pod.uid)
            };
            if handed_over {
                let pods = self.pods.clone();
                tokio::spawn(async move { pods.record_handover(&grant).await });
            }
        }
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

/// What the plugin tells the kubelet it implements.
pub fn options() -> DevicePluginOptions {
    DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}
