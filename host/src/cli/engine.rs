//! The command line's policy engine: the controller's limits and sandbox,
//! plus compiled components kept on disk between calls (see
//! `wasmgpu policy --help`).

use std::path::PathBuf;

use wasmgpu_engine::{Engine, Limits};

/// The command line's engine: `limits`, and compiled components kept on
/// disk between calls (see `wasmgpu policy --help`), unless
/// `WASMGPU_COMPILE_CACHE=off`. A cache that cannot be used is said once and
/// skipped: it costs only time.
pub(crate) fn cli_engine(limits: Limits) -> anyhow::Result<Engine> {
    let mut engine = Engine::new(limits)?;
    if std::env::var_os("WASMGPU_COMPILE_CACHE").is_some_and(|v| v == "off") {
        return Ok(engine);
    }
    if let Err(error) = engine.use_disk_cache(&compile_cache_dir()) {
        eprintln!("warning: compiling without a cache: {error}");
    }
    Ok(engine)
}

/// `$WASMGPU_CACHE_DIR/compiled`, else `$XDG_CACHE_HOME/wasmgpu/compiled`,
/// else `~/.cache/wasmgpu/compiled` (the build scripts' cache root).
fn compile_cache_dir() -> PathBuf {
    let env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let root = env("WASMGPU_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("wasmgpu")))
        .or_else(|| env("HOME").map(|d| d.join(".cache/wasmgpu")))
        .unwrap_or_else(|| std::env::temp_dir().join("wasmgpu-cache"));
    root.join("compiled")
}
