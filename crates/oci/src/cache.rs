//! Pulled components, kept by digest: in memory (the components of the
//! last few pulls) and on disk (`<dir>/manifests/sha256/<hex>` and
//! `<dir>/blobs/sha256/<hex>`: apart, so that a digest asked for as a
//! manifest is never answered by a layer). A file read from disk is hashed
//! again before use: a corrupted or altered file is dropped and pulled anew.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::reference::sha256;

/// What a file on disk holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A manifest.
    Manifest,
    /// A layer (or config) blob.
    Blob,
}

/// How many components the memory cache keeps.
const MEMORY_ENTRIES: usize = 16;

/// Components by manifest digest, in memory and (optionally) on disk.
pub struct ComponentCache {
    dir: Option<PathBuf>,
    /// Manifest digest → component, most recent last.
    manifest_to_component: Mutex<VecDeque<(String, Arc<Vec<u8>>)>>,
}

// === impl ComponentCache ===

impl ComponentCache {
    /// A cache in memory and, when `dir` is given, on disk under it.
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            manifest_to_component: Mutex::new(VecDeque::new()),
        }
    }

    /// The disk directory, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The component of manifest `digest`, if in memory.
    pub fn component(&self, digest: &str) -> Option<Arc<Vec<u8>>> {
        let entries = wasmgpu_support::lock(&self.manifest_to_component);
        entries
            .iter()
            .find(|(d, _)| d == digest)
            .map(|(_, wasm)| Arc::clone(wasm))
    }

    /// Keeps `wasm` in memory as the component of manifest `digest`.
    pub fn keep_component(&self, digest: &str, wasm: Arc<Vec<u8>>) {
        let mut entries = wasmgpu_support::lock(&self.manifest_to_component);
        entries.retain(|(d, _)| d != digest);
        if entries.len() >= MEMORY_ENTRIES {
            entries.pop_front();
        }
        entries.push_back((digest.to_string(), wasm));
    }

    fn path(&self, kind: Kind, digest: &str) -> Option<PathBuf> {
        let hex = digest.strip_prefix("sha256:")?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let kind = match kind {
            Kind::Manifest => "manifests",
            Kind::Blob => "blobs",
        };
        Some(self.dir.as_ref()?.join(kind).join("sha256").join(hex))
    }

    /// The manifest or blob of `digest` from disk, if there and intact.
    pub fn get(&self, kind: Kind, digest: &str) -> Option<Vec<u8>> {
        let path = self.path(kind, digest)?;
        let bytes = std::fs::read(&path).ok()?;
        if sha256(&bytes) != digest {
            tracing::warn!(path = %path.display(), %digest, "Dropping a cached blob whose content does not match its digest");
            let _ = std::fs::remove_file(&path);
            return None;
        }
        Some(bytes)
    }

    /// Writes a manifest or blob whose digest the caller checked. A failure
    /// is logged, not returned: the cache is an optimisation.
    pub fn keep(&self, kind: Kind, digest: &str, bytes: &[u8]) {
        let Some(path) = self.path(kind, digest) else {
            return;
        };
        let result = (|| {
            let parent = path.parent().expect("a blob path has a parent");
            std::fs::create_dir_all(parent)?;
            // Written whole under a temporary name, then renamed: a reader
            // never sees half a blob.
            let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(error) = result {
            tracing::warn!(path = %path.display(), %error, "Cannot write to the component cache");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_round_trip_and_altered_ones_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(Some(dir.path().to_path_buf()));
        let digest = sha256(b"component");
        assert!(cache.get(Kind::Blob, &digest).is_none());
        cache.keep(Kind::Blob, &digest, b"component");
        assert_eq!(
            cache.get(Kind::Blob, &digest).as_deref(),
            Some(&b"component"[..])
        );
        // A blob is no manifest.
        assert!(cache.get(Kind::Manifest, &digest).is_none());
        let path = cache.path(Kind::Blob, &digest).unwrap();
        std::fs::write(&path, b"tampered").unwrap();
        assert!(cache.get(Kind::Blob, &digest).is_none());
        assert!(!path.exists(), "the altered blob is removed");
        // Names that are not digests never become paths.
        assert!(cache.path(Kind::Blob, "sha256:../../etc/passwd").is_none());
    }

    #[test]
    fn memory_keeps_the_latest_components() {
        let cache = ComponentCache::new(None);
        for i in 0..=MEMORY_ENTRIES {
            cache.keep_component(&format!("d{i}"), Arc::new(vec![i as u8]));
        }
        assert!(cache.component("d0").is_none(), "the oldest is evicted");
        assert_eq!(
            cache.component(&format!("d{MEMORY_ENTRIES}")).as_deref(),
            Some(&vec![MEMORY_ENTRIES as u8])
        );
        // Without a directory, blobs are not kept.
        cache.keep(Kind::Blob, &sha256(b"x"), b"x");
        assert!(cache.get(Kind::Blob, &sha256(b"x")).is_none());
    }
}
