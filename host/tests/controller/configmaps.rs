//! Policies shipped as ConfigMaps: live swap while pods arrive, rejection of
//! broken and hostile versions (the old one stays active), unloading on
//! deletion, and the swap latency (measured, printed, not asserted).

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use wasmgpu::api::Sharing;
use wasmgpu::api::policy::{
    CONFIG_KEY, DIGEST_ANNOTATION, POLICY_GZ_KEY, POLICY_KEY, POLICY_LABEL, PolicyStatus,
    STATUS_ANNOTATION,
};
use wasmgpu::controller::{MAX_POLICY_BYTES, fingerprint};
use wasmgpu::engine::Digest;
use wasmgpu_test_harness::{TestContext, wait_for};

use super::common::{policy_bytes, policy_dir};
use super::support::*;
use super::{condition, wait_bound, wait_event, wait_resource};

pub(crate) fn status(configmap: &ConfigMap) -> Option<PolicyStatus> {
    serde_json::from_str(configmap.annotations().get(STATUS_ANNOTATION)?).ok()
}

fn digest_of(policy: &str) -> String {
    Digest::of(&policy_bytes(policy)).to_string()
}

/// Applies policy ConfigMap `name`: `bytes` under binaryData `key`, an
/// optional digest pin and config.json. Returns its fingerprint.
pub(crate) async fn put_policy(
    ctx: &TestContext,
    name: &str,
    key: &str,
    bytes: Vec<u8>,
    pin: Option<String>,
    config: Option<&str>,
) -> Result<Digest> {
    let configmap = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(POLICY_LABEL.into(), "true".into())])),
            annotations: pin.map(|p| BTreeMap::from([(DIGEST_ANNOTATION.into(), p)])),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(key.into(), ByteString(bytes))])),
        data: config.map(|c| BTreeMap::from([(CONFIG_KEY.into(), c.into())])),
        ..Default::default()
    };
    let mut value = serde_json::to_value(&configmap)?;
    value["apiVersion"] = "v1".into();
    value["kind"] = "ConfigMap".into();
    let applied = ctx
        .api::<ConfigMap>()
        .patch(
            name,
            &PatchParams::apply("wasmgpu-test").force(),
            &Patch::Apply(&value),
        )
        .await
        .with_context(|| format!("applying policy ConfigMap {name}"))?;
    Ok(fingerprint(&applied))
}

/// Runs `wasmgpu policy publish`; returns the ConfigMap's fingerprint.
async fn publish(
    ctx: &TestContext,
    file: &Path,
    name: &str,
    config: Option<&Path>,
) -> Result<Digest> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_wasmgpu"));
    command
        .args(["policy", "publish"])
        .arg(file)
        .args(["--name", name, "--namespace", &ctx.namespace])
        .env("KUBECONFIG", ctx.cluster().kubeconfig_path());
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let output = command.output().await?;
    ensure!(
        output.status.success(),
        "publish failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let published = ctx.api::<ConfigMap>().get(name).await?;
    Ok(fingerprint(&published))
}

/// Waits until the controller's status on ConfigMap `name` is about the
/// inputs `observed`.
pub(crate) async fn wait_observed(
    ctx: &TestContext,
    name: &str,
    observed: &Digest,
) -> Result<PolicyStatus> {
    let configmap = wait_for(&ctx.api::<ConfigMap>(), name, ACT, "status observed", |c| {
        c.and_then(status)
            .is_some_and(|s| s.observed.as_deref() == Some(observed.as_str()))
    })
    .await?;
    Ok(configmap.as_ref().and_then(status).expect("observed"))
}

/// Pod → digest of the policy version that decided it, for the bound pods
/// of GPUResource `resource` (from each pod's recorded allocation).
pub(crate) async fn pod_digests(
    ctx: &TestContext,
    resource: &str,
) -> Result<BTreeMap<String, String>> {
    Ok(ctx
        .api::<Pod>()
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter_map(|pod| {
            let held = allocation(pod)?;
            (held.resource == resource).then(|| (pod.name_any(), held.policy.digest))
        })
        .collect())
}

#[tokio::test]
async fn a_configmap_swap_takes_over_while_pods_arrive() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("cm-swap").await?;
    install_crds(&ctx).await?;
    let nodes: Vec<String> = (0..3).map(|i| format!("{}-n{i}", ctx.namespace)).collect();
    for node in &nodes {
        gpu_node(&ctx, node, 8).await?;
    }
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, Some("swapped")).await?;
    let mut controller = Controller::start(&ctx).await?;
    let (binpack, spread) = (digest_of("binpack"), digest_of("spread"));

    let observed = publish(
        &ctx,
        &policy_dir().join("wasmgpu_binpack.wasm"),
        "swapped",
        None,
    )
    .await?;
    let loaded = wait_observed(&ctx, "swapped", &observed).await?;
    assert_eq!(loaded.active_digest.as_deref(), Some(binpack.as_str()));
    assert!(loaded.last_error.is_none(), "{loaded:?}");

    // Pods arrive every 50 ms until the swap is seen active, then 6 more.
    let (swapped_tx, swapped_rx) = tokio::sync::watch::channel(false);
    let pods: Vec<Pod> = (0..24)
        .map(|i| pod(&ctx, &format!("p-{i}"), "one"))
        .collect();
    let api = ctx.api::<Pod>();
    let creator = tokio::spawn(async move {
        let mut created: Vec<(String, bool)> = Vec::new();
        let mut after = 0;
        for pod in pods {
            let swapped = *swapped_rx.borrow();
            if swapped {
                after += 1;
                if after > 6 {
                    break;
                }
            }
            api.create(&PostParams::default(), &pod).await?;
            created.push((pod.name_any(), swapped));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::Ok(created)
    });
    wait_bound(&ctx, "p-2").await?;
    let observed = publish(
        &ctx,
        &policy_dir().join("wasmgpu_spread.wasm"),
        "swapped",
        None,
    )
    .await?;
    let now = wait_observed(&ctx, "swapped", &observed).await?;
    swapped_tx.send(true)?;
    assert_eq!(now.active_digest.as_deref(), Some(spread.as_str()));
    let created = creator.await??;
    controller.check_alive()?;

    for (name, _) in &created {
        wait_bound(&ctx, name).await?;
    }
    let entries: Vec<wasmgpu::api::PodAllocation> = ctx
        .api::<Pod>()
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter_map(allocation)
        .collect();
    // Each pod decided once: one allocation each, no GPU twice.
    assert_eq!(entries.len(), created.len(), "{entries:?}");
    let gpus: Vec<&str> = entries
        .iter()
        .flat_map(|e| e.devices.iter().map(|d| d.uuid.as_str()))
        .collect();
    assert_eq!(
        gpus.iter().collect::<HashSet<_>>().len(),
        gpus.len(),
        "{gpus:?}"
    );
    let digests = pod_digests(&ctx, "one").await?;
    for name in ["p-0", "p-1", "p-2"] {
        assert_eq!(digests[name], binpack, "{name} was decided before the swap");
    }
    let after: Vec<&String> = created
        .iter()
        .filter(|(_, swapped)| *swapped)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(after.len(), 6);
    for name in after {
        assert_eq!(digests[name], spread, "{name} arrived after the swap");
    }
    assert!(digests.values().all(|d| *d == binpack || *d == spread));
    for entry in entries {
        assert_eq!(entry.policy.name, "swapped");
        assert_eq!(entry.resource, "one");
    }
    for digest in [&binpack, &spread] {
        wait_event(&ctx, "swapped", "PolicyLoaded", |reason, note| {
            reason == "PolicyLoaded" && note.contains(digest.as_str())
        })
        .await?;
    }

    // `policy list` shows what the controller made of it.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(["policy", "list", "--output", "json", "-n", &ctx.namespace])
        .env("KUBECONFIG", ctx.cluster().kubeconfig_path())
        .output()
        .await?;
    ensure!(output.status.success(), "{output:?}");
    let listed: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    assert_eq!(listed[0]["name"], "swapped");
    assert_eq!(listed[0]["activeDigest"], spread.as_str());
    assert!(listed[0]["loadedAt"].is_string(), "{listed}");

    drop(controller);
    remove_nodes(&ctx, &nodes).await
}

/// A version to reject, and a piece of the reason it must be rejected with.
struct Broken {
    what: &'static str,
    key: &'static str,
    bytes: Vec<u8>,
    pin: Option<String>,
    config: Option<&'static str>,
    reason: &'static [&'static str],
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).expect("gzip in memory");
    encoder.finish().expect("gzip in memory")
}

fn broken_versions() -> Vec<Broken> {
    let hostile = policy_bytes("hostile-policy");
    let binpack = policy_bytes("binpack");
    let case = |what, key, bytes, pin, config, reason| Broken {
        what,
        key,
        bytes,
        pin,
        config,
        reason,
    };
    vec![
        case(
            "not Wasm",
            POLICY_KEY,
            b"#!/bin/sh\necho not a policy\n".to_vec(),
            None,
            None,
            &["not a WebAssembly binary"],
        ),
        case(
            "a core module",
            POLICY_KEY,
            wat::parse_str("(module (func (export \"allocate\")))").expect("wat"),
            None,
            None,
            &["core WebAssembly module"],
        ),
        case(
            "a component of another world",
            POLICY_KEY,
            wat::parse_str("(component (core module) )").expect("wat"),
            None,
            None,
            &["not a wasmgpu:policy"],
        ),
        case(
            "a digest mismatch",
            POLICY_KEY,
            binpack.clone(),
            Some(Digest::of(b"something else").to_string()),
            None,
            &["digest mismatch"],
        ),
        case(
            "an oversized payload (gzip bomb)",
            POLICY_GZ_KEY,
            gz(&vec![0u8; MAX_POLICY_BYTES + 1]),
            None,
            None,
            &["over the limit"],
        ),
        case(
            "a trap in the canary",
            POLICY_KEY,
            hostile.clone(),
            None,
            Some("\"trap\""),
            &["canary round failed", "trapped"],
        ),
        case(
            "an infinite loop",
            POLICY_KEY,
            hostile.clone(),
            None,
            Some("\"loop\""),
            &["canary round failed"],
        ),
        case(
            "a memory bomb",
            POLICY_KEY,
            hostile.clone(),
            None,
            Some("\"memory-bomb\""),
            &["canary round failed"],
        ),
        case(
            "unbounded recursion",
            POLICY_KEY,
            hostile.clone(),
            None,
            Some("\"recursion\""),
            &["canary round failed"],
        ),
        case(
            "invalid decisions (GPUs that do not exist)",
            POLICY_KEY,
            hostile,
            None,
            Some("\"ghost-gpu\""),
            &["canary round's decisions are invalid"],
        ),
    ]
}

#[tokio::test]
async fn broken_and_hostile_versions_are_rejected_and_the_active_one_stays() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("cm-reject").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    gpuresource(&ctx, "guarded", 1, Sharing::Exclusive, 0, Some("guarded")).await?;
    let mut controller = Controller::start(&ctx).await?;
    let binpack = digest_of("binpack");
    let observed = put_policy(
        &ctx,
        "guarded",
        POLICY_KEY,
        policy_bytes("binpack"),
        Some(binpack.clone()),
        None,
    )
    .await?;
    let status = wait_observed(&ctx, "guarded", &observed).await?;
    assert_eq!(status.active_digest.as_deref(), Some(binpack.as_str()));

    for broken in broken_versions() {
        let started = Instant::now();
        let observed = put_policy(
            &ctx,
            "guarded",
            broken.key,
            broken.bytes,
            broken.pin,
            broken.config,
        )
        .await?;
        let status = wait_observed(&ctx, "guarded", &observed)
            .await
            .with_context(|| format!("{}:\n{}", broken.what, controller.log_tail()))?;
        let error = status.last_error.clone().unwrap_or_default();
        println!(
            "rejected {} in {:?}: {error}",
            broken.what,
            started.elapsed()
        );
        assert!(
            broken.reason.iter().all(|r| error.contains(r)),
            "{}: {status:?}",
            broken.what
        );
        assert_eq!(
            status.active_digest.as_deref(),
            Some(binpack.as_str()),
            "{}: the old version stays",
            broken.what
        );
        let still = format!("{binpack} stays active");
        wait_event(&ctx, "guarded", broken.what, |reason, note| {
            reason == "PolicyRejected"
                && broken.reason.iter().all(|r| note.contains(r))
                && note.contains(&still)
        })
        .await?;
        controller.check_alive()?;
    }

    // The old version still decides.
    create_pod(&ctx, "still", "guarded").await?;
    wait_bound(&ctx, "still").await?;
    assert_eq!(pod_digests(&ctx, "guarded").await?["still"], binpack);

    // A policy whose only version was rejected: its pods wait, and the
    // condition says why.
    gpuresource(&ctx, "never", 1, Sharing::Exclusive, 0, Some("never")).await?;
    let observed = put_policy(&ctx, "never", POLICY_KEY, b"nope".to_vec(), None, None).await?;
    let status = wait_observed(&ctx, "never", &observed).await?;
    assert!(status.active_digest.is_none(), "{status:?}");
    create_pod(&ctx, "hopeful", "never").await?;
    wait_resource(&ctx, "never", "PolicyNotFound with the rejection", |r| {
        condition(r, "PolicyError").is_some_and(|c| {
            c.reason == "PolicyNotFound"
                && c.message
                    .contains("its latest version was rejected: not a WebAssembly binary")
        })
    })
    .await?;

    // Deleting the ConfigMap unloads the policy: its pods wait, with a condition.
    ctx.api::<ConfigMap>()
        .delete("guarded", &DeleteParams::default())
        .await?;
    // The ConfigMap and the pod come through two watches: the pod is made
    // once the controller has seen the deletion, or a round may place it
    // with the version still loaded.
    controller
        .wait_log(
            &["Unloaded policy", "policy=guarded"],
            Duration::from_secs(30),
        )
        .await?;
    create_pod(&ctx, "orphan", "guarded").await?;
    let waiting = wait_resource(&ctx, "guarded", "PolicyNotFound", |r| {
        condition(r, "PolicyError").is_some_and(|c| c.reason == "PolicyNotFound")
    })
    .await
    .with_context(|| controller.log_tail())?;
    assert!(
        condition(&waiting, "PolicyError")
            .is_some_and(|c| c.status == "True" && c.message.contains("guarded")),
        "{waiting:?}"
    );
    let orphan = ctx.api::<Pod>().get("orphan").await?;
    assert!(orphan.spec.and_then(|s| s.node_name).is_none());
    controller.check_alive()?;
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}

/// Time from the ConfigMap update to the first decision by the new version:
/// a pod waits under a version that decides nothing (the hostile policy's
/// `noop`), the ConfigMap is updated to binpack, and the clock stops when the
/// pod's ledger entry (made by binpack) is seen. Printed, not asserted.
#[tokio::test]
async fn swap_latency_is_measured() -> Result<()> {
    const SWAPS: usize = 20;
    let _turn = exclusive().await;
    let ctx = TestContext::new("cm-latency").await?;
    install_crds(&ctx).await?;
    let nodes: Vec<String> = (0..3).map(|i| format!("{}-n{i}", ctx.namespace)).collect();
    for node in &nodes {
        gpu_node(&ctx, node, 8).await?;
    }
    gpuresource(&ctx, "timed", 1, Sharing::Exclusive, 0, Some("timed")).await?;
    let mut controller = Controller::start(&ctx).await?;
    let (binpack, hostile) = (policy_bytes("binpack"), policy_bytes("hostile-policy"));
    let binpack_digest = Digest::of(&binpack).to_string();
    let mut latencies = Vec::new();
    for i in 0..SWAPS {
        let observed = put_policy(
            &ctx,
            "timed",
            POLICY_KEY,
            hostile.clone(),
            None,
            Some("\"noop\""),
        )
        .await?;
        wait_observed(&ctx, "timed", &observed).await?;
        let name = format!("t-{i}");
        create_pod(&ctx, &name, "timed").await?;
        let total = format!("{i}/{}", i + 1);
        wait_resource(&ctx, "timed", "the new pod waiting", |r| {
            r.status.as_ref().and_then(|s| s.pods.as_deref()) == Some(total.as_str())
        })
        .await
        .with_context(|| controller.log_tail())?;
        let started = Instant::now();
        let observed = put_policy(&ctx, "timed", POLICY_KEY, binpack.clone(), None, None).await?;
        wait_bound(&ctx, &name).await?;
        latencies.push(started.elapsed());
        assert_eq!(pod_digests(&ctx, "timed").await?[&name], binpack_digest);
        // The pod may be bound before the ConfigMap's status says binpack
        // is observed; until it does, it still says the hostile version
        // is, and the next swap back to it would look observed at once.
        wait_observed(&ctx, "timed", &observed).await?;
    }
    controller.check_alive()?;
    let first = latencies[0];
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    println!(
        "swap latency over {SWAPS} swaps (update → first decision by the new version): \
         first {first:?}, median {:?}, p99 {:?}, max {:?}",
        at(0.5),
        at(0.99),
        latencies[latencies.len() - 1]
    );
    drop(controller);
    remove_nodes(&ctx, &nodes).await
}

/// `--on-policy-failure last-good`: a version that passes the canary but
/// fails on the real load (the hostile policy's `trap-over-2`) is active;
/// its rounds are retried with the version it replaced, whose digest the
/// ledger then records.
#[tokio::test]
async fn last_good_retries_a_failed_round_with_the_previous_version() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("cm-last-good").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    gpuresource(&ctx, "fallible", 1, Sharing::Exclusive, 0, Some("fallible")).await?;
    let mut controller =
        Controller::start_with(&ctx, &["--on-policy-failure".into(), "last-good".into()]).await?;
    let binpack = digest_of("binpack");
    let hostile = digest_of("hostile-policy");
    let observed = put_policy(
        &ctx,
        "fallible",
        POLICY_KEY,
        policy_bytes("binpack"),
        None,
        None,
    )
    .await?;
    wait_observed(&ctx, "fallible", &observed).await?;
    let observed = put_policy(
        &ctx,
        "fallible",
        POLICY_KEY,
        policy_bytes("hostile-policy"),
        None,
        Some("\"trap-over-2\""),
    )
    .await?;
    let status = wait_observed(&ctx, "fallible", &observed).await?;
    assert_eq!(status.active_digest.as_deref(), Some(hostile.as_str()));

    for i in 0..3 {
        create_pod(&ctx, &format!("f-{i}"), "fallible").await?;
    }
    for i in 0..3 {
        wait_bound(&ctx, &format!("f-{i}")).await?;
    }
    let digests = pod_digests(&ctx, "fallible").await?;
    assert_eq!(digests.len(), 3, "{digests:?}");
    assert!(digests.values().all(|d| *d == binpack), "{digests:?}");
    controller.check_alive()?;
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}
