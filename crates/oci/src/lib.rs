//! Policy components in OCI registries: references, registry access, pull
//! (verified, size-capped, cached by digest) and push.
//!
//! ```text
//!  oci://registry/repo@sha256:<manifest>        (what a policy ConfigMap names)
//!    manifest  application/vnd.oci.image.manifest.v1+json
//!      config  application/vnd.wasm.config.v0+json   (the Wasm OCI artifact convention,
//!      layer   application/wasm  ── the component      as `wkg oci push` and ORAS write it)
//!
//!  pull: memory ─▶ disk (blobs/sha256/<hex>, re-hashed on read) ─▶ registry
//!        manifest hashed against the reference's digest, layer against the
//!        manifest's, layer size checked against the cap before and while reading
//! ```
//!
//! Nothing here knows Kubernetes: the controller turns a ConfigMap and its
//! pull Secret into a [`ComponentRef`] and an [`Access`]; the CLI turns flags
//! into the same.
//!
//! Crate `wasmgpu-oci`: below it only `wasmgpu-support`; the controller and the
//! CLI use it.
#![forbid(unsafe_code)]

mod cache;
mod pull;
mod push;

use std::fmt;
use std::time::Duration;
use wasmgpu_support::error_chain;

use oci_client::Reference;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;

pub use cache::ComponentCache;
pub use pull::{Pulled, pull};
pub use push::push;

/// The scheme of a component reference.
pub const SCHEME: &str = "oci://";
/// Media type of the config of a Wasm OCI artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Media type of the layer holding a Wasm component.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The layer media type older wasm-to-oci tools write; accepted on pull.
pub const LEGACY_WASM_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// Media type of the manifest pushed and accepted.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The largest manifest read (a Wasm artifact's is well under 1 KiB).
pub const MAX_MANIFEST_BYTES: usize = 64 << 10;

/// A component in a registry: `oci://registry/repository[:tag][@sha256:<hex>]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentRef {
    reference: Reference,
}

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

    /// Classifies an error of the OCI client about `reference`.
    fn from_client(
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

// === impl ComponentRef ===

impl ComponentRef {
    /// Parses `oci://…` (the scheme is required: a ConfigMap value names
    /// what it is).
    pub fn parse(value: &str) -> Result<Self, OciError> {
        let trimmed = value.trim();
        let rest = trimmed
            .strip_prefix(SCHEME)
            .ok_or_else(|| OciError::Reference {
                value: trimmed.to_string(),
                reason: format!("it does not start with {SCHEME}"),
            })?;
        // Without a dot, a colon or `localhost`, the client would read the
        // first part as a Docker Hub namespace: ask for the registry.
        let first = rest.split('/').next().unwrap_or_default();
        if !rest.contains('/')
            || !(first.contains('.') || first.contains(':') || first == "localhost")
        {
            return Err(OciError::Reference {
                value: trimmed.to_string(),
                reason: "it names no registry host".into(),
            });
        }
        let reference: Reference =
            rest.parse()
                .map_err(|e: oci_client::ParseError| OciError::Reference {
                    value: trimmed.to_string(),
                    reason: e.to_string(),
                })?;
        Ok(Self { reference })
    }

    /// Parses a reference that must be pinned by digest (what the controller
    /// pulls).
    pub fn parse_pinned(value: &str) -> Result<Self, OciError> {
        let parsed = Self::parse(value)?;
        if parsed.reference.digest().is_none() {
            return Err(OciError::NotPinned(value.trim().to_string()));
        }
        Ok(parsed)
    }

    /// Parses a reference that must carry a tag and no digest (what is
    /// pushed).
    pub fn parse_tagged(value: &str) -> Result<Self, OciError> {
        let parsed = Self::parse(value)?;
        if parsed.reference.digest().is_some() {
            return Err(OciError::Reference {
                value: value.trim().to_string(),
                reason: "a push names a tag, not a digest (the digest is the result)".into(),
            });
        }
        // The parser defaults a missing tag to `latest`: refuse it unless written.
        let written = value.trim().rsplit('/').next().unwrap_or_default();
        if !written.contains(':') {
            return Err(OciError::NoTag(value.trim().to_string()));
        }
        Ok(parsed)
    }

    /// The registry (`host[:port]`).
    pub fn registry(&self) -> &str {
        self.reference.resolve_registry()
    }

    /// The repository.
    pub fn repository(&self) -> &str {
        self.reference.repository()
    }

    /// The manifest digest it is pinned to, if any.
    pub fn digest(&self) -> Option<&str> {
        self.reference.digest()
    }

    /// The same repository, pinned to `digest`.
    pub fn with_digest(&self, digest: &str) -> Self {
        Self {
            reference: Reference::with_digest(
                self.reference.registry().to_string(),
                self.reference.repository().to_string(),
                digest.to_string(),
            ),
        }
    }

    fn reference(&self) -> &Reference {
        &self.reference
    }
}

impl fmt::Display for ComponentRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry(), self.repository())?;
        if let Some(tag) = self.reference.tag()
            && self.reference.digest().is_none()
        {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = self.reference.digest() {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

// === Access ===

/// How to talk to a registry: credentials, trust, transport.
#[derive(Clone, Default)]
pub struct Access {
    /// Basic credentials (user, password); none: anonymous.
    pub credentials: Option<(String, String)>,
    /// PEM bundles of CAs to trust besides the system's.
    pub ca_pem: Vec<Vec<u8>>,
    /// Plain HTTP instead of HTTPS (a local registry without TLS).
    pub plain_http: bool,
    /// Connect and read timeout.
    pub timeout: Option<Duration>,
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Access")
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .field("ca_bundles", &self.ca_pem.len())
            .field("plain_http", &self.plain_http)
            .finish()
    }
}

/// The default connect and read timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl Access {
    fn auth(&self) -> RegistryAuth {
        match &self.credentials {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    fn client(&self, reference: &ComponentRef) -> Result<oci_client::Client, OciError> {
        // reqwest is built without a crypto provider of its own: use ring,
        // as the Kubernetes client does (a second install is a no-op).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut roots = Vec::new();
        for (i, pem) in self.ca_pem.iter().enumerate() {
            check_pem(pem, &format!("#{}", i + 1))?;
            roots.push(Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem.clone(),
            });
        }
        let timeout = self.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let config = ClientConfig {
            protocol: if self.plain_http {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            extra_root_certificates: roots,
            // A component artifact is a manifest, never an index.
            platform_resolver: None,
            connect_timeout: Some(timeout),
            read_timeout: Some(timeout),
            user_agent: concat!("wasmgpu/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        oci_client::Client::try_from(config).map_err(|e| OciError::Registry {
            reference: reference.to_string(),
            source: Box::new(e),
        })
    }
}

/// Checks that `pem` holds at least one certificate.
pub fn check_pem(pem: &[u8], origin: &str) -> Result<(), OciError> {
    let text = String::from_utf8_lossy(pem);
    if !text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(OciError::Ca {
            origin: origin.to_string(),
            source: "no -----BEGIN CERTIFICATE----- block".into(),
        });
    }
    certificate_check(pem).map_err(|source| OciError::Ca {
        origin: origin.to_string(),
        source,
    })
}

fn certificate_check(pem: &[u8]) -> Result<(), BoxError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem).collect::<Result<_, _>>()?;
    if certs.is_empty() {
        return Err("no certificate in it".into());
    }
    Ok(())
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    use sha2::{Digest as _, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_parse_and_print_back() {
        let value = format!("oci://registry.example:5000/policies/binpack@{DIGEST}");
        let parsed = ComponentRef::parse_pinned(&value).unwrap();
        assert_eq!(parsed.registry(), "registry.example:5000");
        assert_eq!(parsed.repository(), "policies/binpack");
        assert_eq!(parsed.digest(), Some(DIGEST));
        assert_eq!(parsed.to_string(), value);
        // A tag next to the digest is allowed; the digest decides.
        let both = format!("oci://localhost/p:v1@{DIGEST}");
        assert_eq!(
            ComponentRef::parse_pinned(&both).unwrap().to_string(),
            format!("oci://localhost/p@{DIGEST}")
        );
        let tagged = ComponentRef::parse_tagged("oci://127.0.0.1:5000/p:v1").unwrap();
        assert_eq!(tagged.to_string(), "oci://127.0.0.1:5000/p:v1");
        assert_eq!(
            tagged.with_digest(DIGEST).to_string(),
            format!("oci://127.0.0.1:5000/p@{DIGEST}")
        );
    }

    #[test]
    fn references_without_what_is_needed_are_refused_by_name() {
        let error = ComponentRef::parse_pinned("oci://registry.example/p:v1").unwrap_err();
        assert_eq!(error.kind(), "not-pinned");
        assert!(error.to_string().contains("wasmgpu policy push"), "{error}");
        let error = ComponentRef::parse_pinned("registry.example/p@sha256:00").unwrap_err();
        assert_eq!(error.kind(), "invalid-reference");
        assert!(error.to_string().contains("oci://"), "{error}");
        let error = ComponentRef::parse_pinned(&format!("oci://policies/p@{DIGEST}")).unwrap_err();
        assert!(error.to_string().contains("no registry host"), "{error}");
        let error = ComponentRef::parse_tagged("oci://registry.example/p").unwrap_err();
        assert_eq!(error.kind(), "no-tag");
        let error =
            ComponentRef::parse_tagged(&format!("oci://registry.example/p@{DIGEST}")).unwrap_err();
        assert!(error.to_string().contains("tag"), "{error}");
    }

    #[test]
    fn ca_bundles_without_certificates_are_refused() {
        let error = check_pem(b"not a pem", "flag").unwrap_err();
        assert_eq!(error.kind(), "ca");
        assert!(error.to_string().contains("flag"), "{error}");
    }
}
