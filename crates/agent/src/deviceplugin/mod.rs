//! # The kubelet device plugin for `wasmgpu.io/gpu`
//!
//! The agent advertises its node's GPUs to the kubelet and, when the kubelet
//! starts a pod, hands over exactly the GPUs the controller recorded on that
//! pod (annotation `wasmgpu.io/allocation`, written with the binding).
//!
//! ```text
//!  Agent loop ── GPUNodeStatus ──▶ devices::advertised ──▶ ListAndWatch
//!                                   (uuid, uuid::k, health)
//!  NodePods (watch: spec.nodeName) ─▶ waiting pods ─┐
//!  kubelet: GetPreferredAllocation ─▶ Handoff::prefer ─┤  claim: pod + UID,
//!  kubelet: Allocate ───────────────▶ Handoff::allocate ┘  IDs, expiry
//!                                        │ grant            │ mismatch
//!                                        ▼                  ▼
//!                          response: CDI nvidia.com/gpu=…   refused + Event
//!                          pod annotation wasmgpu.io/handoff
//! ```
//!
//! * [`proto`]: the kubelet's `v1beta1` API (generated).
//! * [`devices`]: which device IDs a node's GPUs are offered as (pure).
//! * [`handoff`]: which pod is starting and what it gets (pure).
//! * [`response`]: what the container receives (pure).
//! * [`pods`]: the pods bound to this node; the hand-over and refusal writes.
//! * [`server`]: the gRPC service.
//! * [`registration`]: the socket, `Register`, and re-registration.
//! * [`kubelet`]: the kubelet's side, for nodes without one (`wasmgpu
//!   play-kubelet`, tests).

pub mod devices;
mod error;
pub mod handoff;
pub mod kubelet;
pub mod pods;
pub mod proto;
pub mod registration;
pub mod response;
pub mod server;

use std::path::PathBuf;
use std::time::Duration;
use tracing::Instrument;

use tokio::sync::watch;

pub use devices::DeviceOptions;
pub use error::DevicePluginError;
pub use handoff::Handoff;
pub use pods::{HANDOFF_ANNOTATION, NodePods, RESOURCE_NAME};
pub use registration::{KUBELET_SOCKET, PLUGIN_SOCKET, connect, register};
pub use response::{ResponseOptions, Strategy, cdi_name};
pub use server::Plugin;

use wasmgpu_api::GPUNodeStatus;

/// The kubelet's device plugin directory.
pub const DEFAULT_DIR: &str = "/var/lib/kubelet/device-plugins";

/// How the plugin runs (the agent's `--device-plugin-*` flags).
#[derive(Clone, Debug)]
pub struct Config {
    /// The kubelet's device plugin directory.
    pub dir: PathBuf,
    /// How GPUs are advertised.
    pub devices: DeviceOptions,
    /// How Allocate answers.
    pub response: ResponseOptions,
    /// How long a claim lasts without the kubelet's next call.
    pub claim_ttl: Duration,
    /// How long to wait for a starting pod to appear in the watch.
    pub pod_wait: Duration,
    /// How often to check the kubelet's socket.
    pub check: Duration,
}

/// Starts the plugin for `node`: advertises the GPUs of each status sent on
/// `statuses`, hands over the pods `pods` sees, and keeps registered.
pub fn start(
    config: Config,
    node: &str,
    pods: NodePods,
    mut statuses: watch::Receiver<Option<GPUNodeStatus>>,
) -> tokio::task::JoinHandle<()> {
    let (devices, advertised) = watch::channel(Vec::new());
    let options = config.devices;
    let advertising = async move {
        loop {
            let next = statuses
                .borrow_and_update()
                .as_ref()
                .map(|status| devices::advertised(status, options));
            if let Some(next) = next {
                devices.send_if_modified(|current| {
                    let changed = *current != next;
                    *current = next;
                    changed
                });
            }
            if statuses.changed().await.is_err() {
                break;
            }
        }
    };
    tokio::spawn(advertising.instrument(tracing::info_span!("device_list", %node)));
    let plugin = Plugin::new(
        advertised,
        pods,
        Handoff::new(node, config.claim_ttl),
        config.response,
        config.pod_wait,
    );
    let span = tracing::info_span!("device_plugin", %node, dir = %config.dir.display());
    tokio::spawn(registration::serve(plugin, config.dir, config.check).instrument(span))
}
