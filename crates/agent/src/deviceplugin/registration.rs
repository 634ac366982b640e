//! Serving the plugin's socket and registering with the kubelet, again
//! whenever the kubelet restarts.
//!
//! ```text
//!  wait for <dir>/kubelet.sock ─▶ serve <dir>/wasmgpu.sock ─▶ Register
//!        ▲                                                     │
//!        └── kubelet.sock replaced or gone, or our socket ◀────┘ watch every check
//!            removed (a starting kubelet removes every plugin socket)
//! ```

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Server, Uri};

use super::error::DevicePluginError;
use super::pods::RESOURCE_NAME;
use super::proto::device_plugin_server::DevicePluginServer;
use super::proto::registration_client::RegistrationClient;
use super::proto::{RegisterRequest, VERSION};
use super::server::{Plugin, options};

/// The kubelet's registration socket, in the device plugin directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// The plugin's own socket, in the same directory.
pub const PLUGIN_SOCKET: &str = "wasmgpu.sock";

/// Opens a gRPC channel over the Unix socket at `path`.
pub async fn connect(path: &Path) -> Result<Channel, DevicePluginError> {
    let socket = path.to_owned();
    // The URI is not used: every connection goes to the socket.
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { UnixStream::connect(socket).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|error| DevicePluginError::Connect {
            path: path.to_owned(),
            error,
        })
}

/// Registers the plugin served at `endpoint` (a file name in `dir`) with
/// the kubelet.
pub async fn register(dir: &Path, endpoint: &str) -> Result<(), DevicePluginError> {
    let channel = connect(&dir.join(KUBELET_SOCKET)).await?;
    RegistrationClient::new(channel)
        .register(RegisterRequest {
            version: VERSION.into(),
            endpoint: endpoint.into(),
            resource_name: RESOURCE_NAME.into(),
            options: Some(options()),
        })
        .await
        .map_err(|status| DevicePluginError::Register {
            path: dir.join(KUBELET_SOCKET),
            status,
        })?;
    Ok(())
}

/// Identity of a file: a socket removed and created again differs.
fn identity(path: &Path) -> Option<(u64, i64, i64)> {
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.ino(), m.ctime(), m.ctime_nsec()))
}

/// Serves `plugin` in `dir` and keeps it registered with the kubelet,
/// checking every `check`; never returns.
pub async fn serve(plugin: Plugin, dir: PathBuf, check: Duration) {
    let kubelet = dir.join(KUBELET_SOCKET);
    let socket = dir.join(PLUGIN_SOCKET);
    let mut waiting_logged = false;
    loop {
        let Some(kubelet_identity) = identity(&kubelet) else {
            if !waiting_logged {
                tracing::info!(socket = %kubelet.display(), "Waiting for the kubelet");
                waiting_logged = true;
            }
            tokio::time::sleep(check).await;
            continue;
        };
        waiting_logged = false;
        let (stop, stopped) = oneshot::channel::<()>();
        let server = match listen(&plugin, &socket, stopped) {
            Ok(server) => server,
            Err(error) => {
                tracing::warn!(kind = error.kind(), %error, "Cannot serve the device plugin");
                tokio::time::sleep(check).await;
                continue;
            }
        };
        match register(&dir, PLUGIN_SOCKET).await {
            Ok(()) => {
                tracing::info!(resource = RESOURCE_NAME, socket = %socket.display(), "Registered with the kubelet");
                let plugin_identity = identity(&socket);
                loop {
                    tokio::time::sleep(check).await;
                    if identity(&kubelet) != Some(kubelet_identity) {
                        tracing::info!("Kubelet socket replaced; registering again");
                        break;
                    }
                    if identity(&socket) != plugin_identity {
                        tracing::info!("Plugin socket removed; serving and registering again");
                        break;
                    }
                }
            }
            Err(error) => {
                tracing::warn!(kind = error.kind(), %error, "Registration failed; retrying");
                tokio::time::sleep(check).await;
            }
        }
        // Open ListAndWatch streams keep a graceful stop waiting: give it a
        // moment, then drop the server.
        let _ = stop.send(());
        let abort = server.abort_handle();
        if tokio::time::timeout(Duration::from_secs(1), server)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
}

/// Binds `socket` (replacing a stale one) and serves `plugin` on it until
/// `stopped`.
fn listen(
    plugin: &Plugin,
    socket: &Path,
    stopped: oneshot::Receiver<()>,
) -> Result<tokio::task::JoinHandle<()>, DevicePluginError> {
    let bind_error = |error| DevicePluginError::Socket {
        path: socket.to_owned(),
        error,
    };
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(bind_error(error)),
    }
    let listener = UnixListener::bind(socket).map_err(bind_error)?;
    let service = DevicePluginServer::new(plugin.clone());
    Ok(tokio::spawn(async move {
        let result = Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                let _ = stopped.await;
            })
            .await;
        if let Err(error) = result {
            tracing::warn!(%error, "Device plugin server stopped");
        }
    }))
}
