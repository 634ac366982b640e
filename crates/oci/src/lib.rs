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

mod access;
mod cache;
mod client_error;
mod error;
mod pull;
mod push;
mod reference;

pub use access::{Access, DEFAULT_TIMEOUT, check_pem};
pub use cache::ComponentCache;
pub use error::{BoxError, OciError};
pub use pull::{Pulled, pull};
pub use push::push;
pub use reference::{
    ComponentRef, LEGACY_WASM_LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, MAX_MANIFEST_BYTES, SCHEME,
    WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, sha256,
};

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
