//! Compiled components kept on disk between processes, for the command line:
//! `wasmgpu policy check|run|compare|bench` of an 18 MB interpreted component
//! would otherwise compile it again on every call.
//!
//! An entry is `<sha256 of the component>-<engine compatibility hash>.cwasm`:
//! the component's bytes and everything about the engine that makes compiled
//! code valid for it (wasmtime's version, the target, every setting that
//! changes code: fuel, epochs, ...), so a file is only ever read by an engine
//! that could have written it. A file that does not load (torn, truncated,
//! from another build) is compiled again and replaced. The directory is made
//! readable by its owner only; at most [`ENTRIES`] files are kept, the least
//! recently used go first.
//!
//! The controller never uses it: it compiles in memory (its cache is
//! [`crate::Engine`]'s).

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use wasmtime::component::Component;

use crate::policy::Digest;

/// Files kept; more are removed, oldest use first.
const ENTRIES: usize = 32;

pub(crate) struct DiskCache {
    dir: PathBuf,
    /// The engine's compatibility hash, in hex.
    engine: String,
}

impl DiskCache {
    /// A cache in `dir` (created, owner-only) for components compiled by `engine`.
    pub(crate) fn open(dir: &Path, engine: &wasmtime::Engine) -> std::io::Result<DiskCache> {
        fs::create_dir_all(dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        }
        // `DefaultHasher::new()` has fixed keys: the same engine gives the
        // same name in every process of this build.
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(DiskCache {
            dir: dir.to_owned(),
            engine: format!("{:016x}", hasher.finish()),
        })
    }

    fn path(&self, digest: &Digest) -> PathBuf {
        let hex = digest.as_str().trim_start_matches("sha256:");
        self.dir.join(format!("{hex}-{}.cwasm", self.engine))
    }

    /// The component compiled earlier for `digest`, when a usable file is there.
    #[allow(unsafe_code)]
    pub(crate) fn load(&self, engine: &wasmtime::Engine, digest: &Digest) -> Option<Component> {
        let path = self.path(digest);
        // Read, not mapped: a file changed in place while mapped would
        // fault the process; a copy in memory cannot change under it.
        let bytes = fs::read(&path).ok()?;
        // SAFETY: `deserialize` runs the machine code in `bytes`, so they
        // must be what `Component::serialize` wrote for this engine. Only
        // `store` below writes here (whole files, renamed into place),
        // under a name that carries the component's digest and the engine's
        // compatibility hash; wasmtime itself refuses bytes of another
        // version or configuration, and the directory is its owner's only.
        // Whoever could write to it could already run code as that user.
        let component = unsafe { Component::deserialize(engine, &bytes) }.ok();
        if component.is_some() {
            // Touch it: eviction goes by last use.
            let _ = fs::File::options()
                .append(true)
                .open(&path)
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        }
        component
    }

    /// Keeps `component` (compiled from `digest`'s bytes) for later
    /// processes. Best effort: a cache that cannot be written costs only time.
    pub(crate) fn store(&self, digest: &Digest, component: &Component) {
        let Ok(bytes) = component.serialize() else {
            return;
        };
        let path = self.path(digest);
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        let written = fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()))
            .and_then(|()| fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        self.prune();
    }

    /// Removes the least recently used entries beyond [`ENTRIES`].
    fn prune(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        if files.len() <= ENTRIES {
            return;
        }
        files.sort();
        for (_, path) in &files[..files.len() - ENTRIES] {
            let _ = fs::remove_file(path);
        }
    }
}
