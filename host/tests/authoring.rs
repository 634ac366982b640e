//! A policy author's first hour, as docs/POLICIES.md tells it: `wasmgpu
//! policy new` outside the checkout, then cargo test, the Wasm build, check,
//! run, publish to a real API server, and the controller loading it. Each
//! command run here must appear verbatim in the docs.

use wasmgpu_test_support as common;
use wasmgpu_test_support::controller as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs documented command `line` (`wasmgpu …` or `cargo …`) in `dir`;
/// fails the test unless docs/POLICIES.md shows it and it succeeds.
fn documented(docs: &str, dir: &Path, target: &Path, line: &str) -> String {
    documented_with(docs, dir, target, line, &[], None)
}

/// [`documented`], with `extra` arguments the docs leave out (the test's
/// namespace) and a kubeconfig.
fn documented_with(
    docs: &str,
    dir: &Path,
    target: &Path,
    line: &str,
    extra: &[&str],
    kubeconfig: Option<&Path>,
) -> String {
    let shown = line.trim_end_matches(" --output json");
    assert!(
        docs.contains(shown),
        "docs/POLICIES.md no longer shows `{shown}`"
    );
    let mut words = line.split_whitespace();
    let program = match words.next() {
        Some("wasmgpu") => env!("CARGO_BIN_EXE_wasmgpu").to_owned(),
        Some("cargo") => std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()),
        other => panic!("not a command this test runs: {other:?}"),
    };
    let mut command = Command::new(program);
    command
        .args(words)
        .args(extra)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target);
    if let Some(kubeconfig) = kubeconfig {
        command.env("KUBECONFIG", kubeconfig);
    }
    let out = command.output().expect("run a documented command");
    assert!(out.status.success(), "`{line}` failed:\n{}", text(&out));
    text(&out)
}

#[test]
fn a_new_policy_builds_tests_checks_and_runs_outside_the_checkout() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let docs = std::fs::read_to_string(repo.join("docs/POLICIES.md")).unwrap();
    let home = tempfile::tempdir().unwrap();
    // Kept between runs: the first build of the SDK's dependencies is the slow part.
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("authoring");

    let made = documented(
        &docs,
        home.path(),
        &target,
        "wasmgpu policy new zone-first --dir zone-first",
    );
    let dir = home.path().join("zone-first");
    assert!(made.contains("created policy zone-first"), "{made}");
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("[profile.policy]"), "{manifest}");
    assert!(dir.join("Cargo.lock").is_file());

    let tests = documented(&docs, &dir, &target, "cargo test");
    assert!(tests.contains("test result: ok. 3 passed"), "{tests}");

    documented(
        &docs,
        &dir,
        &target,
        "cargo build --target wasm32-wasip2 --profile policy",
    );
    let wasm = target.join("wasm32-wasip2/policy/zone_first.wasm");
    let size = std::fs::metadata(&wasm).unwrap().len();
    assert!(size < 900 << 10, "{size} bytes: over a ConfigMap's budget");
    // The docs' commands name the artifact under the crate's own target/.
    let local = dir.join("target/wasm32-wasip2/policy");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::copy(&wasm, local.join("zone_first.wasm")).unwrap();

    let checked = documented(
        &docs,
        &dir,
        &target,
        "wasmgpu policy check target/wasm32-wasip2/policy/zone_first.wasm",
    );
    assert!(checked.contains("name         zone-first"), "{checked}");

    let run = documented(
        &docs,
        &dir,
        &target,
        concat!(
            "wasmgpu policy run target/wasm32-wasip2/policy/zone_first.wasm",
            " --snapshot snapshots/example.json --config config.example.json --output json"
        ),
    );
    let run: serde_json::Value = serde_json::from_str(&run).unwrap();
    assert_eq!(run["summary"]["refused"], 0, "{run:#}");
    assert!(run["summary"]["assigned"].as_u64().unwrap() >= 1, "{run:#}");

    // A config the policy cannot read fails the round, naming the right key.
    std::fs::write(dir.join("bad.json"), r#"{"preferzone": "zone-1"}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args([
            "policy",
            "run",
            "target/wasm32-wasip2/policy/zone_first.wasm",
            "--snapshot",
            "snapshots/example.json",
            "--config",
            "bad.json",
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("preferZone"), "{}", text(&out));

    // Shipped: published as a ConfigMap, loaded by a running controller.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(publish_and_load(&docs, &dir, &target, &wasm))
        .unwrap();
}

/// Publishes the new policy as the docs say (in the test's namespace, which
/// the controller's policy namespace is) and waits until `policy list` shows
/// the controller loaded exactly that component.
async fn publish_and_load(
    docs: &str,
    dir: &Path,
    target: &Path,
    wasm: &Path,
) -> anyhow::Result<()> {
    use sha2::Digest;
    let ctx = wasmgpu_test_harness::TestContext::new("authoring").await?;
    common::install_crds(&ctx).await?;
    let kubeconfig = ctx.cluster().kubeconfig_path();
    let namespace = ["--namespace", ctx.namespace.as_str()];
    let published = documented_with(
        docs,
        dir,
        target,
        "wasmgpu policy publish target/wasm32-wasip2/policy/zone_first.wasm --name zone-first --config config.example.json",
        &namespace,
        Some(kubeconfig),
    );
    assert!(published.contains("zone-first"), "{published}");
    let _controller = support::Controller::start(&ctx).await?;
    let digest = hex::encode(sha2::Sha256::digest(std::fs::read(wasm)?));
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let list = documented_with(
            docs,
            dir,
            target,
            "wasmgpu policy list",
            &namespace,
            Some(kubeconfig),
        );
        let row = list.lines().find(|l| l.starts_with("zone-first "));
        if row.is_some_and(|r| r.contains(&format!("sha256:{}", &digest[..12]))) {
            println!("loaded by the controller:\n{list}");
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < until,
            "the controller never loaded zone-first sha256:{}:\n{list}",
            &digest[..12]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn inside_a_checkout_a_new_policy_joins_the_workspace() {
    let checkout = tempfile::tempdir().unwrap();
    let root = checkout.path();
    std::fs::create_dir_all(root.join("policies/sdk")).unwrap();
    std::fs::write(
        root.join("policies/sdk/Cargo.toml"),
        "[package]\nname = \"wasmgpu-policy-sdk\"\n",
    )
    .unwrap();
    std::fs::write(
        root.join("Cargo.toml"),
        "[workspace]\nmembers = [\n    \"policies/sdk\",\n]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(["policy", "new", "zone-first"])
        .current_dir(root.join("policies"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(
        workspace.contains("\"policies/sdk\",\n    \"policies/zone-first\",\n]"),
        "{workspace}"
    );
    let manifest = std::fs::read_to_string(root.join("policies/zone-first/Cargo.toml")).unwrap();
    assert!(manifest.contains("wasmgpu-policy-sdk = { workspace = true }"));

    let again = Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args([
            "policy",
            "new",
            "zone-first",
            "--dir",
            "policies/zone-first",
        ])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        text(&again).contains("exists and is not empty"),
        "{}",
        text(&again)
    );
}

/// The first `sh` block of `readme`, one command per line (comments cut).
fn sh_block(readme: &str) -> Vec<String> {
    readme
        .lines()
        .skip_while(|l| *l != "```sh")
        .skip(1)
        .take_while(|l| *l != "```")
        .map(|l| l.split(" #").next().unwrap_or(l).trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// `policy new --lang js|python|go` outside the checkout: the starter's README
/// commands, run as printed from its own directory (all but the publishing
/// ones, which need a registry and a cluster), test it, build it, check it
/// and run it with no decision refused by the host.
#[test]
fn a_starter_in_js_python_and_go_builds_tests_checks_and_runs_from_its_directory() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_wasmgpu"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for lang in ["js", "python", "go"] {
        let home = tempfile::tempdir().unwrap();
        let out = Command::new(&bin)
            .args(["policy", "new", "zone-first", "--lang", lang])
            .current_dir(home.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{lang}: {}", text(&out));
        let dir = home.path().join("zone-first");
        assert!(
            text(&out).contains(&format!("cd {}", dir.display())),
            "{}",
            text(&out)
        );
        let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
        assert!(
            !readme.contains("{{"),
            "{lang}: unfilled template:\n{readme}"
        );
        let commands = sh_block(&readme);
        let run: Vec<&String> = commands
            .iter()
            .filter(|c| !c.contains("policy push") && !c.contains("policy publish"))
            .collect();
        assert_eq!(
            run.len(),
            4,
            "{lang}: test, build, check, run in:\n{readme}"
        );
        let mut last = String::new();
        for command in run {
            let out = Command::new("bash")
                .args(["-c", command])
                .current_dir(&dir)
                .env("PATH", &path)
                .env("WASMGPU", &bin)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{lang}: `{command}` failed:\n{}",
                text(&out)
            );
            last = text(&out);
        }
        assert!(
            dir.join("zone_first.wasm").is_file(),
            "{lang}: no component"
        );
        assert!(
            last.contains(" assigned") && last.contains("0 refused by the host"),
            "{lang}: policy run:\n{last}"
        );
    }
}
