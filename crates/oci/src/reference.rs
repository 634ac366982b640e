//! What a component reference names, and what the artifact it names is
//! made of: media types, the manifest cap, digests.

use std::fmt;

use oci_client::Reference;

use crate::error::OciError;
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

    pub(crate) fn reference(&self) -> &Reference {
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

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    use sha2::{Digest as _, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}
