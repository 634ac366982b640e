//! A node's labels in files: a map, as Kubernetes writes labels, for the
//! list of `(key, value)` pairs sorted by key that the WIT carries.

use std::collections::BTreeMap;

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serializer};

/// Writes the pairs as a map, in their order.
pub(crate) fn serialize<S: Serializer>(
    labels: &[(String, String)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(labels.len()))?;
    for (key, value) in labels {
        map.serialize_entry(key, value)?;
    }
    map.end()
}

/// Reads a map into pairs sorted by key.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<(String, String)>, D::Error> {
    Ok(BTreeMap::<String, String>::deserialize(deserializer)?
        .into_iter()
        .collect())
}
