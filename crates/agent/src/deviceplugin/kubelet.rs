//! The kubelet's side of the device plugin API, for a node without a
//! kubelet: `wasmgpu play-kubelet` (the demo, a simulated node, checking a
//! hand-off) and the tests. It does what the kubelet's device manager does:
//! serves `Registration` on `kubelet.sock`, opens `ListAndWatch` on the
//! plugin that registers, and admits a container with
//! `GetPreferredAllocation` followed by `Allocate` of the preferred IDs.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};

use super::error::DevicePluginError;
use super::proto::device_plugin_client::DevicePluginClient;
use super::proto::registration_server::{Registration, RegistrationServer};
use super::proto::{
    AllocateRequest, ContainerAllocateRequest, ContainerAllocateResponse,
    ContainerPreferredAllocationRequest, Device, Empty, PreferredAllocationRequest,
    RegisterRequest,
};
use super::registration::{KUBELET_SOCKET, connect};
use wasmgpu_api::ContainerGpus;

/// What went wrong playing the kubelet.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// `kubelet.sock` cannot be served.
    #[error("cannot serve {path}: {error}")]
    Socket {
        /// The socket.
        path: PathBuf,
        /// The I/O error.
        #[source]
        error: std::io::Error,
    },
    /// No plugin registered in time.
    #[error(
        "no device plugin registered at {dir} within {within:?} (is `wasmgpu agent` running with --device-plugin-dir {dir}?)"
    )]
    NoRegistration {
        /// The directory.
        dir: PathBuf,
        /// How long it waited.
        within: Duration,
    },
    /// The plugin's socket cannot be reached.
    #[error(transparent)]
    Connect(#[from] DevicePluginError),
    /// A call failed.
    #[error("{call}: {status}")]
    Call {
        /// Which call.
        call: &'static str,
        /// The plugin's answer.
        status: Status,
    },
    /// The device list never became what was waited for.
    #[error("ListAndWatch never showed {what} within {within:?}: {devices:?}")]
    Devices {
        /// What was waited for.
        what: String,
        /// How long.
        within: Duration,
        /// The last list.
        devices: Vec<Device>,
    },
    /// The plugin answered something the kubelet would not accept.
    #[error("{0}")]
    Protocol(String),
}

impl KubeletError {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            KubeletError::Socket { .. } => "socket",
            KubeletError::NoRegistration { .. } => "no-registration",
            KubeletError::Connect(error) => error.kind(),
            KubeletError::Call { .. } => "call",
            KubeletError::Devices { .. } => "devices",
            KubeletError::Protocol(_) => "protocol",
        }
    }
}

/// The kubelet's Registration service: forwards each request.
struct Registrations(mpsc::UnboundedSender<RegisterRequest>);

#[tonic::async_trait]
impl Registration for Registrations {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let _ = self.0.send(request.into_inner());
        Ok(Response::new(Empty {}))
    }
}

/// A kubelet's device manager: serves `kubelet.sock` in its directory until
/// dropped.
pub struct Kubelet {
    dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    registered: mpsc::UnboundedReceiver<RegisterRequest>,
}

impl Kubelet {
    /// Serves `Registration` on `<dir>/kubelet.sock` (replacing a stale
    /// socket). Needs a Tokio runtime.
    pub fn start(dir: &Path) -> Result<Self, KubeletError> {
        let socket = dir.join(KUBELET_SOCKET);
        let _ = std::fs::remove_file(&socket);
        let listener =
            tokio::net::UnixListener::bind(&socket).map_err(|error| KubeletError::Socket {
                path: socket.clone(),
                error,
            })?;
        let (sender, registered) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(
            Server::builder()
                .add_service(RegistrationServer::new(Registrations(sender)))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                }),
        );
        Ok(Self {
            dir: dir.to_owned(),
            stop: Some(stop),
            registered,
        })
    }

    /// The next `Register` call, within `within`.
    pub async fn registration(
        &mut self,
        within: Duration,
    ) -> Result<RegisterRequest, KubeletError> {
        match tokio::time::timeout(within, self.registered.recv()).await {
            Ok(Some(request)) => Ok(request),
            _ => Err(KubeletError::NoRegistration {
                dir: self.dir.clone(),
                within,
            }),
        }
    }

    /// Stops, removes its socket and every plugin socket (as a starting
    /// kubelet does), and starts again.
    pub fn restart(self) -> Result<Self, KubeletError> {
        let dir = self.dir.clone();
        // Dropped first: it would otherwise remove the new socket.
        drop(self);
        let entries = std::fs::read_dir(&dir).map_err(|error| KubeletError::Socket {
            path: dir.clone(),
            error,
        })?;
        for entry in entries.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
        Self::start(&dir)
    }

    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.shut_down();
        let _ = std::fs::remove_file(self.dir.join(KUBELET_SOCKET));
    }
}

/// The kubelet's connection to one plugin: the device list `ListAndWatch`
/// last sent, and the client for the allocation calls.
pub struct PluginConnection {
    client: DevicePluginClient<Channel>,
    devices: watch::Receiver<Vec<Device>>,
}

impl PluginConnection {
    /// Connects to the plugin that sent `registration` (its endpoint in
    /// `dir`) and opens `ListAndWatch`.
    pub async fn open(dir: &Path, registration: &RegisterRequest) -> Result<Self, KubeletError> {
        let channel = connect(&dir.join(&registration.endpoint)).await?;
        let mut client = DevicePluginClient::new(channel);
        let options = client
            .get_device_plugin_options(Empty {})
            .await
            .map_err(|status| KubeletError::Call {
                call: "GetDevicePluginOptions",
                status,
            })?
            .into_inner();
        if !options.get_preferred_allocation_available {
            return Err(KubeletError::Protocol(
                "the plugin does not offer GetPreferredAllocation".into(),
            ));
        }
        let mut stream = client
            .list_and_watch(Empty {})
            .await
            .map_err(|status| KubeletError::Call {
                call: "ListAndWatch",
                status,
            })?
            .into_inner();
        let (sender, devices) = watch::channel(Vec::new());
        tokio::spawn(async move {
            while let Ok(Some(response)) = stream.message().await {
                sender.send_replace(response.devices);
            }
        });
        Ok(Self { client, devices })
    }

    /// The device list as last sent.
    pub fn devices(&self) -> Vec<Device> {
        self.devices.borrow().clone()
    }

    /// Waits until the device list satisfies `cond`.
    pub async fn wait_devices(
        &mut self,
        within: Duration,
        what: &str,
        cond: impl Fn(&[Device]) -> bool,
    ) -> Result<Vec<Device>, KubeletError> {
        let deadline = Instant::now() + within;
        loop {
            let devices = self.devices.borrow_and_update().clone();
            if cond(&devices) {
                return Ok(devices);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero()
                || tokio::time::timeout(left, self.devices.changed())
                    .await
                    .is_err()
            {
                return Err(KubeletError::Devices {
                    what: what.to_string(),
                    within,
                    devices,
                });
            }
        }
    }

    /// The healthy device IDs not in `in_use`, as the kubelet offers them.
    pub fn available(&self, in_use: &HashSet<String>) -> Vec<String> {
        self.devices
            .borrow()
            .iter()
            .filter(|d| d.health == "Healthy" && !in_use.contains(&d.id))
            .map(|d| d.id.clone())
            .collect()
    }

    /// The device manager's admission of one container asking for `size`:
    /// `GetPreferredAllocation` among the available devices, then
    /// `Allocate` of the preferred IDs. The IDs and the response.
    pub async fn admit(
        &mut self,
        in_use: &HashSet<String>,
        size: usize,
    ) -> Result<(Vec<String>, ContainerAllocateResponse), KubeletError> {
        let container = ContainerGpus {
            count: size as u32,
            gives_back: false,
        };
        let mut in_use = in_use.clone();
        let mut admitted = self.admit_pod(&mut in_use, &[container]).await?;
        admitted
            .pop()
            .ok_or_else(|| KubeletError::Protocol("no container admitted".into()))
    }

    /// The device manager's admission of a whole pod: each container that
    /// asks for GPUs in turn (`containers`, in the kubelet's order). As the
    /// kubelet's `devicesToReuse` does, a container first takes what a
    /// regular init container before it had; for the rest it asks
    /// `GetPreferredAllocation` among the devices nobody holds (with the
    /// reused ones as `mustInclude`), then `Allocate`. A sidecar's or app
    /// container's devices stay with it. `in_use` gains every device the
    /// pod was given. The IDs and the response of each container.
    pub async fn admit_pod(
        &mut self,
        in_use: &mut HashSet<String>,
        containers: &[ContainerGpus],
    ) -> Result<Vec<(Vec<String>, ContainerAllocateResponse)>, KubeletError> {
        let mut reusable: Vec<String> = Vec::new();
        let mut admitted = Vec::with_capacity(containers.len());
        for container in containers {
            let size = container.count as usize;
            let mut ids: Vec<String> = reusable.iter().take(size).cloned().collect();
            if ids.len() < size {
                let mut available = self.available(in_use);
                available.extend(ids.iter().cloned());
                let preferred = self
                    .preferred_with(available, ids.clone(), size)
                    .await
                    .map_err(|status| KubeletError::Call {
                        call: "GetPreferredAllocation",
                        status,
                    })?;
                if preferred.len() != size || !ids.iter().all(|id| preferred.contains(id)) {
                    return Err(KubeletError::Protocol(format!(
                        "GetPreferredAllocation offered {preferred:?} for {size} device(s) \
                         including {ids:?}"
                    )));
                }
                ids = preferred;
            }
            let response = self
                .allocate(&ids)
                .await
                .map_err(|status| KubeletError::Call {
                    call: "Allocate",
                    status,
                })?;
            in_use.extend(ids.iter().cloned());
            if container.gives_back {
                for id in &ids {
                    if !reusable.contains(id) {
                        reusable.push(id.clone());
                    }
                }
            } else {
                reusable.retain(|id| !ids.contains(id));
            }
            admitted.push((ids, response));
        }
        Ok(admitted)
    }

    /// `GetPreferredAllocation` of `size` among `available`, for one
    /// container: the IDs the plugin prefers.
    pub async fn preferred(
        &mut self,
        available: Vec<String>,
        size: usize,
    ) -> Result<Vec<String>, Status> {
        self.preferred_with(available, Vec::new(), size).await
    }

    /// `GetPreferredAllocation` of `size` among `available` that must
    /// include `must_include` (devices reused from an init container).
    pub async fn preferred_with(
        &mut self,
        available: Vec<String>,
        must_include: Vec<String>,
        size: usize,
    ) -> Result<Vec<String>, Status> {
        let response = self
            .client
            .get_preferred_allocation(PreferredAllocationRequest {
                container_requests: vec![ContainerPreferredAllocationRequest {
                    available_device_i_ds: available,
                    must_include_device_i_ds: must_include,
                    allocation_size: size as i32,
                }],
            })
            .await?
            .into_inner();
        Ok(response
            .container_responses
            .into_iter()
            .next()
            .map(|r| r.device_i_ds)
            .unwrap_or_default())
    }

    /// `Allocate` of `ids` for one container.
    pub async fn allocate(&mut self, ids: &[String]) -> Result<ContainerAllocateResponse, Status> {
        let response = self
            .client
            .allocate(AllocateRequest {
                container_requests: vec![ContainerAllocateRequest {
                    devices_ids: ids.to_vec(),
                }],
            })
            .await?
            .into_inner();
        response
            .container_responses
            .into_iter()
            .next()
            .ok_or_else(|| Status::internal("Allocate answered no container"))
    }
}
