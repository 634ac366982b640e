//! Why the plugin cannot talk to the kubelet.

use std::path::PathBuf;

use super::pods::RESOURCE_NAME;

/// Why the plugin cannot talk to the kubelet.
#[derive(Debug, thiserror::Error)]
pub enum DevicePluginError {
    /// The plugin's socket cannot be created.
    #[error(
        "cannot serve on {path}: {error} (is --device-plugin-dir the kubelet's device plugin directory, mounted read-write?)"
    )]
    Socket {
        /// The socket.
        path: PathBuf,
        /// The I/O error.
        #[source]
        error: std::io::Error,
    },
    /// A socket cannot be reached.
    #[error("cannot connect to {path}: {error}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// tonic's error.
        #[source]
        error: tonic::transport::Error,
    },
    /// The kubelet refused the registration.
    #[error("the kubelet at {path} refused to register {RESOURCE_NAME}: {status}")]
    Register {
        /// The kubelet's socket.
        path: PathBuf,
        /// The kubelet's answer.
        #[source]
        status: tonic::Status,
    },
}

impl DevicePluginError {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            DevicePluginError::Socket { .. } => "socket",
            DevicePluginError::Connect { .. } => "connect",
            DevicePluginError::Register { .. } => "register",
        }
    }
}
