//! Strategies for property tests of what reads files and API objects
//! (feature `testing`).

/// Any JSON value, nested a few levels: objects get keys from `keys` as
/// well as arbitrary ones, so that some values reach past the first field.
pub fn arbitrary_json(
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
