//! Pulling a component: the manifest the reference pins, then its one Wasm
//! layer, each checked against its digest, the layer against the size cap.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use oci_client::manifest::{OciDescriptor, OciImageManifest};

use super::cache::Kind;
use crate::access::Access;
use crate::cache::ComponentCache;
use crate::error::OciError;
use crate::reference::{
    ComponentRef, LEGACY_WASM_LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, MAX_MANIFEST_BYTES,
    WASM_LAYER_MEDIA_TYPE, sha256,
};

/// A pulled component.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The component.
    pub wasm: Arc<Vec<u8>>,
    /// The manifest digest (the reference's).
    pub manifest_digest: String,
    /// Where it came from: `memory`, `disk` or `registry`.
    pub from: &'static str,
}

/// Pulls the component `reference` pins (it must carry a digest), at most
/// `limit` bytes, from `cache` when it has it.
pub async fn pull(
    reference: &ComponentRef,
    access: &Access,
    limit: usize,
    cache: &ComponentCache,
) -> Result<Pulled, OciError> {
    let digest = reference
        .digest()
        .ok_or_else(|| OciError::NotPinned(reference.to_string()))?
        .to_string();
    if let Some(wasm) = cache.component(&digest) {
        check_size(reference, wasm.len() as u64, limit)?;
        return Ok(Pulled {
            wasm,
            manifest_digest: digest,
            from: "memory",
        });
    }
    let mut client = None;
    let mut from = "disk";
    let manifest_bytes = match cache.get(Kind::Manifest, &digest) {
        Some(bytes) => bytes,
        None => {
            from = "registry";
            let oci = client.insert(access.client(reference)?);
            manifest_from_registry(oci, reference, access, &digest, cache).await?
        }
    };
    let layer = wasm_layer(reference, &manifest_bytes)?;
    check_size(
        reference,
        u64::try_from(layer.size).unwrap_or(u64::MAX),
        limit,
    )?;
    let wasm = match cache.get(Kind::Blob, &layer.digest) {
        Some(bytes) => bytes,
        None => {
            from = "registry";
            let oci = match client {
                Some(client) => client,
                None => access.client(reference)?,
            };
            layer_from_registry(&oci, reference, access, &layer, limit, cache).await?
        }
    };
    check_size(reference, wasm.len() as u64, limit)?;
    let wasm = Arc::new(wasm);
    cache.keep_component(&digest, Arc::clone(&wasm));
    Ok(Pulled {
        wasm,
        manifest_digest: digest,
        from,
    })
}

/// The manifest `digest` names, from the registry: capped, checked
/// against its digest, and kept in `cache`.
async fn manifest_from_registry(
    oci: &oci_client::Client,
    reference: &ComponentRef,
    access: &Access,
    digest: &str,
    cache: &ComponentCache,
) -> Result<Vec<u8>, OciError> {
    let (body, _) = oci
        .pull_manifest_raw(
            reference.reference(),
            &access.auth(),
            &[MANIFEST_MEDIA_TYPE],
        )
        .await
        .map_err(|e| OciError::from_client(e, reference, "pull"))?;
    if body.len() > MAX_MANIFEST_BYTES {
        return Err(OciError::NotAComponent {
            reference: reference.to_string(),
            reason: format!(
                "its manifest is {} bytes, over {MAX_MANIFEST_BYTES}",
                body.len()
            ),
        });
    }
    check_digest(&format!("the manifest of {reference}"), digest, &body)?;
    cache.keep(Kind::Manifest, digest, &body);
    Ok(body.to_vec())
}

/// The Wasm layer, from the registry: at most `limit` bytes, checked
/// against its digest, and kept in `cache`.
async fn layer_from_registry(
    oci: &oci_client::Client,
    reference: &ComponentRef,
    access: &Access,
    layer: &OciDescriptor,
    limit: usize,
    cache: &ComponentCache,
) -> Result<Vec<u8>, OciError> {
    oci.store_auth_if_needed(reference.registry(), &access.auth())
        .await;
    let mut sink = Capped::new(limit);
    let result = oci.pull_blob(reference.reference(), layer, &mut sink).await;
    if sink.over {
        return Err(OciError::TooLarge {
            reference: reference.to_string(),
            size: sink.seen,
            limit,
        });
    }
    result.map_err(|e| OciError::from_client(e, reference, "pull"))?;
    check_digest(
        &format!("the layer of {reference}"),
        &layer.digest,
        &sink.bytes,
    )?;
    cache.keep(Kind::Blob, &layer.digest, &sink.bytes);
    Ok(sink.bytes)
}

fn check_size(reference: &ComponentRef, size: u64, limit: usize) -> Result<(), OciError> {
    if size > limit as u64 {
        return Err(OciError::TooLarge {
            reference: reference.to_string(),
            size,
            limit,
        });
    }
    Ok(())
}

fn check_digest(what: &str, expected: &str, bytes: &[u8]) -> Result<(), OciError> {
    let actual = sha256(bytes);
    if actual != expected {
        return Err(OciError::DigestMismatch {
            what: what.to_string(),
            expected: expected.to_string(),
            actual,
        });
    }
    Ok(())
}

/// The one Wasm layer of a manifest.
fn wasm_layer(reference: &ComponentRef, manifest: &[u8]) -> Result<OciDescriptor, OciError> {
    let not = |reason: String| OciError::NotAComponent {
        reference: reference.to_string(),
        reason,
    };
    let manifest: OciImageManifest = serde_json::from_slice(manifest)
        .map_err(|e| not(format!("its manifest is not an OCI image manifest: {e}")))?;
    let mut layers = manifest.layers.into_iter().filter(|l| {
        l.media_type == WASM_LAYER_MEDIA_TYPE || l.media_type == LEGACY_WASM_LAYER_MEDIA_TYPE
    });
    match (layers.next(), layers.next()) {
        (Some(layer), None) => Ok(layer),
        (None, _) => Err(not(format!(
            "its manifest has no {WASM_LAYER_MEDIA_TYPE} layer (config {})",
            manifest.config.media_type
        ))),
        (Some(_), Some(_)) => Err(not(format!(
            "its manifest has several {WASM_LAYER_MEDIA_TYPE} layers"
        ))),
    }
}

/// Collects at most `limit` bytes; past it, the write fails and `over` is set.
struct Capped {
    bytes: Vec<u8>,
    limit: usize,
    seen: u64,
    over: bool,
}

impl Capped {
    fn new(limit: usize) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
            seen: 0,
            over: false,
        }
    }
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.seen += buf.len() as u64;
        if self.bytes.len() + buf.len() > self.limit {
            self.over = true;
            return Poll::Ready(Err(std::io::Error::other("over the size limit")));
        }
        self.bytes.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> ComponentRef {
        ComponentRef::parse_pinned(&format!("oci://localhost/p@{}", sha256(b"m"))).unwrap()
    }

    fn manifest(layers: &[(&str, &str)]) -> Vec<u8> {
        let layers: Vec<_> = layers
            .iter()
            .map(|(media, digest)| serde_json::json!({"mediaType": media, "digest": digest, "size": 3}))
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": super::super::WASM_CONFIG_MEDIA_TYPE, "digest": sha256(b"{}"), "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn the_wasm_layer_is_found_and_others_refused() {
        let d = sha256(b"abc");
        let layer = wasm_layer(&reference(), &manifest(&[(WASM_LAYER_MEDIA_TYPE, &d)])).unwrap();
        assert_eq!(layer.digest, d);
        let error = wasm_layer(
            &reference(),
            &manifest(&[("application/vnd.oci.image.layer.v1.tar", &d)]),
        )
        .unwrap_err();
        assert_eq!(error.kind(), "not-a-component");
        assert!(error.to_string().contains("application/wasm"), "{error}");
        let error = wasm_layer(
            &reference(),
            &manifest(&[(WASM_LAYER_MEDIA_TYPE, &d), (WASM_LAYER_MEDIA_TYPE, &d)]),
        )
        .unwrap_err();
        assert!(error.to_string().contains("several"), "{error}");
        let error = wasm_layer(&reference(), b"{").unwrap_err();
        assert_eq!(error.kind(), "not-a-component");
    }

    #[test]
    fn the_manifest_oras_push_writes_is_a_component() {
        // As `oras push --config config.json:application/vnd.wasm.config.v0+json
        // policy.wasm:application/wasm` (ORAS 1.3) writes it: annotations on
        // the manifest and the layer (its file name).
        let manifest = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
            "config":{"mediaType":"application/vnd.wasm.config.v0+json","digest":"sha256:7fea23c43c61fb0100860a48c591a3fbc11f296bd4913938352505079a99f00d","size":128},
            "layers":[{"mediaType":"application/wasm","digest":"sha256:dbf76a3da149cee1c4322b555fcdfecd9048180dbdff3cd0e3c80f421acf38a6","size":482021,
                "annotations":{"org.opencontainers.image.title":"policy.wasm"}}],
            "annotations":{"org.opencontainers.image.created":"2026-12-01T07:24:26Z"}}"#;
        let layer = wasm_layer(&reference(), manifest).unwrap();
        assert_eq!(
            layer.digest,
            "sha256:dbf76a3da149cee1c4322b555fcdfecd9048180dbdff3cd0e3c80f421acf38a6"
        );
        assert_eq!(layer.size, 482021);
    }

    #[test]
    fn digests_and_sizes_are_checked() {
        let error = check_digest("the layer", &sha256(b"a"), b"b").unwrap_err();
        assert_eq!(error.kind(), "digest-mismatch");
        assert!(error.to_string().contains(&sha256(b"b")), "{error}");
        check_digest("the layer", &sha256(b"a"), b"a").unwrap();
        let error = check_size(&reference(), 11, 10).unwrap_err();
        assert_eq!(error.kind(), "too-large");
        assert!(
            error.to_string().contains("over the limit of 10"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn the_capped_sink_stops_past_its_limit() {
        use tokio::io::AsyncWriteExt;
        let mut sink = Capped::new(4);
        sink.write_all(b"abcd").await.unwrap();
        assert!(sink.write_all(b"e").await.is_err());
        assert!(sink.over);
        assert_eq!(sink.seen, 5);
    }

    #[tokio::test]
    async fn a_cached_component_is_served_without_a_registry() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(Some(dir.path().to_path_buf()));
        let layer = sha256(b"abc");
        let body = manifest(&[(WASM_LAYER_MEDIA_TYPE, &layer)]);
        let digest = sha256(&body);
        cache.keep(Kind::Manifest, &digest, &body);
        cache.keep(Kind::Blob, &layer, b"abc");
        // Port 9 (discard) on a name that never resolves: any network use fails.
        let reference =
            ComponentRef::parse_pinned(&format!("oci://unreachable.invalid:9/p@{digest}")).unwrap();
        let pulled = pull(&reference, &Access::default(), 1024, &cache)
            .await
            .unwrap();
        assert_eq!(pulled.wasm.as_slice(), b"abc");
        assert_eq!(pulled.from, "disk");
        let again = pull(&reference, &Access::default(), 1024, &cache)
            .await
            .unwrap();
        assert_eq!(again.from, "memory");
        let error = pull(&reference, &Access::default(), 2, &cache)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), "too-large");
    }
}
