//! Host bindings of the `wasmgpu:policy` world, generated from `wit/`.
#![allow(missing_docs, clippy::all)]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "policy",
    additional_derives: [
        serde::Serialize,
        serde::Deserialize,
        schemars::JsonSchema,
        PartialEq,
        Eq,
    ],
});
