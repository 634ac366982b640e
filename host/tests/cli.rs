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

// === `policy publish` against a real API server ===

/// `bytes` with a custom section of `pad` zero bytes appended: a component
/// that still loads, of any size (over 900 KiB, `publish` gzips it).
fn padded(bytes: &[u8], pad: usize) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"padding";
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.resize(body.len() + pad, 0);
    let mut out = bytes.to_vec();
    out.push(0); // custom section
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

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
