//! Shared helpers for the host's integration tests.
#![allow(dead_code)]

pub mod rbac;

use std::path::PathBuf;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Where `make policies` puts the compiled policy components.
pub fn policy_dir() -> PathBuf {
    match std::env::var_os("WASMGPU_POLICY_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wasm32-wasip2/policy"),
    }
}

/// The bytes of a compiled policy, e.g. `policy_bytes("binpack")`.
pub fn policy_bytes(name: &str) -> Vec<u8> {
    let file = format!("wasmgpu_{}.wasm", name.replace('-', "_"));
    let path = policy_dir().join(&file);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}): build the policies first with `make policies`",
            path.display()
        )
    })
}

/// Converts between the SDK's and the host's copy of a contract type.
pub fn convert<T: Serialize, U: DeserializeOwned>(value: &T) -> U {
    serde_json::from_value(serde_json::to_value(value).expect("serialize")).expect("same shape")
}
