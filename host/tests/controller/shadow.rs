//! Shadow policies: a candidate runs beside the policy that decides, on
//! the same snapshots, compared and never applied; one that fails changes
//! nothing. The time from a pod's creation to its binding is measured with
//! and without a shadow (printed, not asserted).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use wasmgpu::api::Sharing;
use wasmgpu::api::policy::{SHADOW_STATUS_ANNOTATION, ShadowStatus};
use wasmgpu::controller::fingerprint;
use wasmgpu::engine::Digest;
use wasmgpu_test_harness::{TestContext, wait_for};

use super::common::{policy_bytes, policy_dir};
use super::configmaps::wait_observed;
use super::operate::{free_port, get};
use super::support::*;
use super::{devices, node_of, wait_bound};

/// Runs `wasmgpu ARGS` against the test's cluster; returns its standard
/// output, failing with its standard error.
async fn wasmgpu(ctx: &TestContext, args: &[&str]) -> Result<String> {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(args)
        .env("KUBECONFIG", ctx.cluster().kubeconfig_path())
        .output()
        .await?;
    ensure!(
        output.status.success(),
        "wasmgpu {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?)
}

/// Publishes `file` as shadow `name` of `primary` with `wasmgpu policy
/// publish --shadow-of`; returns the ConfigMap's fingerprint.
async fn publish_shadow(
    ctx: &TestContext,
    file: &Path,
    name: &str,
    primary: &str,
    config: Option<&Path>,
) -> Result<Digest> {
    let file = file.display().to_string();
    let config = config.map(|c| c.display().to_string());
    let mut args = vec![
        "policy",
        "publish",
        file.as_str(),
        "--name",
        name,
        "--shadow-of",
        primary,
        "-n",
        &ctx.namespace,
    ];
    if let Some(config) = &config {
        args.extend(["--config", config.as_str()]);
    }
    let printed = wasmgpu(ctx, &args).await?;
    ensure!(
        printed.contains(&format!("as a shadow of {primary}")),
        "{printed}"
    );
    Ok(fingerprint(&ctx.api::<ConfigMap>().get(name).await?))
}

fn shadow_status(configmap: &ConfigMap) -> Option<ShadowStatus> {
    serde_json::from_str(configmap.annotations().get(SHADOW_STATUS_ANNOTATION)?).ok()
}

/// Waits until shadow `name`'s status satisfies `cond`.
async fn wait_shadow(
    ctx: &TestContext,
    name: &str,
    what: &str,
    cond: impl Fn(&ShadowStatus) -> bool,
) -> Result<ShadowStatus> {
    let configmap = wait_for(&ctx.api::<ConfigMap>(), name, ACT, what, |c| {
        c.and_then(shadow_status).is_some_and(|s| cond(&s))
    })
    .await?;
    Ok(configmap
        .as_ref()
        .and_then(shadow_status)
        .expect("just seen"))
}

/// Creates pods `names` one at a time, each once the previous is bound;
/// returns each one's time from creation to binding.
async fn one_by_one(ctx: &TestContext, names: &[String]) -> Result<Vec<Duration>> {
    let mut times = Vec::new();
    for name in names {
        let created = Instant::now();
        create_pod(ctx, name, "one").await?;
        wait_bound(ctx, name).await?;
        times.push(created.elapsed());
    }
    Ok(times)
}

fn median_and_max(times: &[Duration]) -> (Duration, Duration) {
    let mut sorted = times.to_vec();
    sorted.sort();
    (sorted[sorted.len() / 2], sorted[sorted.len() - 1])
}

/// Pod → (node, GPUs) of the test's bound pods.
async fn placements(ctx: &TestContext) -> Result<BTreeMap<String, (String, Vec<String>)>> {
    Ok(ctx
        .api::<Pod>()
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter_map(|pod| {
            let mut gpus = devices(pod);
            gpus.sort();
            Some((pod.name_any(), (node_of(pod)?, gpus)))
        })
        .collect())
}

#[tokio::test]
async fn a_shadow_is_compared_with_its_primary_and_never_applied() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("shadow").await?;
    install_crds(&ctx).await?;
    let nodes: Vec<String> = (0..4).map(|i| format!("{}-n{i}", ctx.namespace)).collect();
    for node in &nodes {
        gpu_node(&ctx, node, 8).await?;
    }
    // The default policy: binpack.
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    let port = free_port()?;
    let mut controller = Controller::start_with(
        &ctx,
        &["--http-address".into(), format!("127.0.0.1:{port}")],
    )
    .await?;

    let alone: Vec<String> = (0..7).map(|i| format!("alone-{i}")).collect();
    let times_alone = one_by_one(&ctx, &alone).await?;

    let observed = publish_shadow(
        &ctx,
        &policy_dir().join("wasmgpu_spread.wasm"),
        "spread-next",
        "binpack",
        None,
    )
    .await?;
    let loaded = wait_observed(&ctx, "spread-next", &observed).await?;
    assert_eq!(
        loaded.active_digest.as_deref(),
        Some(Digest::of(&policy_bytes("spread")).as_str()),
        "{loaded:?}"
    );
    assert_eq!(loaded.shadow_of.as_deref(), Some("binpack"));
    let beside: Vec<String> = (0..7).map(|i| format!("beside-{i}")).collect();
    let times_beside = one_by_one(&ctx, &beside).await?;
    controller.check_alive()?;

    // Bound as binpack decides: fourteen one-GPU pods fill one node of 8,
    // then 6 of another (spread would have put 3 or 4 on each of the 4).
    let placed = placements(&ctx).await?;
    assert_eq!(placed.len(), 14, "{placed:?}");
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for (node, _) in placed.values() {
        *per_node.entry(node.as_str()).or_default() += 1;
    }
    let mut counts: Vec<usize> = per_node.values().copied().collect();
    counts.sort();
    assert_eq!(counts, [6, 8], "{per_node:?}");
    let digests = super::configmaps::pod_digests(&ctx, "one").await?;
    let binpack = Digest::of(&policy_bytes("binpack")).to_string();
    assert!(digests.values().all(|d| *d == binpack), "{digests:?}");

    // The shadow's status: spread chose other nodes, each difference names
    // the primary's placement as the pod was bound.
    let status = wait_shadow(&ctx, "spread-next", "pods placed differently", |s| {
        s.rounds_compared >= 7 && s.totals.other_node > 0
    })
    .await?;
    assert_eq!(status.primary, "binpack");
    assert_eq!(status.rounds_failed, 0, "{status:?}");
    assert_eq!(status.totals.refused, 0, "{status:?}");
    let differences: Vec<_> = status.recent.iter().flat_map(|r| &r.differences).collect();
    ensure!(!differences.is_empty(), "{status:?}");
    for difference in &differences {
        let pod = difference.pod.rsplit('/').next().expect("namespace/name");
        assert!(pod.starts_with("beside-"), "{difference:?}");
        let primary = difference.primary.as_ref().expect("binpack placed it");
        assert_eq!(
            (&primary.node, &primary.gpus),
            (&placed[pod].0, &placed[pod].1),
            "{difference:?}"
        );
        let shadow = difference.shadow.as_ref().expect("spread placed it");
        assert_ne!(shadow.node, primary.node, "{difference:?}");
    }

    // Metrics, by shadow and primary.
    let deadline = Instant::now() + ACT;
    let metrics = loop {
        let (_, body) = get(port, "/metrics").await?;
        if body.contains("wasmgpu_shadow_placements_total{shadow=\"spread-next\",primary=\"binpack\",outcome=\"other-node\"}") {
            break body;
        }
        if Instant::now() > deadline {
            bail!("no shadow placements in:\n{body}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for expected in [
        "wasmgpu_shadow_call_seconds_count{shadow=\"spread-next\",primary=\"binpack\"}",
        "wasmgpu_shadow_rounds_total{shadow=\"spread-next\",primary=\"binpack\",result=\"compared\"}",
    ] {
        assert!(metrics.contains(expected), "{expected} missing:\n{metrics}");
    }
    assert!(!metrics.contains("result=\"failed\""), "{metrics}");

    // The CLI: the summary and the differing pods, and the list's column.
    let shown = wasmgpu(
        &ctx,
        &["policy", "shadow", "spread-next", "-n", &ctx.namespace],
    )
    .await?;
    let first = &differences[0];
    for expected in [
        "spread-next",
        "of binpack",
        "compared, 0 failed",
        "other-node",
        "pods decided differently",
        first.pod.as_str(),
        first.primary.as_ref().expect("placed").node.as_str(),
    ] {
        assert!(
            shown.contains(expected),
            "{expected:?} missing from:\n{shown}"
        );
    }
    let json: serde_json::Value = serde_json::from_str(
        &wasmgpu(
            &ctx,
            &[
                "policy",
                "shadow",
                "spread-next",
                "-n",
                &ctx.namespace,
                "--output",
                "json",
            ],
        )
        .await?,
    )?;
    assert_eq!(json["shadowOf"], "binpack");
    assert!(
        json["status"]["totals"]["otherNode"].as_u64() > Some(0),
        "{json}"
    );
    let listed = wasmgpu(&ctx, &["policy", "list", "-n", &ctx.namespace]).await?;
    let row = listed
        .lines()
        .find(|l| l.starts_with("spread-next"))
        .with_context(|| format!("no spread-next in:\n{listed}"))?;
    assert!(row.contains("binpack"), "{listed}");
    assert!(
        listed.contains("SHADOW-OF") && listed.contains("CONFIG"),
        "{listed}"
    );
    // Not a shadow: told how to make one.
    let error = tokio::process::Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(["policy", "shadow", "nothing-here", "-n", &ctx.namespace])
        .env("KUBECONFIG", ctx.cluster().kubeconfig_path())
        .output()
        .await?;
    assert!(!error.status.success());
    assert!(
        String::from_utf8_lossy(&error.stderr).contains("--shadow-of PRIMARY"),
        "{error:?}"
    );

    // A restart keeps the counts: the new process takes up what the old one
    // wrote, for the same version, and counts on from there.
    controller.kill().await?;
    let before = shadow_status(&ctx.api::<ConfigMap>().get("spread-next").await?)
        .context("the shadow's status is written")?;
    let mut controller = Controller::start(&ctx).await?;
    let after: Vec<String> = (0..2).map(|i| format!("after-{i}")).collect();
    one_by_one(&ctx, &after).await?;
    let resumed = wait_shadow(&ctx, "spread-next", "counts past the restart", |s| {
        s.rounds_compared > before.rounds_compared
    })
    .await?;
    assert_eq!(resumed.since, before.since, "{before:?}\n{resumed:?}");
    assert!(
        resumed.totals.other_node >= before.totals.other_node
            && resumed.totals.same >= before.totals.same,
        "{before:?}\n{resumed:?}"
    );
    controller.check_alive()?;

    // Published again without --shadow-of: it decides under its own name,
    // and keeps no comparison.
    let spread = policy_dir()
        .join("wasmgpu_spread.wasm")
        .display()
        .to_string();
    wasmgpu(
        &ctx,
        &[
            "policy",
            "publish",
            &spread,
            "--name",
            "spread-next",
            "-n",
            &ctx.namespace,
        ],
    )
    .await?;
    let observed = fingerprint(&ctx.api::<ConfigMap>().get("spread-next").await?);
    let decides = wait_observed(&ctx, "spread-next", &observed).await?;
    assert_eq!(decides.shadow_of, None, "{decides:?}");
    let configmap = wait_for(
        &ctx.api::<ConfigMap>(),
        "spread-next",
        ACT,
        "shadow status removed",
        |c| c.is_some_and(|c| !c.annotations().contains_key(SHADOW_STATUS_ANNOTATION)),
    )
    .await?
    .expect("exists");
    assert!(
        !configmap
            .annotations()
            .contains_key(wasmgpu::api::policy::SHADOW_OF_ANNOTATION),
        "{:?}",
        configmap.annotations()
    );

    println!("{shown}");
    let (median_alone, max_alone) = median_and_max(&times_alone);
    let (median_beside, max_beside) = median_and_max(&times_beside);
    let calls: Vec<String> = status
        .recent
        .iter()
        .filter_map(|r| r.call_micros)
        .map(|us| format!("{:.2}ms", us as f64 / 1000.0))
        .collect();
    println!(
        "creation to binding, one pod at a time ({} pods each): without a shadow median \
         {median_alone:?} max {max_alone:?} (all: {times_alone:?}); with a shadow median \
         {median_beside:?} max {max_beside:?} (all: {times_beside:?}); shadow calls: {calls:?}",
        times_alone.len()
    );
    drop(controller);
    remove_nodes(&ctx, &nodes).await
}

#[tokio::test]
async fn a_shadow_that_traps_never_affects_the_primary() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("shadow-trap").await?;
    install_crds(&ctx).await?;
    let nodes: Vec<String> = (0..2).map(|i| format!("{}-n{i}", ctx.namespace)).collect();
    for node in &nodes {
        gpu_node(&ctx, node, 8).await?;
    }
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    // Passes the canary (two pods), traps with more than two pending.
    let config =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{}-trap.json", ctx.namespace));
    std::fs::write(&config, "\"trap-over-2\"")?;
    publish_shadow(
        &ctx,
        &policy_dir().join("wasmgpu_hostile_policy.wasm"),
        "hostile",
        "binpack",
        Some(&config),
    )
    .await?;
    // Pending before the controller starts: its first round (after the
    // shadow is loaded with the list) decides all five at once.
    let pods: Vec<String> = (0..5).map(|i| format!("t-{i}")).collect();
    for pod in &pods {
        create_pod(&ctx, pod, "one").await?;
    }
    let mut controller = Controller::start(&ctx).await?;
    for pod in &pods {
        wait_bound(&ctx, pod).await?;
    }
    controller.check_alive()?;
    let placed = placements(&ctx).await?;
    let used: std::collections::BTreeSet<&String> = placed.values().map(|(n, _)| n).collect();
    assert_eq!(used.len(), 1, "binpack packs them on one node: {placed:?}");
    let digests = super::configmaps::pod_digests(&ctx, "one").await?;
    let binpack = Digest::of(&policy_bytes("binpack")).to_string();
    assert_eq!(digests.len(), 5, "{digests:?}");
    assert!(digests.values().all(|d| *d == binpack), "{digests:?}");

    let status = wait_shadow(&ctx, "hostile", "a failed round", |s| s.rounds_failed >= 1).await?;
    let error = status.last_error.as_deref().expect("the trap is recorded");
    assert!(error.contains("(trap)"), "{error}");
    assert_eq!(status.totals, Default::default(), "{status:?}");
    assert!(
        status
            .recent
            .iter()
            .any(|r| r.error.is_some() && r.pending >= 3),
        "{status:?}"
    );
    let shown = wasmgpu(&ctx, &["policy", "shadow", "hostile", "-n", &ctx.namespace]).await?;
    let failed = format!("{} failed", status.rounds_failed);
    assert!(shown.contains(&failed), "{failed:?} missing from:\n{shown}");
    assert!(shown.contains("(trap)"), "{shown}");
    drop(controller);
    remove_nodes(&ctx, &nodes).await
}
