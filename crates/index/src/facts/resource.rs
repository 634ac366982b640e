//! What the index keeps of a `GPUResource`.

use wasmgpu_api::{Allocation, GPUResource, GPUResourceSpec, InvalidSpec};

use crate::key::ObjectKey;

/// What the index keeps of a GPUResource.
#[derive(Clone, Debug)]
pub(crate) struct ResourceState {
    pub spec: GPUResourceSpec,
    /// Why the spec is unusable, if it is.
    pub spec_error: Option<InvalidSpec>,
    /// The ledger earlier versions kept (`status.allocations`).
    pub allocations: Vec<Allocation>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `metadata.finalizers`.
    pub finalizers: Vec<String>,
}

impl ResourceState {
    /// The state of `resource`, its spec checked (`spec_error`).
    pub fn of(resource: &GPUResource, spec_error: Option<InvalidSpec>) -> Self {
        let meta = &resource.metadata;
        ResourceState {
            spec: resource.spec.clone(),
            spec_error,
            allocations: resource
                .status
                .as_ref()
                .map(|status| status.allocations.clone())
                .unwrap_or_default(),
            uid: meta.uid.clone(),
            generation: meta.generation,
            resource_version: meta.resource_version.clone(),
            deleting: meta.deletion_timestamp.is_some(),
            finalizers: meta.finalizers.clone().unwrap_or_default(),
        }
    }
}

/// `namespace/name` of a GPUResource, when it has both.
pub(crate) fn resource_key(resource: &GPUResource) -> Option<ObjectKey> {
    let meta = &resource.metadata;
    Some(ObjectKey::new(
        meta.namespace.as_deref()?,
        meta.name.as_deref()?,
    ))
}

/// Whether a delivered version comes before the `written` one. Versions are
/// opaque to clients, but the API server's are increasing integers: compared
/// as such, a newer version (e.g. the delete after a write that changed
/// nothing, whose version the watch never delivers again) ends the wait.
/// Versions that are not integers end the wait only when equal.
pub(crate) fn is_older(delivered: Option<&str>, written: &str) -> bool {
    match (delivered.map(str::parse::<u64>), written.parse::<u64>()) {
        (Some(Ok(delivered)), Ok(written)) => delivered < written,
        _ => delivered != Some(written),
    }
}
