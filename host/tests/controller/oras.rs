//! Interoperation with the ORAS CLI (`oras.land/oras`, built by
//! `tests/registry/build.sh`): a component published with `oras push` in the
//! Wasm OCI artifact format is pulled, verified and loaded by the
//! controller, and decides; a component `wasmgpu policy push` published is
//! fetched by `oras pull`, byte for byte. The commands are the ones
//! docs/POLICIES.md shows.

use std::path::Path;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use tokio::io::AsyncWriteExt;
use wasmgpu::api::Sharing;
use wasmgpu::controller::fingerprint;
use wasmgpu::engine::Digest;
use wasmgpu::oci::sha256;
use wasmgpu_test_harness::{Registry, TestContext, oras_binary};

use super::common::{padded, policy_bytes};
use super::configmaps::{pod_digests, wait_observed};
use super::oci::{SECRET, controller_flags, pull_secret, push_ok};
use super::operate::free_port;
use super::support::*;
use super::wait_bound;

/// Runs `oras ARGS…` in `dir` with the registry's password on stdin: stdout,
/// or an error with stderr.
async fn oras(registry: &Registry, dir: &Path, args: &[&str]) -> Result<String> {
    let mut child = tokio::process::Command::new(oras_binary()?)
        .args(args)
        .current_dir(dir)
        // No credentials of whoever runs the test, and none stored.
        .env("DOCKER_CONFIG", dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting oras")?;
    let mut stdin = child.stdin.take().expect("piped");
    stdin.write_all(registry.password.as_bytes()).await?;
    drop(stdin);
    let output = child.wait_with_output().await?;
    ensure!(
        output.status.success(),
        "oras {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?.trim().to_string())
}

#[tokio::test]
async fn components_pushed_with_oras_are_loaded_and_oras_pulls_what_wasmgpu_pushed() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("oras").await?;
    install_crds(&ctx).await?;
    let registry = tokio::task::spawn_blocking(Registry::start).await??;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, Some("oras")).await?;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    // binpack, made a version of its own (a digest no other test loads).
    let wasm = padded(&policy_bytes("binpack"), 200_000);
    std::fs::write(dir.path().join("policy.wasm"), &wasm)?;
    let layer_digest = sha256(&wasm);
    // The Wasm OCI convention's config, as `wasmgpu policy push` writes it.
    let config = serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    });
    std::fs::write(dir.path().join("config.json"), config.to_string())?;

    // Published with ORAS (relative paths: oras refuses absolute ones).
    let ca = registry.ca_path.display().to_string();
    let target = format!("{}/policies/oras:v1", registry.address);
    let auth = [
        "--ca-file",
        &ca,
        "--username",
        &registry.username,
        "--password-stdin",
    ];
    let mut args = vec![
        "push",
        &target,
        "--config",
        "config.json:application/vnd.wasm.config.v0+json",
        "policy.wasm:application/wasm",
        "--format",
        "go-template={{.digest}}",
    ];
    args.extend(auth);
    let digest = oras(&registry, dir.path(), &args).await?;
    ensure!(
        digest.starts_with("sha256:"),
        "oras push printed {digest:?}"
    );

    // What ORAS wrote: an OCI image manifest, the Wasm config, one Wasm layer.
    let pinned = format!("{}/policies/oras@{digest}", registry.address);
    let mut args = vec!["manifest", "fetch", &pinned];
    args.extend(auth);
    let manifest = oras(&registry, dir.path(), &args).await?;
    assert_eq!(sha256(manifest.as_bytes()), digest, "{manifest}");
    let manifest: serde_json::Value = serde_json::from_str(&manifest)?;
    eprintln!("the manifest oras push wrote: {manifest}");
    assert_eq!(
        manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json",
        "{manifest}"
    );
    assert_eq!(
        manifest["config"]["mediaType"], "application/vnd.wasm.config.v0+json",
        "{manifest}"
    );
    let layers = manifest["layers"].as_array().cloned().unwrap_or_default();
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    assert_eq!(layers[0]["digest"], layer_digest.as_str());

    // Named by a policy ConfigMap, pulled with the Secret's CA and user,
    // loaded; it decides.
    pull_secret(&ctx, &registry, &registry.password).await?;
    let cache = dir.path().join("cache");
    let port = free_port()?;
    let controller = Controller::start_with(&ctx, &controller_flags(&cache, port)).await?;
    let reference = format!("oci://{pinned}");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(["policy", "publish", "--name", "oras", "--oci", &reference])
        .args(["--pull-secret", SECRET, "--namespace", &ctx.namespace])
        .env("KUBECONFIG", ctx.cluster().kubeconfig_path())
        .output()
        .await?;
    ensure!(
        output.status.success(),
        "publish --oci: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let observed = fingerprint(&ctx.api::<ConfigMap>().get("oras").await?);
    let status = wait_observed(&ctx, "oras", &observed).await?;
    let component = Digest::of(&wasm).to_string();
    assert_eq!(
        status.active_digest.as_deref(),
        Some(component.as_str()),
        "{status:?}\n{}",
        controller.log_tail()
    );
    assert!(status.last_error.is_none(), "{status:?}");
    create_pod(&ctx, "p-0", "one").await?;
    wait_bound(&ctx, "p-0").await?;
    let digests = pod_digests(&ctx, "one").await?;
    assert_eq!(digests.get("p-0"), Some(&component), "{digests:?}");
    drop(controller);

    // The other way: what `wasmgpu policy push` published, `oras pull` fetches
    // (to the file its layer's title names), the same bytes.
    let other = padded(&policy_bytes("binpack"), 100_000);
    let other_file = dir.path().join("other.wasm");
    std::fs::write(&other_file, &other)?;
    let pushed = push_ok(&registry, &other_file, "policies/pushed").await?;
    let pushed = pushed.strip_prefix("oci://").unwrap_or(&pushed).to_string();
    let mut args = vec!["pull", &pushed, "--output", "pulled"];
    args.extend(auth);
    oras(&registry, dir.path(), &args).await?;
    let pulled = std::fs::read(dir.path().join("pulled/pushed.wasm"))
        .context("oras pull wrote no pulled/pushed.wasm")?;
    assert!(pulled == other, "oras pull fetched different bytes");

    remove_nodes(&ctx, &[node]).await
}
