//! What can stop the agent: the one error its run returns.
//!
//! The errors of single operations stay with them and never stop the
//! agent: the device plugin's socket and registration
//! ([`DevicePluginError`](crate::deviceplugin::DevicePluginError): logged,
//! retried at the next check), a hand-off the kubelet asks for that this
//! node cannot honour ([`HandoffError`](crate::deviceplugin::handoff::HandoffError):
//! the kubelet's call fails with it, the container does not start). A GPU
//! source and the GPUNode writes, which stop it, are this error's sources.
//! [`KubeletError`](crate::deviceplugin::kubelet::KubeletError) belongs to
//! `play-kubelet`, the kubelet's side, not the agent's.

use crate::publish::PublishError;
use crate::source::SourceError;

/// What can stop the agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The GPU source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Writing the GPUNode failed.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signal(std::io::Error),
}

impl Error {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Source(error) => error.kind(),
            Error::Publish(error) => error.kind(),
            Error::Signal(_) => "signal",
        }
    }
}

/// `Result` with the agent's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
