//! The CRDs checked in under `deploy/crds/` are what the Rust types generate,
//! and they are structural schemas the API server accepts.

use std::path::PathBuf;

use serde_json::Value;
use wasmgpu::api;

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds")
}

#[test]
fn checked_in_crds_match_the_types() {
    if let Err(drift) = api::check_dir(&crd_dir()) {
        panic!("{drift}");
    }
}

#[test]
fn drift_is_reported_with_the_fix() {
    let dir = std::env::temp_dir().join(format!("wasmgpu-crds-{}", std::process::id()));
    api::write_dir(&dir).expect("write");
    api::check_dir(&dir).expect("fresh files match");
    std::fs::write(dir.join("gpunodes.wasmgpu.io.yaml"), "stale").unwrap();
    let drift = api::check_dir(&dir).expect_err("drift");
    assert_eq!(drift.files, ["gpunodes.wasmgpu.io.yaml"]);
    assert!(drift.to_string().contains("wasmgpu crd --write"), "{drift}");
    std::fs::remove_dir_all(dir).ok();
}

/// The `openAPIV3Schema` of a CRD, as JSON.
fn schema(kind: &str) -> Value {
    let crd = api::crds()
        .into_iter()
        .find(|crd| crd.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    let version = &crd.spec.versions[0];
    serde_json::to_value(&version.schema.as_ref().unwrap().open_api_v3_schema).unwrap()
}

/// Structural schema rules (a subset): every node has a `type` unless it
/// preserves unknown fields or is int-or-string; no `$ref`, no `oneOf`/
/// `anyOf`/`allOf` carrying types, no `additionalProperties` beside `properties`.
fn check_structural(path: &str, node: &Value, problems: &mut Vec<String>) {
    let Some(object) = node.as_object() else {
        return;
    };
    let exempt = object.contains_key("x-kubernetes-preserve-unknown-fields")
        || object.contains_key("x-kubernetes-int-or-string");
    if !exempt && !object.contains_key("type") {
        problems.push(format!("{path}: no type"));
    }
    for forbidden in ["$ref", "oneOf", "anyOf", "allOf", "not"] {
        if object.contains_key(forbidden) {
            problems.push(format!("{path}: {forbidden}"));
        }
    }
    if object.contains_key("properties") && object.contains_key("additionalProperties") {
        problems.push(format!("{path}: properties and additionalProperties"));
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            check_structural(&format!("{path}.{name}"), child, problems);
        }
    }
    if let Some(items) = object.get("items") {
        check_structural(&format!("{path}[]"), items, problems);
    }
    if let Some(additional) = object.get("additionalProperties").filter(|v| v.is_object()) {
        check_structural(&format!("{path}{{}}"), additional, problems);
    }
}

#[test]
fn schemas_are_structural() {
    for kind in ["GPUResource", "GPUNode", "GPUTenant"] {
        let mut problems = Vec::new();
        check_structural(kind, &schema(kind), &mut problems);
        assert!(problems.is_empty(), "{kind}: {problems:#?}");
    }
}

#[test]
fn gpuresource_schema_enforces_what_it_can() {
    let schema = schema("GPUResource");
    let spec = &schema["properties"]["spec"];
    let count = &spec["properties"]["count"];
    assert_eq!(
        (count["minimum"].as_f64(), count["maximum"].as_f64()),
        (Some(1.0), Some(16.0))
    );
    assert_eq!(
        spec["properties"]["memoryMiB"]["minimum"].as_f64(),
        Some(0.0)
    );
    assert_eq!(spec["properties"]["model"]["minLength"], 1);
    assert_eq!(
        spec["properties"]["sharing"]["enum"],
        serde_json::json!(["Exclusive", "Shared"])
    );
    assert_eq!(spec["properties"]["sharing"]["default"], "Exclusive");
    let rules = spec["x-kubernetes-validations"]
        .as_array()
        .expect("CEL rules on spec");
    assert!(
        rules
            .iter()
            .any(|r| r["rule"].as_str().unwrap().contains("memoryMiB > 0"))
    );
    let conditions = &schema["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
}

#[test]
fn crds_have_names_scopes_and_columns() {
    let crds = api::crds();
    let gpur = &crds[0];
    assert_eq!(
        gpur.metadata.name.as_deref(),
        Some("gpuresources.wasmgpu.io")
    );
    assert_eq!(gpur.spec.scope, "Namespaced");
    assert_eq!(
        gpur.spec.names.short_names.as_deref(),
        Some(&["gpur".to_string()][..])
    );
    let gpun = &crds[1];
    assert_eq!(gpun.metadata.name.as_deref(), Some("gpunodes.wasmgpu.io"));
    assert_eq!(gpun.spec.scope, "Cluster");
    let gput = &crds[2];
    assert_eq!(gput.metadata.name.as_deref(), Some("gputenants.wasmgpu.io"));
    assert_eq!(gput.spec.scope, "Cluster");
    assert_eq!(
        gput.spec.names.short_names.as_deref(),
        Some(&["gput".to_string()][..])
    );
    for crd in &crds {
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert!(columns.contains(&"Age"), "{columns:?}");
    }
}

#[test]
fn wasmgpu_crd_prints_every_crd_and_writes_a_directory() {
    let binary = env!("CARGO_BIN_EXE_wasmgpu");
    let output = std::process::Command::new(binary)
        .arg("crd")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let names: Vec<String> = serde_norway::Deserializer::from_str(&text)
        .map(|doc| {
            let crd = <serde_json::Value as serde::Deserialize>::deserialize(doc).unwrap();
            crd["metadata"]["name"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        names,
        [
            "gpuresources.wasmgpu.io",
            "gpunodes.wasmgpu.io",
            "gputenants.wasmgpu.io"
        ]
    );

    let dir = std::env::temp_dir().join(format!("wasmgpu-crd-cli-{}", std::process::id()));
    let status = std::process::Command::new(binary)
        .args(["crd", "--write"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(status.success());
    api::check_dir(&dir).expect("what --write wrote matches");
    std::fs::remove_dir_all(dir).ok();
}

/// Every `format` in a schema, with its path.
fn formats(path: &str, node: &Value, found: &mut Vec<(String, String)>) {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(format)) = map.get("format") {
                found.push((path.to_string(), format.clone()));
            }
            for (key, child) in map {
                formats(&format!("{path}.{key}"), child, found);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                formats(&format!("{path}[{i}]"), child, found);
            }
        }
        _ => {}
    }
}

#[test]
fn every_format_is_one_the_api_server_knows() {
    // The formats kube-openapi validates (anything else draws a warning
    // such as `unrecognized format "uint32"` when the CRD is applied).
    const KNOWN: &[&str] = &[
        "int32",
        "int64",
        "float",
        "double",
        "byte",
        "binary",
        "date",
        "date-time",
        "duration",
        "password",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
    ];
    for kind in ["GPUResource", "GPUNode", "GPUTenant"] {
        let mut found = Vec::new();
        formats(kind, &schema(kind), &mut found);
        assert!(!found.is_empty(), "{kind} has integer fields with formats");
        let unknown: Vec<_> = found
            .iter()
            .filter(|(_, format)| !KNOWN.contains(&format.as_str()))
            .collect();
        assert!(
            unknown.is_empty(),
            "{kind}: formats the API server does not know: {unknown:?}"
        );
    }
}

#[test]
fn gputenant_schema_refuses_a_quota_above_the_limit_and_no_namespaces() {
    let schema = schema("GPUTenant");
    let spec = &schema["properties"]["spec"];
    // Globs, a selector, or both: one of them, by a rule.
    assert!(spec.get("required").is_none(), "{}", spec["required"]);
    assert_eq!(spec["properties"]["namespaces"]["maxItems"], 64);
    assert!(spec["properties"]["namespaceSelector"]["properties"]["matchLabels"].is_object());
    assert_eq!(spec["properties"]["weight"]["minimum"].as_f64(), Some(1.0));
    let rules = spec["x-kubernetes-validations"]
        .as_array()
        .expect("CEL rules on spec");
    assert!(rules.iter().any(|r| {
        r["rule"]
            .as_str()
            .unwrap()
            .contains("self.quota <= self.limit")
    }));
    assert!(rules.iter().any(|r| {
        r["rule"]
            .as_str()
            .unwrap()
            .contains("has(self.namespaceSelector)")
            && r["message"].as_str().unwrap().contains("namespaceSelector")
    }));
}
