//! A small JSON Schema (2020-12) validator for the keywords schemars
//! generates, so tests can hold a command's output to its published schema.
//! A keyword it does not know is an error, never silently passed.

use serde_json::Value;

/// Keywords that only describe (nothing to check).
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$defs",
    "title",
    "description",
    "default",
    "examples",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
];

/// Every way `value` breaks `schema`, as `path: what` lines (empty: valid).
pub fn errors(schema: &Value, value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    check(schema, schema, value, "$", &mut found);
    found
}

fn check(root: &Value, schema: &Value, value: &Value, path: &str, found: &mut Vec<String>) {
    let object = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => return found.push(format!("{path}: no value is allowed here")),
        Value::Object(object) => object,
        other => return found.push(format!("{path}: schema {other} is not a schema")),
    };
    for (keyword, rule) in object {
        match keyword.as_str() {
            "$ref" => {
                let target = rule
                    .as_str()
                    .and_then(|r| r.strip_prefix('#'))
                    .and_then(|pointer| root.pointer(pointer));
                match target {
                    Some(target) => check(root, target, value, path, found),
                    None => found.push(format!("{path}: unresolved $ref {rule}")),
                }
            }
            "type" => {
                let allowed: Vec<&str> = match rule {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                if !allowed.iter().any(|t| has_type(value, t)) {
                    found.push(format!("{path}: {value} is not of type {rule}"));
                }
            }
            "properties" => {
                if let (Some(properties), Some(fields)) = (rule.as_object(), value.as_object()) {
                    for (name, property) in properties {
                        if let Some(field) = fields.get(name) {
                            check(root, property, field, &format!("{path}.{name}"), found);
                        }
                    }
                }
            }
            "additionalProperties" => {
                if let Some(fields) = value.as_object() {
                    let known = object.get("properties").and_then(Value::as_object);
                    for (name, field) in fields {
                        if !known.is_some_and(|k| k.contains_key(name)) {
                            check(root, rule, field, &format!("{path}.{name}"), found);
                        }
                    }
                }
            }
            "required" => {
                if let Some(fields) = value.as_object() {
                    for name in rule.as_array().into_iter().flatten() {
                        let name = name.as_str().unwrap_or_default();
                        if !fields.contains_key(name) {
                            found.push(format!("{path}: required {name:?} is missing"));
                        }
                    }
                }
            }
            "items" => {
                for (i, item) in value.as_array().into_iter().flatten().enumerate() {
                    check(root, rule, item, &format!("{path}[{i}]"), found);
                }
            }
            "enum" => {
                if !rule
                    .as_array()
                    .is_some_and(|allowed| allowed.contains(value))
                {
                    found.push(format!("{path}: {value} is not one of {rule}"));
                }
            }
            "const" => {
                if rule != value {
                    found.push(format!("{path}: {value} is not {rule}"));
                }
            }
            "oneOf" | "anyOf" => {
                let matching = rule
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|s| errors_at(root, s, value, path).is_empty())
                    .count();
                let ok = if keyword == "oneOf" {
                    matching == 1
                } else {
                    matching >= 1
                };
                if !ok {
                    found.push(format!(
                        "{path}: {value} matches {matching} of the {keyword} schemas"
                    ));
                }
            }
            "allOf" => {
                for sub in rule.as_array().into_iter().flatten() {
                    check(root, sub, value, path, found);
                }
            }
            "minimum" => {
                if let (Some(min), Some(v)) = (rule.as_f64(), value.as_f64())
                    && v < min
                {
                    found.push(format!("{path}: {value} is less than {rule}"));
                }
            }
            "maximum" => {
                if let (Some(max), Some(v)) = (rule.as_f64(), value.as_f64())
                    && v > max
                {
                    found.push(format!("{path}: {value} is more than {rule}"));
                }
            }
            "format" => check_format(rule.as_str().unwrap_or_default(), value, path, found),
            other if ANNOTATIONS.contains(&other) => {}
            other => found.push(format!(
                "{path}: the schema uses {other:?}, not supported here"
            )),
        }
    }
}

fn errors_at(root: &Value, schema: &Value, value: &Value, path: &str) -> Vec<String> {
    let mut found = Vec::new();
    check(root, schema, value, path, &mut found);
    found
}

fn has_type(value: &Value, ty: &str) -> bool {
    match ty {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => false,
    }
}

fn check_format(format: &str, value: &Value, path: &str, found: &mut Vec<String>) {
    let fits = match format {
        "uint" | "uint64" => value.is_u64(),
        "uint32" => value.as_u64().is_some_and(|v| u32::try_from(v).is_ok()),
        "uint16" => value.as_u64().is_some_and(|v| u16::try_from(v).is_ok()),
        "uint8" => value.as_u64().is_some_and(|v| u8::try_from(v).is_ok()),
        "int" | "int64" => value.is_i64(),
        "int32" => value.as_i64().is_some_and(|v| i32::try_from(v).is_ok()),
        "double" | "float" => value.is_number(),
        "date-time" => value
            .as_str()
            .is_some_and(|t| t.parse::<k8s_openapi::jiff::Timestamp>().is_ok()),
        _ => {
            found.push(format!("{path}: format {format:?} is not supported here"));
            return;
        }
    };
    // `format` applies to values of its type only (a null is checked by `type`).
    if !fits && !value.is_null() {
        found.push(format!("{path}: {value} is not a {format}"));
    }
}
