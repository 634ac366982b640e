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

/// A gang `name` of the pending requests at `members` (positions); see
/// [`wasmgpu_policy_sdk::testing::gang`].
pub(crate) fn gang(
    snapshot: &mut crate::engine::types::Snapshot,
    name: &str,
    min_member: u32,
    members: &[u32],
) {
    let mut sdk: wasmgpu_policy_sdk::Snapshot = convert(&*snapshot);
    wasmgpu_policy_sdk::testing::gang(&mut sdk, name, min_member, members);
    *snapshot = convert(&sdk);
}

/// Any JSON value, nested a few levels: objects get keys from `keys` as
/// well as arbitrary ones, so that some values reach past the first field.
pub(crate) fn arbitrary_json(
    keys: &'static [&'static str],
) -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        Just(Value::from(0)),
        ".{0,12}".prop_map(Value::from),
    ];
    let key =
        prop_oneof![3 => proptest::sample::select(keys).prop_map(str::to_owned), 1 => ".{0,6}"];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(key.clone(), inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
