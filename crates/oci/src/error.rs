//! Why a registry operation failed.

use oci_client::errors::OciDistributionError;

/// A cause kept as it came (`#[source]`), for errors of several types.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a registry operation failed.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// Not an `oci://` reference the client can parse.
    #[error(
        "{value:?} is not an OCI reference ({reason}); expected oci://REGISTRY/REPOSITORY@sha256:<hex>"
    )]
    Reference {
        /// What was given.
        value: String,
        /// Why it does not parse.
        reason: String,
    },
    /// A reference without a digest where one is needed.
    #[error(
        "{0} names no digest: pin the component by its manifest digest \
         (oci://REGISTRY/REPOSITORY@sha256:<hex>, as `wasmgpu policy push` prints it)"
    )]
    NotPinned(String),
    /// A reference without a tag where one is needed (push).
    #[error("{0} names no tag to push to (oci://REGISTRY/REPOSITORY:TAG)")]
    NoTag(String),
    /// The registry has no such manifest or repository.
    #[error("{reference}: the registry has no such {what} ({detail})")]
    NotFound {
        /// The reference.
        reference: String,
        /// `manifest`, `repository` or `blob`.
        what: &'static str,
        /// What the registry said.
        detail: String,
    },
    /// The registry refused the credentials (or their absence).
    #[error(
        "{registry} refused access to {reference} ({detail}): give credentials \
         that may {operation} it"
    )]
    Unauthorized {
        /// The registry.
        registry: String,
        /// The reference.
        reference: String,
        /// `pull` or `push`.
        operation: &'static str,
        /// What the registry said.
        detail: String,
    },
    /// The registry could not be reached, or its certificate not trusted.
    #[error("cannot reach the registry {registry}")]
    Unreachable {
        /// The registry.
        registry: String,
        /// What the client ran into.
        #[source]
        source: OciDistributionError,
        /// A TLS failure (certificate not trusted, wrong name).
        tls: bool,
    },
    /// The component is over the size cap.
    #[error("the component layer of {reference} is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// The reference.
        reference: String,
        /// Its size (at least this much when read past the limit).
        size: u64,
        /// The limit.
        limit: usize,
    },
    /// Content whose digest is not the one it was asked by.
    #[error("digest mismatch for {what}: expected {expected}, got {actual}")]
    DigestMismatch {
        /// What was checked (manifest, layer, cached blob).
        what: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what came.
        actual: String,
    },
    /// The manifest is not a Wasm component artifact.
    #[error("{reference} is not a Wasm component artifact: {reason}")]
    NotAComponent {
        /// The reference.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Any other answer of the registry, or failure of the client.
    #[error("registry error for {reference}")]
    Registry {
        /// The reference.
        reference: String,
        /// What the registry said, or what the client ran into.
        #[source]
        source: BoxError,
    },
    /// A CA bundle that does not parse.
    #[error("the CA bundle {origin} holds no usable PEM certificate")]
    Ca {
        /// Where it came from.
        origin: String,
        /// Why it is refused.
        #[source]
        source: BoxError,
    },
}

// === impl OciError ===

impl OciError {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            OciError::Reference { .. } => "invalid-reference",
            OciError::NotPinned(_) => "not-pinned",
            OciError::NoTag(_) => "no-tag",
            OciError::NotFound { .. } => "not-found",
            OciError::Unauthorized { .. } => "unauthorized",
            OciError::Unreachable { tls: true, .. } => "tls",
            OciError::Unreachable { .. } => "unreachable",
            OciError::TooLarge { .. } => "too-large",
            OciError::DigestMismatch { .. } => "digest-mismatch",
            OciError::NotAComponent { .. } => "not-a-component",
            OciError::Registry { .. } => "registry",
            OciError::Ca { .. } => "ca",
        }
    }
}
