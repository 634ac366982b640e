//! The kubelet's side of wasmgpu's DRA allocations, judged by the kubelet's
//! own code: `control-plane kubelet-dra` runs the kubelet's DRA manager
//! (k8s.io/kubernetes/pkg/kubelet/cm/dra), registered through the kubelet's
//! plugin manager with a stub of NVIDIA's kubelet plugin (driver
//! `gpu.nvidia.com`, upstream's kubeletplugin helper) over gRPC, and asks
//! it to prepare the pods of a node as the kubelet does before starting
//! them. The manager reads each claim and refuses a pod its claim is not
//! reserved for or a claim not allocated; the plugin refuses, as NVIDIA's
//! driver does, a device outside the node's pool, one the node's slices do
//! not publish, or one another prepared claim holds.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmgpu_test_harness::{FakeNode, TestContext, control_plane_binary};

use super::dra::nvidia_slice;
use super::dra_claims::{
    claim, claim_template, clean_up, dra_pod, dra_pod_of_class, h100_node, nvidia_class,
    template_pod, upstream_agrees,
};
use super::{node_of, wait_bound};
use crate::support::*;

/// The kubelet's DRA manager on `node` prepares `pods` (of the test's
/// namespace) together, reads back their containers' CDI devices and
/// unprepares them: whether it accepted every pod, and its report.
async fn kubelet_prepares(ctx: &TestContext, node: &str, pods: &[&str]) -> Result<(bool, Value)> {
    let mut command = tokio::process::Command::new(control_plane_binary()?);
    command
        .arg("kubelet-dra")
        .arg("--kubeconfig")
        .arg(ctx.cluster().kubeconfig_path())
        .args(["--node", node]);
    for pod in pods {
        command.args(["--pod", &format!("{}/{pod}", ctx.namespace)]);
    }
    let output = command.output().await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        matches!(output.status.code(), Some(0 | 1)),
        "kubelet-dra failed ({}):\n{stdout}{stderr}",
        output.status
    );
    let report: Value =
        serde_json::from_str(&stdout).with_context(|| format!("kubelet-dra:\n{stdout}{stderr}"))?;
    Ok((output.status.success(), report))
}

/// The report's entry for `pod`.
fn pod_report<'a>(ctx: &TestContext, report: &'a Value, pod: &str) -> &'a Value {
    let name = format!("{}/{pod}", ctx.namespace);
    report["pods"]
        .as_array()
        .and_then(|pods| pods.iter().find(|p| p["pod"] == name.as_str()))
        .unwrap_or_else(|| panic!("no {name} in {report:#}"))
}

/// A claim's allocation as (request, driver, pool, device), sorted.
fn allocation_results(claim: &ResourceClaim) -> Vec<[String; 4]> {
    let mut results: Vec<[String; 4]> = claim
        .status
        .iter()
        .flat_map(|s| s.allocation.iter())
        .flat_map(|a| a.devices.iter())
        .flat_map(|d| d.results.iter().flatten())
        .map(|r| {
            [
                r.request.clone(),
                r.driver.clone(),
                r.pool.clone(),
                r.device.clone(),
            ]
        })
        .collect();
    results.sort();
    results
}

/// The devices the plugin prepared for a claim of the report, as
/// (request, driver, pool, device), sorted.
fn prepared_devices(claim: &Value) -> Vec<[String; 4]> {
    let field = |d: &Value, key: &str| d[key].as_str().unwrap_or_default().to_string();
    let mut devices: Vec<[String; 4]> = claim["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            [
                field(d, "request"),
                field(d, "driver"),
                field(d, "pool"),
                field(d, "device"),
            ]
        })
        .collect();
    devices.sort();
    devices
}

/// The names of a pod's ResourceClaims: by name, or as
/// `status.resourceClaimStatuses` records a template's.
fn claims_of(pod: &Pod) -> Vec<String> {
    let spec = pod.spec.as_ref().expect("spec");
    let made = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    spec.resource_claims
        .iter()
        .flatten()
        .map(|c| {
            c.resource_claim_name.clone().unwrap_or_else(|| {
                made.into_iter()
                    .flatten()
                    .find(|s| s.name == c.name)
                    .and_then(|s| s.resource_claim_name.clone())
                    .expect("the claim made from the template")
            })
        })
        .collect()
}

/// A pending pod no scheduler takes (`schedulerName: nobody`) using `claim`.
async fn unscheduled_pod(ctx: &TestContext, name: &str, claim: &str) -> Result<Pod> {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "nobody",
            "resourceClaims": [{"name": "gpus", "resourceClaimName": claim}],
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }))?;
    Ok(ctx
        .api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await?)
}

#[tokio::test]
async fn the_kubelets_dra_manager_prepares_every_pod_wasmgpu_places_with_exactly_its_claims_devices()
-> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-dra-kubelet").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let (node, slice_name) = h100_node(&ctx, 4).await?;
    let other = format!("{}-h100-b", ctx.namespace);
    FakeNode::new(&other)
        .label(GROUP_LABEL, &ctx.namespace)
        .create(&ctx.client)
        .await?;
    let other_slice = nvidia_slice(&other, 4)?;
    let other_slice_name = other_slice.metadata.name.clone().expect("named");
    let slices = ctx.cluster_api::<ResourceSlice>();
    slices.create(&PostParams::default(), &other_slice).await?;
    let controller = Controller::start(&ctx).await?;
    let claims = ctx.api::<ResourceClaim>();
    let pods = ctx.api::<Pod>();

    // 8 devices on two nodes, 8 asked, one pod at a time: a pod with two
    // claims (1 + 2), a claim by name asking 2, a template's claim asking 2,
    // a claim two pods share.
    claim(&ctx, "small", 1, "true", "gpu.nvidia.com").await?;
    claim(&ctx, "large", 2, "true", "gpu.nvidia.com").await?;
    dra_pod_of_class(
        &ctx,
        "both",
        &[("small", "small"), ("large", "large")],
        None,
    )
    .await?;
    wait_bound(&ctx, "both").await?;
    claim(
        &ctx,
        "train",
        2,
        "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')",
        "gpu.nvidia.com",
    )
    .await?;
    dra_pod(&ctx, "train", "train").await?;
    wait_bound(&ctx, "train").await?;
    claim_template(&ctx, "two-gpus", 2).await?;
    template_pod(&ctx, "worker", "two-gpus").await?;
    wait_bound(&ctx, "worker").await?;
    claim(&ctx, "shared", 1, "true", "gpu.nvidia.com").await?;
    dra_pod(&ctx, "first", "shared").await?;
    wait_bound(&ctx, "first").await?;
    dra_pod(&ctx, "second", "shared").await?;
    wait_bound(&ctx, "second").await?;
    upstream_agrees(&ctx).await?;

    // Each node's kubelet prepares all of its pods together.
    let mut on_node: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for name in ["both", "train", "worker", "first", "second"] {
        let pod = pods.get(name).await?;
        on_node
            .entry(node_of(&pod).expect("bound"))
            .or_default()
            .push(pod);
    }
    assert_eq!(
        on_node.keys().collect::<Vec<_>>(),
        [&node, &other],
        "8 devices asked of two nodes of 4"
    );
    let mut prepared = 0;
    for (node, bound) in &on_node {
        let names: Vec<&str> = bound
            .iter()
            .map(|p| p.metadata.name.as_deref().expect("named"))
            .collect();
        let (accepted, report) = kubelet_prepares(&ctx, node, &names).await?;
        assert!(accepted, "the kubelet of {node} refused:\n{report:#}");
        for pod in bound {
            let name = pod.metadata.name.as_deref().expect("named");
            let entry = pod_report(&ctx, &report, name);
            assert_eq!(entry["prepared"], true, "{entry:#}");
            assert_eq!(entry["unprepareError"], Value::Null, "{entry:#}");
            let mut cdi_ids: Vec<&str> = Vec::new();
            for claim_name in claims_of(pod) {
                let claim = claims.get(&claim_name).await?;
                let full = format!("{}/{claim_name}", ctx.namespace);
                let got = entry["claims"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["name"] == full.as_str()))
                    .unwrap_or_else(|| panic!("{full} not prepared for {name}: {entry:#}"));
                assert_eq!(got["uid"].as_str(), claim.metadata.uid.as_deref(), "{full}");
                let results = allocation_results(&claim);
                assert!(!results.is_empty(), "{full} is allocated");
                assert_eq!(
                    prepared_devices(got),
                    results,
                    "{name}: the driver prepared exactly {full}'s allocation"
                );
                cdi_ids.extend(
                    got["devices"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .flat_map(|d| d["cdiIDs"].as_array().into_iter().flatten())
                        .filter_map(Value::as_str),
                );
                prepared += results.len();
            }
            // The container runtime gets the driver's CDI devices of every
            // claim the container uses.
            let mut handed: Vec<&str> = entry["containers"]["main"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            handed.sort();
            cdi_ids.sort();
            assert_eq!(handed, cdi_ids, "{name}'s container: {entry:#}");
        }
    }
    // both 3, train 2, worker 2, and the shared device for each of its pods.
    assert_eq!(prepared, 9);

    clean_up(&ctx, controller, &slice_name, node).await?;
    slices
        .delete(&other_slice_name, &DeleteParams::default())
        .await?;
    remove_nodes(&ctx, &[other]).await
}

#[tokio::test]
async fn the_kubelets_dra_manager_refuses_a_pod_its_claim_is_not_reserved_for_and_the_driver_devices_it_cannot_serve()
-> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-dra-kubelet-no").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let (node, slice_name) = h100_node(&ctx, 2).await?;
    let controller = Controller::start(&ctx).await?;
    let claims = ctx.api::<ResourceClaim>();

    claim(&ctx, "train", 1, "true", "gpu.nvidia.com").await?;
    dra_pod(&ctx, "train", "train").await?;
    wait_bound(&ctx, "train").await?;
    let train = claims.get("train").await?;
    let train_uid = train.metadata.uid.clone().expect("uid");
    let device = allocation_results(&train)[0][3].clone();
    let (accepted, report) = kubelet_prepares(&ctx, &node, &["train"]).await?;
    assert!(accepted, "{report:#}");

    // The kubelet's own check: a pod the claim is not reserved for.
    let stranger = unscheduled_pod(&ctx, "stranger", "train").await?;
    let (accepted, report) = kubelet_prepares(&ctx, &node, &["stranger"]).await?;
    assert!(!accepted, "{report:#}");
    let entry = pod_report(&ctx, &report, "stranger");
    assert_eq!(
        entry["error"].as_str(),
        Some(
            format!(
                "prepare dynamic resources: pod stranger ({}) is not allowed to use ResourceClaim train ({train_uid})",
                stranger.metadata.uid.as_deref().expect("uid")
            )
            .as_str()
        ),
        "{entry:#}"
    );
    assert_eq!(entry["claims"], json!([]), "nothing reached the driver");

    // The driver's checks, through the kubelet: another node's kubelet
    // is asked to prepare train's device.
    let elsewhere = format!("{}-elsewhere", ctx.namespace);
    let (accepted, report) = kubelet_prepares(&ctx, &elsewhere, &["train"]).await?;
    assert!(!accepted, "{report:#}");
    assert_eq!(
        pod_report(&ctx, &report, "train")["error"].as_str(),
        Some(format!(
            "prepare dynamic resources: NodePrepareResources failed for ResourceClaim train: device gpu.nvidia.com/{node}/{device} is not in node {elsewhere}'s pool \"{elsewhere}\""
        ).as_str()),
    );

    // Claims written by hand, reserved for pods no scheduler takes: one
    // with train's device, one with a device the node does not publish.
    for (name, device) in [("copy", device.as_str()), ("ghost", "gpu-7")] {
        claim(&ctx, name, 1, "true", "gpu.nvidia.com").await?;
        let pod = unscheduled_pod(&ctx, name, name).await?;
        claims
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "allocation": {"devices": {"results": [{"request": "gpus",
                        "driver": "gpu.nvidia.com", "pool": node, "device": device}]}},
                    "reservedFor": [{"resource": "pods", "name": name, "uid": pod.metadata.uid}],
                }})),
            )
            .await?;
    }
    let (accepted, report) = kubelet_prepares(&ctx, &node, &["train", "copy", "ghost"]).await?;
    assert!(!accepted, "{report:#}");
    assert_eq!(pod_report(&ctx, &report, "train")["prepared"], true);
    assert_eq!(
        pod_report(&ctx, &report, "copy")["error"].as_str(),
        Some(format!(
            "prepare dynamic resources: NodePrepareResources failed for ResourceClaim copy: device gpu.nvidia.com/{node}/{device} is prepared for claim {}/train",
            ctx.namespace
        ).as_str()),
    );
    assert_eq!(
        pod_report(&ctx, &report, "ghost")["error"].as_str(),
        Some(format!(
            "prepare dynamic resources: NodePrepareResources failed for ResourceClaim ghost: device gpu.nvidia.com/{node}/gpu-7 is not in node {node}'s ResourceSlices"
        ).as_str()),
    );

    clean_up(&ctx, controller, &slice_name, node).await
}
