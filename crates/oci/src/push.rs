//! Pushing a component as a Wasm OCI artifact: the config
//! (`application/vnd.wasm.config.v0+json`), the layer (`application/wasm`),
//! then the manifest under the tag; the manifest's digest pins it. The layer
//! carries an `org.opencontainers.image.title` (`<last repository segment>.wasm`),
//! the file name `oras pull` writes it to.

use http::HeaderValue;
use oci_client::RegistryOperation;
use serde_json::json;

use crate::access::Access;
use crate::error::OciError;
use crate::reference::{
    ComponentRef, MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, sha256,
};

/// The annotation naming a layer's file (ORAS writes the layer to it on pull).
const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

/// The manifest and config of a component artifact, as pushed: `(manifest,
/// config)` bytes; `title` names the layer's file.
pub fn artifact(wasm: &[u8], created: &str, title: &str) -> (Vec<u8>, Vec<u8>) {
    let layer_digest = sha256(wasm);
    // The Wasm OCI convention's config (as `wkg oci push` writes it).
    let config = serde_json::to_vec(&json!({
        "created": created,
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    }))
    .expect("a config serializes");
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": WASM_CONFIG_MEDIA_TYPE,
            "digest": sha256(&config),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": WASM_LAYER_MEDIA_TYPE,
            "digest": layer_digest,
            "size": wasm.len(),
            "annotations": { TITLE_ANNOTATION: title },
        }],
        "annotations": { "org.opencontainers.image.created": created },
    }))
    .expect("a manifest serializes");
    (manifest, config)
}

/// Pushes `wasm` to `target` (a tagged reference); returns the reference
/// pinned to the manifest's digest.
pub async fn push(
    wasm: &[u8],
    target: &ComponentRef,
    access: &Access,
) -> Result<ComponentRef, OciError> {
    let created = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let name = target
        .repository()
        .rsplit('/')
        .next()
        .unwrap_or("component");
    let (manifest, config) = artifact(wasm, &created, &format!("{name}.wasm"));
    let client = access.client(target)?;
    let reference = target.reference();
    let fail = |e| OciError::from_client(e, target, "push");
    client
        .auth(reference, &access.auth(), RegistryOperation::Push)
        .await
        .map_err(fail)?;
    client
        .push_blob(reference, config.clone(), &sha256(&config))
        .await
        .map_err(fail)?;
    client
        .push_blob(reference, wasm.to_vec(), &sha256(wasm))
        .await
        .map_err(fail)?;
    let digest = sha256(&manifest);
    client
        .push_manifest_raw(
            reference,
            manifest,
            HeaderValue::from_static(MANIFEST_MEDIA_TYPE),
        )
        .await
        .map_err(fail)?;
    Ok(target.with_digest(&digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_artifact_follows_the_wasm_oci_convention() {
        let (manifest, config) = artifact(b"\0asm", "2026-12-01T00:00:00Z", "binpack.wasm");
        let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
        assert_eq!(manifest["config"]["mediaType"], WASM_CONFIG_MEDIA_TYPE);
        assert_eq!(manifest["config"]["digest"], sha256(&config));
        assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
        assert_eq!(manifest["layers"][0]["digest"], sha256(b"\0asm"));
        assert_eq!(manifest["layers"][0]["size"], 4);
        assert_eq!(
            manifest["layers"][0]["annotations"][TITLE_ANNOTATION],
            "binpack.wasm"
        );
        let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
        assert_eq!(config["architecture"], "wasm");
        assert_eq!(config["layerDigests"][0], sha256(b"\0asm"));
    }
}
