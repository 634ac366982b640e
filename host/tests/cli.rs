//! The `wasmgpu policy` command line, run as a user would run it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::policy_dir;
use wasmgpu::engine::types::Snapshot;

fn wasmgpu(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(args)
        .output()
        .expect("run wasmgpu")
}

fn policy(name: &str) -> String {
    policy_dir()
        .join(format!("wasmgpu_{name}.wasm"))
        .to_string_lossy()
        .into_owned()
}

fn repo(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
        .to_string_lossy()
        .into_owned()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmgpu-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn check_describes_a_policy_and_explains_what_is_not_one() {
    let out = wasmgpu(&["policy", "check", &policy("binpack"), "--output", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["name"], "binpack");
    assert!(json["digest"].as_str().unwrap().starts_with("sha256:"));
    assert!(
        json["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i == "log")
    );

    assert_check_refuses(&repo("Cargo.toml"), "not a WebAssembly binary");
    let core = temp_file("core.wasm", &wat::parse_str("(module)").unwrap());
    assert_check_refuses(
        core.to_str().unwrap(),
        "core WebAssembly module, not a component",
    );
    let wrong = temp_file("wrong.wasm", &wat::parse_str("(component)").unwrap());
    assert_check_refuses(
        wrong.to_str().unwrap(),
        "not a wasmgpu:policy@0.1.0 component",
    );
}

/// `wasmgpu policy check FILE` exits 1 and says `reason`.
fn assert_check_refuses(file: &str, reason: &str) {
    let out = wasmgpu(&["policy", "check", file]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains(reason), "{}", text(&out));
}

#[test]
fn run_prints_decisions_with_the_hosts_verdict() {
    let demo = repo("policies/snapshots/demo.json");
    let out = wasmgpu(&["policy", "run", &policy("binpack"), "--snapshot", &demo]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = text(&out);
    assert!(
        shown.contains("research/giant-0") && shown.contains("even when idle"),
        "{shown}"
    );
    assert!(shown.contains("valid") && shown.contains("fuel"), "{shown}");

    let out = wasmgpu(&[
        "policy",
        "run",
        &policy("spread"),
        "--snapshot",
        &demo,
        "--output",
        "json",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["policy"]["name"], "spread");
    assert_eq!(json["verdict"]["accepted"].as_array().unwrap().len(), 7);
    assert!(json["stats"]["fuelUsed"].as_u64().unwrap() > 0);
}

#[test]
fn refused_decisions_can_fail_the_command() {
    let demo = repo("policies/snapshots/demo.json");
    // The hostile policy reads its misbehaviour from the snapshot's config.
    let mut snapshot: Snapshot =
        serde_json::from_str(&std::fs::read_to_string(&demo).unwrap()).unwrap();
    snapshot.config = "ghost-gpu".into();
    let snap = temp_file(
        "ghost-snapshot.json",
        serde_json::to_string(&snapshot).unwrap().as_bytes(),
    );
    let args = [
        "policy",
        "run",
        &policy("hostile_policy"),
        "--snapshot",
        snap.to_str().unwrap(),
    ];
    let out = wasmgpu(&args);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("REFUSED: GPU GPU-does-not-exist-0 does not exist"),
        "{}",
        text(&out)
    );
    let out = wasmgpu(&[&args[..], &["--fail-on-refused"]].concat());
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_failing_policy_fails_the_command_with_the_typed_reason() {
    let demo = repo("policies/snapshots/demo.json");
    let mut snapshot: Snapshot =
        serde_json::from_str(&std::fs::read_to_string(&demo).unwrap()).unwrap();
    snapshot.config = "loop".into();
    let snap = temp_file(
        "loop-snapshot.json",
        serde_json::to_string(&snapshot).unwrap().as_bytes(),
    );
    let out = wasmgpu(&[
        "policy",
        "run",
        &policy("hostile_policy"),
        "--snapshot",
        snap.to_str().unwrap(),
        "--fuel",
        "1000000",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("ran out of fuel after 1000000 units"),
        "{}",
        text(&out)
    );

    let bad_config = temp_file("bad-config.json", br#"{"preferNVLink": true}"#);
    let out = wasmgpu(&[
        "policy",
        "run",
        &policy("binpack"),
        "--snapshot",
        &demo,
        "--config",
        bad_config.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("unknown field `preferNVLink`"),
        "{}",
        text(&out)
    );
}

#[test]
fn compare_shows_both_policies_side_by_side() {
    let demo = repo("policies/snapshots/demo.json");
    let out = wasmgpu(&[
        "policy",
        "compare",
        &policy("binpack"),
        &policy("spread"),
        "--snapshot",
        &demo,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = text(&out);
    let header = shown.lines().next().unwrap();
    assert!(
        header.contains("BINPACK") && header.contains("SPREAD"),
        "{shown}"
    );
    assert!(shown.contains("binpack  7/10"), "{shown}");
}

#[test]
fn bench_reports_median_and_p99_per_phase() {
    let demo = repo("policies/snapshots/demo.json");
    let out = wasmgpu(&[
        "policy",
        "bench",
        &policy("binpack"),
        "--snapshot",
        &demo,
        "--rounds",
        "5",
        "--output",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for phase in ["instantiate", "call", "validate", "round"] {
        assert!(
            json["phases"][phase]["medianMicros"].as_f64().unwrap() > 0.0,
            "{phase}"
        );
    }
}

#[test]
fn snapshot_schema_and_generated_snapshots_agree() {
    let out = wasmgpu(&["policy", "snapshot-schema"]);
    assert!(out.status.success());
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(schema["properties"]["pending"].is_object(), "{schema}");

    let path = std::env::temp_dir().join(format!("wasmgpu-gen-{}.json", std::process::id()));
    let out = wasmgpu(&[
        "policy",
        "generate-snapshot",
        "--nodes",
        "10",
        "--pods",
        "5",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let snapshot: Snapshot =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!((snapshot.nodes.len(), snapshot.pending.len()), (10, 5));
}

#[test]
fn the_documented_minimal_snapshot_is_valid() {
    let doc = std::fs::read_to_string(repo("docs/SNAPSHOTS.md")).unwrap();
    let json = doc
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a json block");
    let path = temp_file("minimal.json", json.as_bytes());
    let out = wasmgpu(&[
        "policy",
        "run",
        &policy("binpack"),
        "--snapshot",
        path.to_str().unwrap(),
        "--fail-on-refused",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("1 assigned"), "{}", text(&out));
}
