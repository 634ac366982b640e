//! `deploy/` installs on a real API server with the README's own command,
//! and again without changing anything; the policy components it ships
//! decide as their sources do.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, ensure};
use serde::Deserialize;
use serde_json::Value;
use wasmgpu_test_harness::{Cluster, TestContext};

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The install command of README.md: the first line of the first `sh`
/// block under `## Installing`, without its comment.
fn readme_install_command() -> Result<String> {
    let readme = std::fs::read_to_string(root().join("README.md"))?;
    let section = readme
        .split("\n## Installing\n")
        .nth(1)
        .context("README.md has no `## Installing` section")?;
    let block = section
        .split("```sh\n")
        .nth(1)
        .context("`## Installing` has no sh block")?;
    let line = block.lines().next().unwrap_or_default();
    let command = line.split('#').next().unwrap_or_default().trim();
    ensure!(
        command.starts_with("kubectl "),
        "the install command is not a kubectl command: {line:?}"
    );
    Ok(command.to_owned())
}

/// Every object of `deploy/` as `kind/namespace/name`, with its
/// resourceVersion as the API server has it (`kubectl get -k deploy/`).
async fn installed(cluster: &Cluster) -> Result<BTreeMap<String, String>> {
    let json = cluster
        .run_kubectl(root(), &["get", "-k", "deploy/", "-o", "json"])
        .await?;
    let list: Value = serde_json::from_str(&json)?;
    let items = list["items"].as_array().context("no items")?;
    Ok(items
        .iter()
        .map(|item| {
            let meta = &item["metadata"];
            (
                key(
                    item["kind"].as_str().unwrap_or_default(),
                    meta["namespace"].as_str(),
                    meta["name"].as_str().unwrap_or_default(),
                ),
                meta["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect())
}

fn key(kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{kind}/{}/{name}", namespace.unwrap_or(""))
}

#[tokio::test]
async fn the_readme_install_command_installs_everything_and_a_second_run_changes_nothing()
-> Result<()> {
    let ctx = TestContext::new("deploy").await?;
    let cluster = ctx.cluster();
    let command = readme_install_command()?;
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();

    // What the kustomization holds, as kubectl renders it.
    let rendered = cluster
        .run_kubectl(root(), &["kustomize", "deploy/"])
        .await?;
    #[derive(Deserialize)]
    struct Meta {
        name: String,
        namespace: Option<String>,
    }
    #[derive(Deserialize)]
    struct Object {
        kind: String,
        metadata: Meta,
    }
    let wanted: Vec<String> = serde_norway::Deserializer::from_str(&rendered)
        .map(|doc| {
            let object = Object::deserialize(doc)?;
            Ok(key(
                &object.kind,
                object.metadata.namespace.as_deref(),
                &object.metadata.name,
            ))
        })
        .collect::<Result<_>>()?;
    for object in [
        "CustomResourceDefinition//gpunodes.wasmgpu.io",
        "Deployment/wasmgpu-system/wasmgpu-controller",
        "DaemonSet/wasmgpu-system/wasmgpu-agent",
        "ConfigMap/wasmgpu-system/binpack",
        "ConfigMap/wasmgpu-system/spread",
        "ConfigMap/wasmgpu-system/fairshare",
    ] {
        ensure!(
            wanted.iter().any(|w| w == object),
            "{object} missing from deploy/:\n{wanted:#?}"
        );
    }

    // The first run installs every object.
    cluster
        .run_kubectl(root(), &args)
        .await
        .with_context(|| format!("README's install command `{command}`"))?;
    cluster
        .run_kubectl(
            root(),
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/gpuresources.wasmgpu.io",
                "crd/gpunodes.wasmgpu.io",
            ],
        )
        .await?;
    let first = installed(cluster).await?;
    for object in &wanted {
        ensure!(
            first.contains_key(object),
            "`{command}` did not create {object}; installed: {:#?}",
            first.keys()
        );
    }

    // The second run changes nothing.
    let output = cluster.run_kubectl(root(), &args).await?;
    ensure!(
        !output.contains("configured") && !output.contains("created"),
        "a second `{command}` changed something:\n{output}"
    );
    let second = installed(cluster).await?;
    for object in &wanted {
        ensure!(
            first[object] == second[object],
            "a second `{command}` rewrote {object} (resourceVersion {} -> {})",
            first[object],
            second[object]
        );
    }
    Ok(())
}

#[test]
fn the_shipped_policy_components_decide_as_their_sources_do() {
    let engine = wasmgpu::engine::Engine::new(Default::default()).expect("engine");
    let snapshot = wasmgpu_contract::testing::large(60, 120);
    let host_snapshot: wasmgpu::engine::types::Snapshot = snapshot.clone();
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/policies"));
    for (file, native) in [
        (
            "binpack.wasm",
            wasmgpu_binpack::allocate
                as fn(&wasmgpu_contract::Snapshot) -> Vec<wasmgpu_contract::Decision>,
        ),
        ("spread.wasm", wasmgpu_spread::allocate),
        ("fairshare.wasm", wasmgpu_fairshare::allocate),
    ] {
        let bytes = std::fs::read(root.join(file)).expect("deploy/policies component");
        let shipped = engine
            .load(&bytes)
            .expect("a policy component")
            .allocate(&host_snapshot)
            .expect("decides")
            .decisions;
        let source: Vec<wasmgpu::engine::types::Decision> = native(&snapshot);
        assert_eq!(
            shipped, source,
            "deploy/policies/{file} is stale: run `make deploy-policies`"
        );
    }
}
