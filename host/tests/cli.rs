//! The `wasmgpu policy` command line, run as a user would run it.

use wasmgpu_test_support as common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{json_schema, padded, policy_dir};
use serde_json::Value;
use wasmgpu_contract::HostSnapshot;

/// A snapshot file, read.
fn read_host(path: impl AsRef<std::path::Path>) -> HostSnapshot {
    let text = std::fs::read_to_string(path).unwrap();
    wasmgpu_contract::snapshot_file::read(&text)
        .unwrap()
        .snapshot
}

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
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
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
        &format!("not a {} component", wasmgpu_contract::CONTRACT),
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
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["policy"]["name"], "spread");
    assert_eq!(json["summary"]["assigned"], 7);
    assert!(json["stats"]["fuelUsed"].as_u64().unwrap() > 0);
    let decisions = json["decisions"].as_array().unwrap();
    let assign = decisions.iter().find(|d| d["kind"] == "assign").unwrap();
    assert!(
        assign["pod"].is_string() && assign["node"].is_string() && assign["gpus"].is_array(),
        "{assign}"
    );
    assert_eq!(assign["verdict"], "valid");
    let wait = decisions.iter().find(|d| d["kind"] == "wait").unwrap();
    assert!(wait["reason"].is_string(), "{wait}");
}

#[test]
fn run_shows_gangs_and_what_each_namespace_holds_and_gets() {
    use wasmgpu::engine::types::Gang;
    let demo = repo("policies/snapshots/demo.json");
    let mut host = read_host(&demo);
    let snapshot = &mut host.snapshot;
    let of = |namespace: &str| -> Vec<u32> {
        let positions = snapshot.pending.iter().enumerate();
        positions
            .filter(|(_, r)| snapshot.namespace(r.namespace) == namespace)
            .map(|(i, _)| i as u32)
            .collect()
    };
    // Every ml pod in one gang that needs more members than exist: held back.
    let ml = of("ml");
    assert!(!ml.is_empty());
    for &i in &ml {
        snapshot.pending[i as usize].gang = Some(0);
    }
    snapshot.gangs.push(Gang {
        name: "ml/too-big".into(),
        min_member: ml.len() as u32 + 1,
        bound: 0,
        pending: ml.clone(),
        running: Vec::new(),
    });
    let snap = temp_file(
        "gang-snapshot.json",
        wasmgpu_contract::snapshot_file::to_json(&host)
            .unwrap()
            .as_bytes(),
    );
    let args = [
        "policy",
        "run",
        &policy("binpack"),
        "--snapshot",
        snap.to_str().unwrap(),
    ];
    let out = wasmgpu(&args);
    assert!(out.status.success(), "{}", text(&out));
    let shown = text(&out);
    assert!(
        shown.contains("GANG") && shown.contains("ml/too-big") && shown.contains("NAMESPACE"),
        "{shown}"
    );

    let out = wasmgpu(&[&args[..], &["--output", "json"]].concat());
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let gang = &json["gangs"][0];
    assert_eq!(gang["name"], "ml/too-big", "{gang}");
    assert_eq!(gang["placed"], 0, "{gang}");
    assert_eq!(gang["pending"], ml.len(), "{gang}");
    let namespaces = json["namespaces"].as_array().unwrap();
    let ns = |name: &str| {
        namespaces
            .iter()
            .find(|n| n["namespace"] == name)
            .unwrap_or_else(|| panic!("no {name} in {namespaces:?}"))
    };
    assert_eq!(ns("ml")["gpusPlaced"], 0, "{namespaces:?}");
    assert!(
        ns("research")["gpusPlaced"].as_u64().unwrap() > 0,
        "{namespaces:?}"
    );
    assert_eq!(ns("ml")["pending"], ml.len(), "{namespaces:?}");
}

#[test]
fn refused_decisions_can_fail_the_command() {
    let demo = repo("policies/snapshots/demo.json");
    // The hostile policy reads its misbehaviour from the snapshot's config.
    let mut host = read_host(&demo);
    let snapshot = &mut host.snapshot;
    snapshot.config = "ghost-gpu".into();
    let snap = temp_file(
        "ghost-snapshot.json",
        wasmgpu_contract::snapshot_file::to_json(&host)
            .unwrap()
            .as_bytes(),
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
        text(&out).contains("REFUSED: node \"gpu-h100-0\" has no GPU at position 1000"),
        "{}",
        text(&out)
    );
    let out = wasmgpu(&[&args[..], &["--fail-on-refused"]].concat());
    assert_eq!(out.status.code(), Some(2));

    let out = wasmgpu(&[&args[..], &["--output", "json"]].concat());
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["summary"]["refused"], 1);
    let refused = &json["decisions"][0];
    assert_eq!(refused["verdict"], "refused", "{refused}");
    assert_eq!(refused["refusal"]["code"], "unknown-gpu", "{refused}");
    assert_eq!(
        refused["refusal"]["message"],
        "node \"gpu-h100-0\" has no GPU at position 1000"
    );
}

#[test]
fn a_failing_policy_fails_the_command_with_the_typed_reason() {
    let demo = repo("policies/snapshots/demo.json");
    let mut host = read_host(&demo);
    let snapshot = &mut host.snapshot;
    snapshot.config = "loop".into();
    let snap = temp_file(
        "loop-snapshot.json",
        wasmgpu_contract::snapshot_file::to_json(&host)
            .unwrap()
            .as_bytes(),
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
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
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
    let schema: Value = serde_json::from_slice(&out.stdout).unwrap();
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
    let host = read_host(&path);
    let snapshot = &host.snapshot;
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

// === JSON output: one documented format ===

/// `wasmgpu policy output-schema COMMAND`, parsed.
fn output_schema(command: &str) -> Value {
    let out = wasmgpu(&["policy", "output-schema", command]);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `args`, which print JSON, and checks it against the schema of
/// `command` and the key style (camelCase).
fn assert_output_matches_schema(command: &str, args: &[&str]) -> Value {
    let out = wasmgpu(args);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {}", text(&out)));
    let errors = json_schema::errors(&output_schema(command), &json);
    assert!(errors.is_empty(), "{args:?}:\n{}", errors.join("\n"));
    assert_camel_case(&json, "$");
    json
}

fn assert_camel_case(value: &Value, path: &str) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields {
                let camel = key.starts_with(|c: char| c.is_ascii_lowercase())
                    && key.chars().all(|c| c.is_ascii_alphanumeric());
                assert!(camel, "{path}.{key} is not a camelCase key");
                assert_camel_case(field, &format!("{path}.{key}"));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                assert_camel_case(item, &format!("{path}[{i}]"));
            }
        }
        _ => {}
    }
}

#[test]
fn every_json_output_matches_its_published_schema() {
    let demo = repo("policies/snapshots/demo.json");
    let (binpack, spread) = (policy("binpack"), policy("spread"));
    assert_output_matches_schema("check", &["policy", "check", &binpack, "--output", "json"]);
    let run = assert_output_matches_schema(
        "run",
        &[
            "policy",
            "run",
            &binpack,
            "--snapshot",
            &demo,
            "--output",
            "json",
        ],
    );
    let kinds: Vec<&str> = run["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"assign") && kinds.contains(&"wait") && kinds.contains(&"reject"),
        "{kinds:?}"
    );
    // Refusals too (the hostile policy names GPUs that do not exist).
    let mut host = read_host(&demo);
    let snapshot = &mut host.snapshot;
    snapshot.config = "ghost-gpu".into();
    let ghost = temp_file(
        "schema-ghost.json",
        wasmgpu_contract::snapshot_file::to_json(&host)
            .unwrap()
            .as_bytes(),
    );
    let run = assert_output_matches_schema(
        "run",
        &[
            "policy",
            "run",
            &policy("hostile_policy"),
            "--snapshot",
            ghost.to_str().unwrap(),
            "--output",
            "json",
        ],
    );
    assert_eq!(run["decisions"][0]["verdict"], "refused");
    let compare = assert_output_matches_schema(
        "compare",
        &[
            "policy",
            "compare",
            &binpack,
            &spread,
            "--snapshot",
            &demo,
            "--output",
            "json",
        ],
    );
    assert_eq!(compare["policies"][1]["policy"]["name"], "spread");
    assert_eq!(compare["policies"][0]["summary"]["assigned"], 7);
    assert_output_matches_schema(
        "bench",
        &[
            "policy",
            "bench",
            &binpack,
            "--snapshot",
            &demo,
            "--rounds",
            "2",
            "--output",
            "json",
        ],
    );
    let inventory = repo("deploy/inventory/h100-nvlink-8.yaml");
    let once = assert_output_matches_schema(
        "agent-once",
        &[
            "agent",
            "--once",
            "--output",
            "json",
            "--inventory",
            &inventory,
        ],
    );
    assert_eq!(once["status"]["gpusTotal"], 8);
}

#[test]
fn the_schema_check_catches_what_breaks_the_format() {
    // The validator the test above relies on does reject bad output.
    let schema = output_schema("run");
    let bad = serde_json::json!({
        "policy": {"name": "p", "version": "1", "digest": "sha256:0"},
        "snapshot": {"round": 1, "nodes": 1, "gpus": 1, "pending": 1},
        "decisions": [{"Assign": {"pod": "ns/a", "node": "n", "gpus": []}, "verdict": "valid"}],
        "summary": {"assigned": 1, "waiting": 0, "rejected": 0, "refused": 0, "notMentioned": -1},
        "stats": {"fuelUsed": 1, "instantiateMicros": 1, "callMicros": 1, "validateMicros": 1,
                  "peakMemoryBytes": 1, "log": [], "logDropped": 0}
    });
    let errors = json_schema::errors(&schema, &bad).join("\n");
    assert!(errors.contains("$.decisions[0]: "), "{errors}");
    assert!(errors.contains("$.summary.notMentioned: -1"), "{errors}");
}

// === hostile input: errors, never panics ===

#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    let demo = repo("policies/snapshots/demo.json");
    let binpack = policy("binpack");
    for args in [
        // More than a pipe holds: the write fails whenever the reader closes.
        vec![
            "policy",
            "generate-snapshot",
            "--nodes",
            "3000",
            "--pods",
            "10",
        ],
        vec!["policy", "run", &binpack, "--snapshot", &demo],
        vec![
            "policy",
            "run",
            &binpack,
            "--snapshot",
            &demo,
            "--output",
            "json",
        ],
        vec!["crd"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end at once, as `| head -c0` would.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            out.status.code() == Some(141) || out.status.success(),
            "{args:?}: {:?} {stderr}",
            out.status
        );
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

#[test]
fn a_full_stdout_is_an_error_not_a_panic() {
    let Ok(full) = std::fs::File::create("/dev/full") else {
        return; // not Linux
    };
    let out = Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args([
            "policy",
            "run",
            &policy("binpack"),
            "--snapshot",
            &repo("policies/snapshots/demo.json"),
        ])
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: cannot write to standard output: No space left on device"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_snapshot_that_no_controller_would_build_is_refused_naming_the_entry() {
    let demo = std::fs::read_to_string(repo("policies/snapshots/demo.json")).unwrap();
    let base = wasmgpu_contract::snapshot_file::read(&demo)
        .unwrap()
        .snapshot;
    type Change = Box<dyn Fn(&mut HostSnapshot)>;
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|s| wasmgpu_contract::testing::shape(&mut s.snapshot.pending[0]).count = 0),
            "pending[0] (\"research/finetune-0\").ask.gpus.count: must be 1 to 16, got 0",
        ),
        (
            Box::new(|s| wasmgpu_contract::bits::insert(&mut s.snapshot.eligible_sets[0], 7)),
            "eligibleSets[0]: node index 7 is out of range (3 nodes)",
        ),
        (
            Box::new(|s| {
                let mut uuids = s.nodes[2].uuids.to_vec();
                uuids[0] = s.nodes[0].uuids[0].clone();
                s.nodes[2].uuids = uuids.into();
            }),
            ".uuid: repeats nodes[0] (\"gpu-h100-0\").gpus[0].uuid",
        ),
        (
            Box::new(|s| s.snapshot.nodes[1].gpus[0].nvlink = 1 << 9),
            "nvlink: 9 is not the index of a whole GPU of the node",
        ),
    ];
    for (i, (change, want)) in cases.into_iter().enumerate() {
        let mut host = base.clone();
        change(&mut host);
        let path = temp_file(
            &format!("invalid-{i}.json"),
            wasmgpu_contract::snapshot_file::to_json(&host)
                .unwrap()
                .as_bytes(),
        );
        let out = wasmgpu(&[
            "policy",
            "run",
            &policy("binpack"),
            "--snapshot",
            path.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(1), "{want}: {}", text(&out));
        assert!(
            text(&out).contains("is not a valid snapshot") && text(&out).contains(want),
            "want: {want}\ngot:  {}",
            text(&out)
        );
    }
}

#[test]
fn a_policys_long_reason_is_cut_before_it_is_shown() {
    let demo = repo("policies/snapshots/demo.json");
    let mut host = read_host(&demo);
    let snapshot = &mut host.snapshot;
    snapshot.config = "long-reason:100000".into();
    let path = temp_file(
        "long-reason.json",
        wasmgpu_contract::snapshot_file::to_json(&host)
            .unwrap()
            .as_bytes(),
    );
    let args = [
        "policy",
        "run",
        &policy("hostile_policy"),
        "--snapshot",
        path.to_str().unwrap(),
    ];
    let out = wasmgpu(&[&args[..], &["--output", "json"]].concat());
    assert!(out.status.success(), "{}", text(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reason = json["decisions"][0]["reason"].as_str().unwrap();
    assert_eq!(reason.len(), 1024 + "…".len());
    let out = wasmgpu(&args);
    assert!(out.status.success(), "{}", text(&out));
    assert!(out.stdout.len() < 4096, "{}", out.stdout.len());
}

#[test]
fn a_huge_table_cell_is_cut_not_a_panic() {
    let inventory = std::fs::read_to_string(repo("deploy/inventory/a100-4.yaml")).unwrap();
    let model = "X".repeat(70_000);
    let path = temp_file(
        "huge-model.yaml",
        inventory
            .replacen("NVIDIA A100-SXM4-40GB", &model, 1)
            .as_bytes(),
    );
    let out = wasmgpu(&["agent", "--once", "--inventory", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", &text(&out)[..500]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(&format!("{}…", "X".repeat(1023))),
        "{}",
        &shown[..500]
    );
    assert!(!shown.contains(&model));
}

#[test]
fn limits_too_large_to_hold_are_refused_naming_the_flag() {
    let out = wasmgpu(&[
        "policy",
        "run",
        &policy("binpack"),
        "--snapshot",
        &repo("policies/snapshots/demo.json"),
        "--memory-mib",
        "18446744073709551615",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("--memory-mib: 18446744073709551615 is too large (at most"),
        "{}",
        text(&out)
    );
}

// === `policy publish` against a real API server ===

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// A policy ConfigMap as a user would write it for kubectl: only `key`.
fn policy_configmap_json(name: &str, key: &str, bytes: Vec<u8>) -> Vec<u8> {
    let configmap = k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            labels: Some([("wasmgpu.io/policy".to_owned(), "true".to_owned())].into()),
            ..Default::default()
        },
        binary_data: Some([(key.to_owned(), k8s_openapi::ByteString(bytes))].into()),
        ..Default::default()
    };
    let mut value = serde_json::to_value(&configmap).unwrap();
    value["apiVersion"] = "v1".into();
    value["kind"] = "ConfigMap".into();
    serde_json::to_vec(&value).unwrap()
}

/// `kubectl VERB -f` of a policy ConfigMap holding only `key`.
async fn kubectl_put(
    ctx: &wasmgpu_test_harness::TestContext,
    dir: &Path,
    verb: &str,
    name: &str,
    key: &str,
    bytes: Vec<u8>,
) -> anyhow::Result<()> {
    let file = dir.join(format!("{name}-{verb}.json"));
    std::fs::write(&file, policy_configmap_json(name, key, bytes))?;
    let file = file.to_string_lossy();
    ctx.cluster()
        .run_kubectl(dir, &[verb, "-n", &ctx.namespace, "-f", &file])
        .await?;
    Ok(())
}

/// A ConfigMap's payload keys, and what the controller's check makes of it.
type PayloadKeys = (
    Vec<String>,
    Result<wasmgpu::controller::Payload, wasmgpu::controller::RejectError>,
);

/// The payload keys of ConfigMap `name`, and what the controller's check
/// makes of it.
async fn payload_of(
    ctx: &wasmgpu_test_harness::TestContext,
    name: &str,
) -> anyhow::Result<PayloadKeys> {
    let configmap = ctx
        .api::<k8s_openapi::api::core::v1::ConfigMap>()
        .get(name)
        .await?;
    let keys = configmap
        .binary_data
        .iter()
        .flat_map(|b| b.keys().cloned())
        .collect();
    Ok((
        keys,
        wasmgpu::controller::Payload::from_configmap(&configmap),
    ))
}

#[tokio::test]
async fn publish_leaves_exactly_one_payload_key_whoever_wrote_the_other() -> anyhow::Result<()> {
    use wasmgpu::engine::Digest;
    let ctx = wasmgpu_test_harness::TestContext::new("publish-keys").await?;
    let cluster = ctx.cluster();
    let dir = std::env::temp_dir().join(format!("wasmgpu-publish-test-{}", ctx.namespace));
    std::fs::create_dir_all(&dir)?;
    let small = std::fs::read(policy("binpack"))?;
    let large = padded(&small, 1 << 20);
    let small_file = dir.join("binpack.wasm");
    let large_file = dir.join("binpack-large.wasm");
    std::fs::write(&small_file, &small)?;
    std::fs::write(&large_file, &large)?;
    let publish = |file: &Path, name: &str| {
        Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
            .args(["policy", "publish"])
            .arg(file)
            .args(["--name", name, "--namespace", &ctx.namespace])
            .env("KUBECONFIG", cluster.kubeconfig_path())
            .output()
            .unwrap()
    };
    let assert_only = |name: &str, key: &str, wasm: &[u8], (keys, payload): PayloadKeys| {
        assert_eq!(keys, [key], "{name}: payload keys");
        let payload = payload.unwrap_or_else(|e| panic!("{name}: the controller refuses it: {e}"));
        assert_eq!(payload.digest, Digest::of(wasm), "{name}");
    };

    // Published, then replaced by kubectl with only the compressed key (and
    // no pin): publishing again must not leave both keys.
    let out = publish(&small_file, "default");
    assert!(out.status.success(), "{}", text(&out));
    kubectl_put(
        &ctx,
        &dir,
        "replace",
        "default",
        "policy.wasm.gz",
        gzip(&small),
    )
    .await?;
    let out = publish(&small_file, "default");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("published"),
        "{}",
        text(&out)
    );
    assert_only(
        "default",
        "policy.wasm",
        &small,
        payload_of(&ctx, "default").await?,
    );

    // Created by kubectl (another field manager) with the compressed key;
    // publish of a small component: plain key only.
    kubectl_put(
        &ctx,
        &dir,
        "create",
        "gz-first",
        "policy.wasm.gz",
        gzip(&small),
    )
    .await?;
    let out = publish(&small_file, "gz-first");
    assert!(out.status.success(), "{}", text(&out));
    assert_only(
        "gz-first",
        "policy.wasm",
        &small,
        payload_of(&ctx, "gz-first").await?,
    );

    // Created by kubectl with the plain key; publish of a large component:
    // compressed key only.
    kubectl_put(
        &ctx,
        &dir,
        "create",
        "plain-first",
        "policy.wasm",
        small.clone(),
    )
    .await?;
    let out = publish(&large_file, "plain-first");
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("gzip-compressed"), "{}", text(&out));
    assert_only(
        "plain-first",
        "policy.wasm.gz",
        &large,
        payload_of(&ctx, "plain-first").await?,
    );

    // publish's own writes, both directions.
    for (file, key, wasm) in [
        (&small_file, "policy.wasm", &small),
        (&large_file, "policy.wasm.gz", &large),
        (&small_file, "policy.wasm", &small),
    ] {
        let out = publish(file, "own");
        assert!(out.status.success(), "{}", text(&out));
        assert_only("own", key, wasm, payload_of(&ctx, "own").await?);
    }
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

#[test]
fn compare_hands_each_policy_its_own_config() {
    let demo = repo("policies/snapshots/demo.json");
    let zone = temp_file("zone.json", br#"{"preferZone": "zone-1"}"#);
    let nvlink = temp_file("nvlink.json", br#"{"preferNvlink": true}"#);
    let compare = |configs: &[String]| {
        let mut args = vec![
            "policy".to_string(),
            "compare".into(),
            policy("binpack"),
            policy("spread"),
            "--snapshot".into(),
            demo.clone(),
        ];
        for config in configs {
            args.push("--config".into());
            args.push(config.clone());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        wasmgpu(&args)
    };
    let (zone, nvlink) = (zone.display().to_string(), nvlink.display().to_string());

    // One file for all: a policy that does not take it fails, and the
    // message says how to give each its own.
    let out = compare(std::slice::from_ref(&zone));
    assert!(!out.status.success());
    let shown = text(&out);
    assert!(shown.contains("went to every policy"), "{shown}");
    assert!(shown.contains("--config POLICY=FILE"), "{shown}");
    assert!(shown.contains("preferZone"), "{shown}");

    // Per policy, by describe() name or by file name.
    let out = compare(&[
        format!("binpack={nvlink}"),
        format!("wasmgpu_spread={nvlink}"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("binpack  7/10"), "{}", text(&out));

    // The other policy's config reaches only it.
    let out = compare(&[format!("binpack={nvlink}"), format!("spread={zone}")]);
    assert!(!out.status.success());
    let shown = text(&out);
    assert!(shown.contains("spread failed"), "{shown}");
    assert!(!shown.contains("went to every policy"), "{shown}");

    let out = compare(&[format!("topology={nvlink}")]);
    assert!(!out.status.success());
    let shown = text(&out);
    assert!(
        shown.contains("no policy named topology; the policies are binpack ("),
        "{shown}"
    );
}

#[test]
fn a_snapshot_of_another_contract_is_refused_naming_both() {
    let out = wasmgpu(&["policy", "generate-snapshot", "--nodes", "2", "--pods", "2"]);
    assert!(out.status.success(), "{}", text(&out));
    let generated = String::from_utf8(out.stdout).unwrap();
    let json: Value = serde_json::from_str(&generated).unwrap();
    let contract = json["contract"]
        .as_str()
        .expect("a contract field")
        .to_owned();
    assert!(contract.starts_with("wasmgpu:policy@"), "{contract}");

    let old = temp_file(
        "old-contract.json",
        generated
            .replace(&contract, "wasmgpu:policy@0.0.1")
            .as_bytes(),
    );
    let out = wasmgpu(&[
        "policy",
        "run",
        &policy("binpack"),
        "--snapshot",
        old.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let shown = text(&out);
    assert!(
        shown.contains(&format!(
            "a snapshot of wasmgpu:policy@0.0.1, but this wasmgpu reads {contract} snapshots"
        )),
        "{shown}"
    );
}

#[tokio::test]
async fn publish_into_a_missing_namespace_says_what_to_do_and_list_says_not_yet_loaded()
-> anyhow::Result<()> {
    let ctx = wasmgpu_test_harness::TestContext::new("publish-missing").await?;
    let kubeconfig = ctx.cluster().kubeconfig_path();
    let missing = format!("{}-absent", ctx.namespace);
    let out = Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(["policy", "publish"])
        .arg(policy("binpack"))
        .args(["--name", "p", "--namespace", &missing])
        .env("KUBECONFIG", kubeconfig)
        .output()?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("namespace {missing} does not exist"))
            && stderr.contains("--policy-namespace")
            && !stderr.contains("Status {"),
        "{stderr}"
    );
    // Published where no controller runs: listed as not yet loaded.
    let out = Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(["policy", "publish"])
        .arg(policy("binpack"))
        .args(["--name", "p", "--namespace", &ctx.namespace])
        .env("KUBECONFIG", kubeconfig)
        .output()?;
    assert!(out.status.success(), "{}", text(&out));
    let out = Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(["policy", "list", "--namespace", &ctx.namespace])
        .env("KUBECONFIG", kubeconfig)
        .output()?;
    assert!(out.status.success(), "{}", text(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains("not yet loaded by a controller"),
        "{listed}"
    );
    Ok(())
}

#[test]
fn snapshot_files_of_older_forms_are_read_with_a_warning_until_upgraded() {
    let demo = read_host(repo("policies/snapshots/demo.json"));
    let previous = wasmgpu_contract::testing::previous_form(&demo);
    assert!(previous.contains("\"nvlinkPeers\"") && previous.contains("\"usage\""));
    let old = wasmgpu_contract::testing::first_form(&previous);
    assert!(old.contains("\"eligible_sets\"") && old.contains("\"memory_mib\""));
    let previous_path = temp_file("previous-form.json", previous.as_bytes());
    let previous_path = previous_path.to_str().unwrap();
    let path = temp_file("first-form.json", old.as_bytes());
    let path = path.to_str().unwrap();
    let run = |snapshot: &str| {
        let out = wasmgpu(&[
            "policy",
            "run",
            &policy("binpack"),
            "--snapshot",
            snapshot,
            "--output",
            "json",
        ]);
        assert!(out.status.success(), "{}", text(&out));
        out
    };
    let today = run(&repo("policies/snapshots/demo.json"));
    assert!(today.stderr.is_empty(), "{}", text(&today));
    let first = run(path);
    let warning = String::from_utf8_lossy(&first.stderr);
    assert!(
        warning.contains("is a snapshot file of the first snapshot form")
            && warning.contains(&format!("wasmgpu policy upgrade-snapshot {path}")),
        "{warning}"
    );
    let previous_run = run(previous_path);
    let warning = String::from_utf8_lossy(&previous_run.stderr);
    assert!(
        warning.contains("is a snapshot file of contract 0.2 (wasmgpu:policy@0.2.0), read as wasmgpu:policy@0.3.0")
            && warning.contains(&format!("wasmgpu policy upgrade-snapshot {previous_path}")),
        "{warning}"
    );
    // The same round as on today's file.
    let decisions = |out: &Output| {
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        json["decisions"].clone()
    };
    assert_eq!(decisions(&first), decisions(&today));
    assert_eq!(decisions(&previous_run), decisions(&today));
    assert!(decisions(&today).as_array().is_some_and(|d| d.len() == 10));

    let out = wasmgpu(&["policy", "upgrade-snapshot", path]);
    assert!(out.status.success(), "{}", text(&out));
    let upgraded = std::fs::read_to_string(path).unwrap();
    assert!(upgraded.contains("\"eligibleSets\"") && upgraded.contains("\"memoryMiB\""));
    let again = run(path);
    assert!(again.stderr.is_empty(), "{}", text(&again));
    assert_eq!(decisions(&again), decisions(&today));
}
