//! What the index keeps of a `GPUTenant`.

use wasmgpu_api::{GPUTenantSpec, InvalidSpec};

/// What the index keeps of a GPUTenant.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TenantFacts {
    pub spec: GPUTenantSpec,
    /// Why the spec is unusable, if it is.
    pub error: Option<InvalidSpec>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
}
