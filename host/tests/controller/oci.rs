//! Policy components in an OCI registry: a real CNCF distribution registry
//! (TLS from a CA of its own, basic auth) started by the test; components
//! pushed with `wasmgpu policy push`, named by policy ConfigMaps, pulled by
//! the controller with the credentials and CA of a Secret. Every failure
//! keeps the active version and says why (status, Event, metric); a
//! restarted controller loads from its disk cache with the registry gone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ObjectMeta, Patch, PatchParams};
use wasmgpu::api::Sharing;
use wasmgpu::api::policy::{
    COMPONENT_REF_KEY, PULL_SECRET_ANNOTATION, PULL_SECRET_CA_KEY, PolicyStatus,
};
use wasmgpu::controller::fingerprint;
use wasmgpu::engine::Digest;
use wasmgpu_test_harness::{Registry, TestContext};

use super::common::{padded, policy_bytes};
use super::configmaps::{pod_digests, wait_observed};
use super::operate::{free_port, get};
use super::support::*;
use super::{wait_bound, wait_event};

/// The Secret the deployed RBAC lets the controller read.
pub(super) const SECRET: &str = "wasmgpu-registry";
/// The controller's `--max-component-bytes` in this test.
const CAP: usize = 4_000_000;

/// Runs `wasmgpu policy push FILE TARGET ARGS…`: stdout, or an error with stderr.
async fn push(file: &Path, target: &str, args: &[&str], password: &str) -> Result<String> {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(["policy", "push"])
        .arg(file)
        .arg(target)
        .args(args)
        .env("WASMGPU_REGISTRY_PASSWORD", password)
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    ensure!(output.status.success(), "push failed: {stderr}");
    Ok(String::from_utf8(output.stdout)?.trim().to_string())
}

/// Pushes with the registry's user and CA; returns the pinned reference.
pub(super) async fn push_ok(registry: &Registry, file: &Path, repository: &str) -> Result<String> {
    let ca = registry.ca_path.display().to_string();
    push(
        file,
        &registry.reference(repository, "v1"),
        &["--username", &registry.username, "--ca", &ca],
        &registry.password,
    )
    .await
}

/// Points the existing policy ConfigMap `name` at `reference`, with the
/// pull Secret `secret` (none: the annotation removed), in one write;
/// returns its fingerprint.
async fn put_ref(
    ctx: &TestContext,
    name: &str,
    reference: &str,
    secret: Option<&str>,
) -> Result<Digest> {
    let patch = serde_json::json!({
        "metadata": { "annotations": { PULL_SECRET_ANNOTATION: secret } },
        "data": { COMPONENT_REF_KEY: reference },
    });
    let patched = ctx
        .api::<ConfigMap>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("patching policy ConfigMap {name}"))?;
    Ok(fingerprint(&patched))
}

/// Names `reference` in ConfigMap `big`; waits for the controller's
/// verdict and checks it rejected the version with `reason` in its status
/// and an Event, the active version staying `active`.
async fn rejected(
    ctx: &TestContext,
    reference: &str,
    secret: Option<&str>,
    reason: &str,
    active: &str,
) -> Result<PolicyStatus> {
    let observed = put_ref(ctx, "big", reference, secret).await?;
    let status = wait_observed(ctx, "big", &observed).await?;
    let error = status.last_error.clone().unwrap_or_default();
    ensure!(
        error.contains(reason),
        "{reference}: expected {reason:?} in the status, got {status:?}"
    );
    ensure!(
        status.active_digest.as_deref() == Some(active),
        "{reference}: the active version changed: {status:?}"
    );
    wait_event(ctx, "big", reason, |r, note| {
        r == "PolicyRejected" && note.contains(reason) && note.contains("stays active")
    })
    .await?;
    Ok(status)
}

/// Creates or replaces the pull Secret: the registry's CA and its user with
/// `password`.
pub(super) async fn pull_secret(
    ctx: &TestContext,
    registry: &Registry,
    password: &str,
) -> Result<()> {
    let config = serde_json::json!({
        "auths": { &registry.address: { "username": registry.username, "password": password } }
    });
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(SECRET.into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        data: Some(BTreeMap::from([
            (
                ".dockerconfigjson".to_string(),
                ByteString(config.to_string().into_bytes()),
            ),
            (
                PULL_SECRET_CA_KEY.to_string(),
                ByteString(registry.ca_pem.clone().into_bytes()),
            ),
        ])),
        ..Default::default()
    };
    let mut value = serde_json::to_value(&secret)?;
    value["apiVersion"] = "v1".into();
    value["kind"] = "Secret".into();
    ctx.api::<Secret>()
        .patch(
            SECRET,
            &PatchParams::apply("wasmgpu-test").force(),
            &Patch::Apply(&value),
        )
        .await?;
    Ok(())
}

/// Waits until the controller's metrics on `port` hold every line of `expected`.
async fn wait_metrics(port: u16, expected: &[String], controller: &Controller) -> Result<String> {
    let deadline = Instant::now() + ACT;
    loop {
        let (_, body) = get(port, "/metrics").await?;
        if expected.iter().all(|e| body.contains(e.as_str())) {
            return Ok(body);
        }
        if Instant::now() > deadline {
            bail!(
                "missing from the metrics: {:?}\n{body}\n{}",
                expected
                    .iter()
                    .filter(|e| !body.contains(e.as_str()))
                    .collect::<Vec<_>>(),
                controller.log_tail()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

pub(super) fn controller_flags(cache: &Path, port: u16) -> Vec<String> {
    vec![
        "--component-cache".into(),
        cache.display().to_string(),
        "--max-component-bytes".into(),
        CAP.to_string(),
        "--http-address".into(),
        format!("127.0.0.1:{port}"),
    ]
}

fn pulls(result: &str, count: u32) -> String {
    format!("wasmgpu_component_pulls_total{{policy=\"big\",result=\"{result}\"}} {count}")
}

#[tokio::test]
async fn components_named_by_oci_reference_are_pulled_and_failures_keep_the_active_one()
-> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("oci").await?;
    install_crds(&ctx).await?;
    let registry = tokio::task::spawn_blocking(Registry::start).await??;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, Some("big")).await?;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let write = |name: &str, bytes: &[u8]| -> Result<PathBuf> {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes)?;
        Ok(path)
    };
    let binpack = policy_bytes("binpack");
    // Over a ConfigMap's 1 MiB, under the controller's cap.
    let big = padded(&binpack, 1_500_000);
    let other = padded(&binpack, 1_200_000);
    let huge = padded(&binpack, CAP + 1000);
    let (big_file, other_file, huge_file) = (
        write("big.wasm", &big)?,
        write("other.wasm", &other)?,
        write("huge.wasm", &huge)?,
    );
    let big_digest = Digest::of(&big).to_string();

    // The CLI refuses a registry it cannot trust, and a wrong password.
    let target = registry.reference("policies/big", "v1");
    let error = push(
        &big_file,
        &target,
        &["--username", &registry.username],
        &registry.password,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("cannot reach the registry") && error.contains("certificate"),
        "{error}"
    );
    let ca = registry.ca_path.display().to_string();
    let error = push(
        &big_file,
        &target,
        &["--username", &registry.username, "--ca", &ca],
        "wrong",
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(error.contains("refused access"), "{error}");

    let started = Instant::now();
    let pinned = push_ok(&registry, &big_file, "policies/big").await?;
    let push_time = started.elapsed();
    let prefix = format!("oci://{}/policies/big@sha256:", registry.address);
    assert!(pinned.starts_with(&prefix), "{pinned}");
    let other_pinned = push_ok(&registry, &other_file, "policies/other").await?;
    let huge_pinned = push_ok(&registry, &huge_file, "policies/huge").await?;
    pull_secret(&ctx, &registry, &registry.password).await?;

    let cache = dir.path().join("cache");
    let port = free_port()?;
    let controller = Controller::start_with(&ctx, &controller_flags(&cache, port)).await?;

    // Happy path: published with the CLI, pulled, verified, loaded; it decides.
    let started = Instant::now();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(["policy", "publish", "--name", "big", "--oci", &pinned])
        .args(["--pull-secret", SECRET, "--namespace", &ctx.namespace])
        .env("KUBECONFIG", ctx.cluster().kubeconfig_path())
        .output()
        .await?;
    ensure!(
        output.status.success(),
        "publish --oci: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(printed.contains(&pinned), "{printed}");
    let observed = fingerprint(&ctx.api::<ConfigMap>().get("big").await?);
    let loaded = wait_observed(&ctx, "big", &observed).await?;
    let load_time = started.elapsed();
    assert_eq!(
        loaded.active_digest.as_deref(),
        Some(big_digest.as_str()),
        "{loaded:?}\n{}",
        controller.log_tail()
    );
    assert!(loaded.last_error.is_none(), "{loaded:?}");
    wait_event(&ctx, "big", "PolicyLoaded", |r, note| {
        r == "PolicyLoaded" && note.contains(&big_digest)
    })
    .await?;
    create_pod(&ctx, "p-0", "one").await?;
    wait_bound(&ctx, "p-0").await?;
    eprintln!(
        "push of {} bytes: {push_time:.1?}; ConfigMap to loaded (pull, verify, compile, canary): {load_time:.1?}",
        big.len()
    );

    // Each failure keeps that version, and says why.
    let layer_digest = wasmgpu::oci::sha256(&big);
    let digest_of = |r: &str| r.rsplit_once('@').map(|(_, d)| d.to_string()).unwrap();
    let other_digest = digest_of(&other_pinned);
    let never = wasmgpu::oci::sha256(b"never pushed");
    let address = &registry.address;
    let closed = free_port()?;
    let over = format!("over the limit of {CAP} bytes");
    let cases: Vec<(String, Option<&str>, &str)> = vec![
        // A wrong digest (the component's instead of the manifest's).
        (
            format!("oci://{address}/policies/big@{layer_digest}"),
            Some(SECRET),
            "the registry has no such manifest",
        ),
        // A tag only: the controller pulls pinned digests.
        (
            format!("oci://{address}/policies/big:v1"),
            Some(SECRET),
            "names no digest",
        ),
        // A repository that does not exist (with a digest not pulled yet:
        // the cache is content-addressed, whatever repository names it).
        (
            format!("oci://{address}/policies/missing@{other_digest}"),
            Some(SECRET),
            "the registry has no such",
        ),
        // No Secret: neither its CA nor its user.
        (other_pinned.clone(), None, "invalid peer certificate"),
        // A Secret the controller may not read (least privilege).
        (
            other_pinned.clone(),
            Some("somebody-elses"),
            "may not read Secret somebody-elses",
        ),
        // Over --max-component-bytes.
        (huge_pinned.clone(), Some(SECRET), &over),
        // Nobody listens there (a digest not in the cache).
        (
            format!("oci://127.0.0.1:{closed}/policies/big@{never}"),
            Some(SECRET),
            "cannot reach the registry",
        ),
    ];
    for (reference, secret, reason) in &cases {
        rejected(&ctx, reference, *secret, reason, &big_digest).await?;
    }
    // A Secret with a wrong password (the CA right).
    pull_secret(&ctx, &registry, "wrong").await?;
    rejected(
        &ctx,
        &other_pinned,
        Some(SECRET),
        "refused access",
        &big_digest,
    )
    .await?;
    pull_secret(&ctx, &registry, &registry.password).await?;
    create_pod(&ctx, "p-1", "one").await?;
    wait_bound(&ctx, "p-1").await?;
    let digests = pod_digests(&ctx, "one").await?;
    assert_eq!(digests.get("p-0"), Some(&big_digest));
    assert_eq!(digests.get("p-1"), Some(&big_digest), "{digests:?}");
    wait_metrics(
        port,
        &[
            pulls("registry", 1),
            pulls("not-found", 2),
            pulls("unauthorized", 1),
            pulls("tls", 1),
            pulls("pull-secret", 1),
            pulls("too-large", 1),
            pulls("unreachable", 1),
            "wasmgpu_policy_loads_total{policy=\"big\",result=\"rejected\"} 8".into(),
        ],
        &controller,
    )
    .await?;
    drop(controller);

    // The registry gone, a new controller loads the version from its disk cache.
    drop(registry);
    let port = free_port()?;
    let controller = Controller::start_with(&ctx, &controller_flags(&cache, port)).await?;
    let observed = put_ref(&ctx, "big", &pinned, Some(SECRET)).await?;
    let status = wait_observed(&ctx, "big", &observed).await?;
    assert_eq!(
        status.active_digest.as_deref(),
        Some(big_digest.as_str()),
        "{status:?}\n{}",
        controller.log_tail()
    );
    assert!(status.last_error.is_none(), "{status:?}");
    wait_metrics(port, &[pulls("disk", 1)], &controller).await?;
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}
