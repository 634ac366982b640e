//! Test fixtures: the SDK's snapshot builders, converted to the host's types.

use serde::Serialize;
use serde::de::DeserializeOwned;

pub(crate) use wasmgpu_policy_sdk::testing::{node, request, snapshot as sdk_snapshot};

/// Converts between the SDK's and the host's copy of a contract type (they
/// are generated from the same WIT, so their serde forms are identical).
pub(crate) fn convert<T: Serialize, U: DeserializeOwned>(value: &T) -> U {
    serde_json::from_value(serde_json::to_value(value).expect("serialize")).expect("same shape")
}

/// [`wasmgpu_policy_sdk::testing::snapshot`], as a host snapshot.
pub(crate) fn snapshot(
    nodes: Vec<wasmgpu_policy_sdk::Node>,
    pending: Vec<wasmgpu_policy_sdk::Request>,
) -> crate::engine::types::Snapshot {
    convert(&sdk_snapshot(nodes, pending))
}

/// Restricts pending request `pod` (by position) to `nodes`, through a new
/// eligible set.
pub(crate) fn restrict(snapshot: &mut crate::engine::types::Snapshot, pod: usize, nodes: &[u32]) {
    snapshot.eligible_sets.push(nodes.to_vec());
    snapshot.pending[pod].eligible_set = (snapshot.eligible_sets.len() - 1) as u32;
}
