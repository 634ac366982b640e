//! Why an API write did not happen: the error of every writer.

use std::time::Duration;

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The API server refused or failed the request.
    #[error("the API server refused or failed the write: {0}")]
    Api(#[from] kube::Error),
    /// No answer within the write timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

impl ApplyError {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ApplyError::Api(_) => "api",
            ApplyError::Timeout(_) => "timeout",
        }
    }
}
