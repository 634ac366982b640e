//! What the OCI client's errors mean for a component reference.

use oci_client::errors::{OciDistributionError, OciErrorCode};
use wasmgpu_support::error_chain;

use crate::error::OciError;
use crate::reference::ComponentRef;

impl OciError {
    /// Classifies an error of the OCI client about `reference`.
    pub(crate) fn from_client(
        error: OciDistributionError,
        reference: &ComponentRef,
        operation: &'static str,
    ) -> Self {
        let registry = reference.registry().to_string();
        let shown = reference.to_string();
        match error {
            OciDistributionError::RegistryError { envelope, .. } => {
                let detail = envelope
                    .errors
                    .iter()
                    .map(|e| format!("{:?}: {}", e.code, e.message))
                    .collect::<Vec<_>>()
                    .join("; ");
                let code = envelope.errors.first().map(|e| &e.code);
                match code {
                    Some(OciErrorCode::ManifestUnknown) => OciError::NotFound {
                        reference: shown,
                        what: "manifest",
                        detail,
                    },
                    Some(OciErrorCode::NameUnknown) => OciError::NotFound {
                        reference: shown,
                        what: "repository",
                        detail,
                    },
                    Some(OciErrorCode::BlobUnknown) => OciError::NotFound {
                        reference: shown,
                        what: "blob",
                        detail,
                    },
                    Some(OciErrorCode::Unauthorized | OciErrorCode::Denied) => {
                        OciError::Unauthorized {
                            registry,
                            reference: shown,
                            operation,
                            detail,
                        }
                    }
                    _ => OciError::Registry {
                        reference: shown,
                        source: detail.into(),
                    },
                }
            }
            OciDistributionError::UnauthorizedError { url } => OciError::Unauthorized {
                registry,
                reference: shown,
                operation,
                detail: format!("401 from {url}"),
            },
            OciDistributionError::AuthenticationFailure(detail) => OciError::Unauthorized {
                registry,
                reference: shown,
                operation,
                detail,
            },
            OciDistributionError::ServerError {
                code: code @ (401 | 403),
                url,
                ..
            } => OciError::Unauthorized {
                registry,
                reference: shown,
                operation,
                detail: format!("{code} from {url}"),
            },
            OciDistributionError::ServerError {
                code: 404, message, ..
            } => OciError::NotFound {
                reference: shown,
                what: "manifest",
                detail: message,
            },
            OciDistributionError::DigestError(error) => OciError::DigestMismatch {
                what: shown,
                expected: String::new(),
                actual: error.to_string(),
            },
            OciDistributionError::RequestError(error)
                if error.is_connect() || error.is_timeout() =>
            {
                let lower = error_chain(&error).to_ascii_lowercase();
                OciError::Unreachable {
                    registry,
                    tls: lower.contains("certificate") || lower.contains("tls"),
                    source: OciDistributionError::RequestError(error),
                }
            }
            other => OciError::Registry {
                reference: shown,
                source: Box::new(other),
            },
        }
    }
}
