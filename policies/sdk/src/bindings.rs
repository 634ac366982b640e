//! The `wasmgpu:policy` world, generated from `wit/policy.wit`.
//!
//! Policies normally use the re-exports at the crate root instead.

wit_bindgen::generate!({
    world: "policy",
    path: "../../wit",
    pub_export_macro: true,
    export_macro_name: "__export_wasmgpu_policy_world",
    default_bindings_module: "wasmgpu_policy_sdk::bindings",
    runtime_path: "wasmgpu_policy_sdk::__wit_bindgen::rt",
    // The contract's types are `wasmgpu_contract`'s, shared with the host.
    with: { "wasmgpu:policy/types@0.3.0": wasmgpu_contract::types },
});
