//! Older snapshot-file forms rewritten into today's, as JSON values: the
//! first form (contract 0.2, snake_case keys, labels as pairs) into 0.2's
//! camelCase form, and 0.2 into 0.3. What 0.3 adds and 0.2 never said
//! (running pods, tenants) starts empty; 0.2's `usage` is dropped (0.3
//! carries the running pods it was counted from).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// Rewrites a file of the first form into 0.2's camelCase form, in place:
/// keys to camelCase, each node's labels from pairs to a map, sharing values
/// to lower case. False (and nothing changed) when `value` is not of the
/// first form. The policy's `config` is a string and stays as it is.
pub(crate) fn first_form_to_previous(value: &mut Value) -> bool {
    let first_form = value.as_object().is_some_and(|top| {
        ["mig_profiles", "eligible_sets"]
            .iter()
            .any(|key| top.contains_key(*key))
    });
    if !first_form {
        return false;
    }
    fn camel(key: &str) -> String {
        let mut out = String::with_capacity(key.len());
        let mut upper = false;
        for c in key.chars() {
            if c == '_' {
                upper = true;
            } else if upper {
                out.extend(c.to_uppercase());
                upper = false;
            } else {
                out.push(c);
            }
        }
        out
    }
    fn walk(value: &mut Value) {
        match value {
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (key, mut inner) in entries {
                    match (key.as_str(), &mut inner) {
                        ("labels", Value::Array(pairs)) => {
                            let labels = pairs
                                .iter()
                                .filter_map(|pair| match pair.as_array().map(Vec::as_slice) {
                                    Some([Value::String(k), v]) => Some((k.clone(), v.clone())),
                                    _ => None,
                                })
                                .collect::<Map<_, _>>();
                            inner = Value::Object(labels);
                        }
                        ("sharing", Value::String(sharing)) => *sharing = sharing.to_lowercase(),
                        ("config", _) => {}
                        _ => walk(&mut inner),
                    }
                    let mut key = camel(&key);
                    if let Some(stem) = key.strip_suffix("Mib") {
                        key = format!("{stem}MiB");
                    }
                    map.insert(key, inner);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(value);
    true
}

/// Rewrites a 0.2 file (camelCase) into 0.3, in place: namespaces become a
/// table the pods index; a request's shape moves into `ask.gpus` and its
/// `resource` goes; a GPU's `nvlinkPeers` (positions) become `nvlink` (the
/// peers' indices); `usage` goes; the contract named becomes this one.
pub(crate) fn previous_to_current(value: &mut Value) {
    let Some(top) = value.as_object_mut() else {
        return;
    };
    if top.contains_key("contract") {
        top.insert("contract".into(), json!(crate::bounds::CONTRACT));
    }
    top.remove("usage");
    if let Some(Value::Array(nodes)) = top.get_mut("nodes") {
        for node in nodes {
            let Some(Value::Array(gpus)) = node.get_mut("gpus") else {
                continue;
            };
            let indices: Vec<Value> = gpus
                .iter()
                .map(|g| g.get("index").cloned().unwrap_or(Value::Null))
                .collect();
            for gpu in gpus.iter_mut() {
                let Some(gpu) = gpu.as_object_mut() else {
                    continue;
                };
                if let Some(Value::Array(peers)) = gpu.remove("nvlinkPeers") {
                    let linked: Vec<Value> = peers
                        .iter()
                        .filter_map(|p| p.as_u64().and_then(|p| indices.get(p as usize)))
                        .cloned()
                        .collect();
                    gpu.insert("nvlink".into(), Value::Array(linked));
                }
            }
        }
    }
    let mut namespaces = BTreeSet::new();
    if let Some(Value::Array(pending)) = top.get("pending") {
        for request in pending {
            if let Some(Value::String(ns)) = request.get("namespace") {
                namespaces.insert(ns.clone());
            }
        }
    }
    let table: Vec<String> = namespaces.into_iter().collect();
    if let Some(Value::Array(pending)) = top.get_mut("pending") {
        for request in pending {
            let Some(request) = request.as_object_mut() else {
                continue;
            };
            if let Some(Value::String(ns)) = request.get("namespace") {
                let at = table.binary_search(ns).unwrap_or_default();
                request.insert("namespace".into(), json!(at));
            }
            request.remove("resource");
            let mut shape = Map::new();
            for key in ["count", "model", "migProfile", "memoryMiB", "sharing"] {
                if let Some(v) = request.remove(key) {
                    shape.insert(key.into(), v);
                }
            }
            request.insert("ask".into(), json!({ "gpus": shape }));
        }
    }
    top.insert("namespaces".into(), json!(table));
}
