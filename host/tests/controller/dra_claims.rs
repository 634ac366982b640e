//! DRA pods on the real API server: pods with `schedulerName: wasmgpu` and
//! `spec.resourceClaims` get devices of NVIDIA-shaped ResourceSlices chosen
//! by the shipped binpack, written as kube-scheduler writes them (the
//! finalizer, one status update with `allocation` and `reservedFor`, then
//! the Binding), with the controller under the RBAC of `deploy/`. The local
//! control plane runs kube-controller-manager's resourceclaim controller
//! (templates' claims, releases), and upstream's own code judges every
//! allocation (`control-plane dra-check`, built on
//! k8s.io/dynamic-resource-allocation/cel).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmgpu_test_harness::{
    FakeNode, PodPhase, TestContext, control_plane_binary, set_pod_phase, wait_for,
};

use super::dra::nvidia_slice;
use super::{events_for, node_of, wait_bound};
use crate::support::*;

/// NVIDIA's DeviceClass `gpu.nvidia.com`, as its driver's chart ships it.
pub(super) async fn nvidia_class(ctx: &TestContext) -> Result<()> {
    let classes: Api<DeviceClass> = ctx.cluster_api();
    let class: DeviceClass = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {
            "selectors": [{"cel": {"expression":
                "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
            "extendedResourceName": "nvidia.com/gpu",
        },
    }))?;
    match classes.create(&PostParams::default(), &class).await {
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        other => other.map(drop).map_err(Into::into),
    }
}

/// A Ready node of the test whose `gpus` H100s only NVIDIA's DRA driver
/// publishes (one ResourceSlice); its name and the slice's.
pub(super) async fn h100_node(ctx: &TestContext, gpus: u32) -> Result<(String, String)> {
    let node = format!("{}-h100", ctx.namespace);
    FakeNode::new(&node)
        .label(GROUP_LABEL, &ctx.namespace)
        .create(&ctx.client)
        .await?;
    let slice = nvidia_slice(&node, gpus)?;
    let slice_name = slice.metadata.name.clone().expect("named");
    ctx.cluster_api::<ResourceSlice>()
        .create(&PostParams::default(), &slice)
        .await?;
    Ok((node, slice_name))
}

/// A claim asking `count` GPUs of the class, with one CEL selector.
pub(super) async fn claim(
    ctx: &TestContext,
    name: &str,
    count: u32,
    selector: &str,
    class: &str,
) -> Result<()> {
    let claim: ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": class,
            "count": count,
            "selectors": [{"cel": {"expression": selector}}],
        }}]}},
    }))?;
    ctx.api::<ResourceClaim>()
        .create(&PostParams::default(), &claim)
        .await?;
    Ok(())
}

/// A pending pod of wasmgpu using the claim `claim` (by name), restricted
/// to the test's nodes.
pub(super) async fn dra_pod(ctx: &TestContext, name: &str, claim: &str) -> Result<Pod> {
    dra_pod_with(ctx, name, &[("gpus", claim)]).await
}

/// A pending pod of wasmgpu using `claims` (pod-level name, ResourceClaim
/// name), its one container using them all, restricted to the test's
/// nodes: a pod another test leaves pending never lands on this test's.
async fn dra_pod_with(ctx: &TestContext, name: &str, claims: &[(&str, &str)]) -> Result<Pod> {
    dra_pod_of_class(ctx, name, claims, None).await
}

/// [`dra_pod_with`], of PriorityClass `class` when given.
pub(super) async fn dra_pod_of_class(
    ctx: &TestContext,
    name: &str,
    claims: &[(&str, &str)],
    class: Option<&str>,
) -> Result<Pod> {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "wasmgpu",
            "priorityClassName": class,
            "nodeSelector": {GROUP_LABEL: ctx.namespace},
            "resourceClaims": claims.iter()
                .map(|(name, claim)| json!({"name": name, "resourceClaimName": claim}))
                .collect::<Vec<_>>(),
            "containers": [{
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"claims": claims.iter()
                    .map(|(name, _)| json!({"name": name}))
                    .collect::<Vec<_>>()},
            }],
        },
    }))?;
    Ok(ctx
        .api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await?)
}

/// A ResourceClaimTemplate whose claims ask `count` GPUs of the class
/// `gpu.nvidia.com` (request `gpus`).
pub(super) async fn claim_template(ctx: &TestContext, name: &str, count: u32) -> Result<()> {
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "count": count}}]}}},
    }))?;
    ctx.api::<ResourceClaimTemplate>()
        .create(&PostParams::default(), &template)
        .await?;
    Ok(())
}

/// A pending pod of wasmgpu whose one claim `gpus` comes from the
/// ResourceClaimTemplate `template`, restricted to the test's nodes.
pub(super) async fn template_pod(ctx: &TestContext, name: &str, template: &str) -> Result<Pod> {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "wasmgpu",
            "nodeSelector": {GROUP_LABEL: ctx.namespace},
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }))?;
    Ok(ctx
        .api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await?)
}

/// The devices a claim's allocation holds, as `pool/device`.
pub(super) fn allocated(claim: &ResourceClaim) -> Vec<String> {
    claim
        .status
        .iter()
        .flat_map(|s| s.allocation.iter())
        .flat_map(|a| a.devices.iter())
        .flat_map(|d| d.results.iter().flatten())
        .map(|r| format!("{}/{}", r.pool, r.device))
        .collect()
}

/// The note of the first `reason` Event on `pod` saying `saying`, waited
/// for (the controller's log on failure).
async fn wait_event(
    ctx: &TestContext,
    pod: &str,
    reason: &str,
    saying: &str,
    controller: &Controller,
) -> Result<String> {
    let said = |r: &str, note: &str| r == reason && note.contains(saying);
    let events = super::wait_event(ctx, pod, &format!("{reason} saying {saying:?}"), said)
        .await
        .with_context(|| controller.log_tail())?;
    Ok(events
        .into_iter()
        .find_map(|(r, note)| said(&r, &note).then_some(note))
        .expect("waited for"))
}

/// Leaves nothing of the test for the other tests' rounds to see: its pods,
/// then (its controller stopped) its node's slice and its node.
pub(super) async fn clean_up(
    ctx: &TestContext,
    controller: Controller,
    slice_name: &str,
    node: String,
) -> Result<()> {
    ctx.api::<Pod>()
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &Default::default(),
        )
        .await?;
    drop(controller);
    ctx.cluster_api::<ResourceSlice>()
        .delete(slice_name, &DeleteParams::default())
        .await?;
    remove_nodes(ctx, &[node]).await
}

#[tokio::test]
async fn dra_pods_get_the_devices_their_claims_select_and_are_bound_as_kube_scheduler_binds()
-> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-dra-claims").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let (node, slice_name) = h100_node(&ctx, 8).await?;
    let controller = Controller::start(&ctx).await?;
    let claims = ctx.api::<ResourceClaim>();
    let pods = ctx.api::<Pod>();

    // 2 H100s with at least 40Gi, by CEL on productName and memory.
    claim(
        &ctx,
        "train",
        2,
        "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100') && device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
        "gpu.nvidia.com",
    )
    .await?;
    let train = dra_pod(&ctx, "train", "train").await?;
    let bound = wait_bound(&ctx, "train").await?;
    assert_eq!(node_of(&bound).as_deref(), Some(node.as_str()));
    let written = claims.get("train").await?;
    let devices = allocated(&written);
    assert_eq!(devices.len(), 2, "{devices:?}");
    assert!(
        devices
            .iter()
            .all(|d| d.starts_with(&format!("{node}/gpu-")))
    );
    let status = written.status.as_ref().expect("status");
    let reserved: Vec<(&str, &str)> = status
        .reserved_for
        .iter()
        .flatten()
        .map(|r| (r.resource.as_str(), r.uid.as_str()))
        .collect();
    assert_eq!(reserved, [("pods", train.metadata.uid.as_deref().unwrap())]);
    assert!(
        written
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "resource.kubernetes.io/delete-protection")
    );
    let selector = serde_json::to_value(&status.allocation.as_ref().unwrap().node_selector)?;
    assert_eq!(
        selector["nodeSelectorTerms"][0]["matchFields"][0]["values"],
        json!([node])
    );
    let note = wait_event(&ctx, "train", "Allocated", "ResourceClaims", &controller).await?;
    assert!(note.contains("ResourceClaims"), "{note}");

    // 6 more: the rest of the node, none of train's.
    claim(
        &ctx,
        "infer",
        6,
        "device.attributes['gpu.nvidia.com'].type == 'gpu'",
        "gpu.nvidia.com",
    )
    .await?;
    dra_pod(&ctx, "infer", "infer").await?;
    wait_bound(&ctx, "infer").await?;
    let infer = allocated(&claims.get("infer").await?);
    let all: BTreeSet<&String> = devices.iter().chain(&infer).collect();
    assert_eq!(
        all.len(),
        8,
        "two claims never share a device: {devices:?} {infer:?}"
    );

    // A ninth waits: every device is held.
    claim(&ctx, "late", 1, "true", "gpu.nvidia.com").await?;
    dra_pod(&ctx, "late", "late").await?;
    let note = wait_event(&ctx, "late", "Waiting", "free right now", &controller).await?;
    assert!(
        note.contains("/late request \"gpus\"") && note.contains("free right now"),
        "{note}"
    );
    assert!(node_of(&pods.get("late").await?).is_none());

    upstream_agrees(&ctx).await?;

    // train is deleted; kube-controller-manager's resourceclaim controller
    // takes it out of reservedFor and deallocates the claim: the freed
    // devices serve the late claim.
    pods.delete("train", &DeleteParams::default().grace_period(0))
        .await?;
    wait_bound(&ctx, "late").await?;
    let late = allocated(&claims.get("late").await?);
    assert!(
        devices.contains(&late[0]),
        "{late:?} comes from train's {devices:?}"
    );

    // Bad input: a missing DeviceClass, a selector that fails on a device
    // (the API server refuses one that does not compile), a missing claim.
    claim(&ctx, "no-class", 1, "true", "mig.nvidia.com").await?;
    dra_pod(&ctx, "no-class", "no-class").await?;
    let note = wait_event(
        &ctx,
        "no-class",
        "UnusableClaim",
        "mig.nvidia.com",
        &controller,
    )
    .await?;
    assert!(
        note.contains("names DeviceClass \"mig.nvidia.com\", which does not exist"),
        "{note}"
    );
    claim(
        &ctx,
        "bad-cel",
        1,
        "device.attributes['gpu.nvidia.com'].pcieGeneration == 5",
        "gpu.nvidia.com",
    )
    .await?;
    dra_pod(&ctx, "bad-cel", "bad-cel").await?;
    let note = wait_event(
        &ctx,
        "bad-cel",
        "UnusableClaim",
        "cannot be evaluated",
        &controller,
    )
    .await?;
    assert!(
        note.contains("cannot be evaluated on device gpu.nvidia.com/")
            && note.contains("pcieGeneration"),
        "{note}"
    );
    dra_pod(&ctx, "missing", "nope").await?;
    let note = wait_event(
        &ctx,
        "missing",
        "UnusableClaim",
        "does not exist",
        &controller,
    )
    .await?;
    assert!(
        note.contains("ResourceClaim") && note.contains("does not exist"),
        "{note}"
    );

    // A pod made before its claim (as `kubectl apply -f dir/` may): rounds
    // see it without the claim for 400 ms, then it takes the last free
    // device, never told that its claim does not exist.
    dra_pod(&ctx, "early", "early").await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    claim(&ctx, "early", 1, "true", "gpu.nvidia.com").await?;
    wait_bound(&ctx, "early").await?;
    let events = events_for(&ctx, "early").await?;
    assert!(
        !events
            .iter()
            .any(|(_, note)| note.contains("does not exist")),
        "{events:?}"
    );

    clean_up(&ctx, controller, &slice_name, node).await
}

#[tokio::test]
async fn a_claim_from_a_template_is_allocated_for_its_pod() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-dra-template").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let (node, slice_name) = h100_node(&ctx, 4).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();
    let pod = template_pod(&ctx, "worker", "two-gpus").await?;
    let note = wait_event(
        &ctx,
        "worker",
        "UnusableClaim",
        "is not made yet",
        &controller,
    )
    .await?;
    assert!(
        note.contains("ResourceClaimTemplate two-gpus is not made yet"),
        "{note}"
    );

    // The template appears: kube-controller-manager's resourceclaim
    // controller makes the pod's claim, and wasmgpu allocates it.
    claim_template(&ctx, "two-gpus", 2).await?;
    let bound = wait_bound(&ctx, "worker").await?;
    let made = bound
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .and_then(|s| s.first())
        .and_then(|s| s.resource_claim_name.clone())
        .expect("the claim made for the pod");
    let claims = ctx.api::<ResourceClaim>();
    let claim = claims.get(&made).await?;
    assert_eq!(allocated(&claim).len(), 2);
    let owner = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .next()
        .cloned();
    assert_eq!(owner.map(|o| o.uid), pod.metadata.uid.clone());
    upstream_agrees(&ctx).await?;

    // The pod finishes: the claim made for it is released and deleted (the
    // finalizer wasmgpu added does not keep it).
    set_pod_phase(&pods, "worker", PodPhase::Running).await?;
    set_pod_phase(&pods, "worker", PodPhase::Succeeded).await?;
    wait_for(&claims, &made, ACT, "the claim deleted", |c| c.is_none()).await?;

    clean_up(&ctx, controller, &slice_name, node).await
}

#[tokio::test]
async fn a_pod_with_two_claims_and_a_claim_two_pods_share_are_placed_as_kube_scheduler_places_them()
-> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-dra-shared").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let (node, slice_name) = h100_node(&ctx, 4).await?;
    let controller = Controller::start(&ctx).await?;
    let claims = ctx.api::<ResourceClaim>();
    let pods = ctx.api::<Pod>();

    // One pod, two claims: 1 + 2 devices, all on its node, none twice.
    claim(&ctx, "one", 1, "true", "gpu.nvidia.com").await?;
    claim(&ctx, "two", 2, "true", "gpu.nvidia.com").await?;
    dra_pod_with(&ctx, "both", &[("small", "one"), ("large", "two")]).await?;
    let bound = wait_bound(&ctx, "both").await?;
    assert_eq!(node_of(&bound).as_deref(), Some(node.as_str()));
    let one = allocated(&claims.get("one").await?);
    let two = allocated(&claims.get("two").await?);
    assert_eq!((one.len(), two.len()), (1, 2), "{one:?} {two:?}");

    // One claim, two pods: the first allocates it, the second joins it on
    // the node its allocation names; both are in reservedFor.
    claim(&ctx, "shared", 1, "true", "gpu.nvidia.com").await?;
    let first = dra_pod(&ctx, "first", "shared").await?;
    wait_bound(&ctx, "first").await?;
    let second = dra_pod(&ctx, "second", "shared").await?;
    let bound = wait_bound(&ctx, "second").await?;
    assert_eq!(node_of(&bound).as_deref(), Some(node.as_str()));
    let written = claims.get("shared").await?;
    let shared = allocated(&written);
    assert_eq!(shared.len(), 1, "{shared:?}");
    let mut reserved: Vec<String> = written
        .status
        .iter()
        .flat_map(|s| s.reserved_for.iter().flatten())
        .map(|r| r.uid.clone())
        .collect();
    reserved.sort();
    let mut expected = vec![first.metadata.uid.unwrap(), second.metadata.uid.unwrap()];
    expected.sort();
    assert_eq!(reserved, expected);
    let all: BTreeSet<&String> = one.iter().chain(&two).chain(&shared).collect();
    assert_eq!(all.len(), 4, "no device twice: {one:?} {two:?} {shared:?}");

    // The node is full: a fifth device waits, named.
    claim(&ctx, "fifth", 1, "true", "gpu.nvidia.com").await?;
    dra_pod(&ctx, "fifth", "fifth").await?;
    let note = wait_event(&ctx, "fifth", "Waiting", "/fifth request", &controller).await?;
    assert!(note.contains("/fifth request \"gpus\""), "{note}");
    assert!(node_of(&pods.get("fifth").await?).is_none());
    upstream_agrees(&ctx).await?;

    clean_up(&ctx, controller, &slice_name, node).await
}

/// Upstream's judgement of every allocated claim of the test's namespace
/// (`control-plane dra-check`: the devices exist, match their class's and
/// request's selectors as k8s.io/dynamic-resource-allocation/cel evaluates
/// them, counts, constraints, node selector, no device allocated twice).
pub(super) async fn upstream_agrees(ctx: &TestContext) -> Result<()> {
    let output = tokio::process::Command::new(control_plane_binary()?)
        .arg("dra-check")
        .arg("--kubeconfig")
        .arg(ctx.cluster().kubeconfig_path())
        .args(["--namespace", &ctx.namespace])
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "upstream disagrees:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value = serde_json::from_str(&stdout)?;
    anyhow::ensure!(
        summary["claims"].as_u64() > Some(0),
        "no claim checked: {stdout}"
    );
    Ok(())
}

#[tokio::test]
async fn a_claim_allocated_before_a_crash_gets_its_pod_bound_where_the_claim_is() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-dra-crash").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let (node, slice_name) = h100_node(&ctx, 4).await?;
    let claims = ctx.api::<ResourceClaim>();

    // What a controller killed between the claim's status update and the
    // Binding leaves: the claim allocated gpu-2 and gpu-3 with the finalizer,
    // reserved for a pod that is not bound.
    claim(&ctx, "before", 2, "true", "gpu.nvidia.com").await?;
    let pod = dra_pod(&ctx, "before", "before").await?;
    claims
        .patch(
            "before",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["resource.kubernetes.io/delete-protection"]}}),
            ),
        )
        .await?;
    let results: Vec<Value> = ["gpu-2", "gpu-3"]
        .iter()
        .map(|d| json!({"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": d}))
        .collect();
    claims
        .patch_status(
            "before",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "allocation": {
                    "devices": {"results": results},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
                },
                "reservedFor": [{"resource": "pods", "name": "before", "uid": pod.metadata.uid}],
            }})),
        )
        .await?;

    // The controller starts again: it binds the pod where its claim is and
    // allocates nothing twice.
    let controller = Controller::start(&ctx).await?;
    let bound = wait_bound(&ctx, "before").await?;
    assert_eq!(node_of(&bound).as_deref(), Some(node.as_str()));
    let mut kept = allocated(&claims.get("before").await?);
    kept.sort();
    assert_eq!(kept, [format!("{node}/gpu-2"), format!("{node}/gpu-3")]);
    claim(&ctx, "after", 2, "true", "gpu.nvidia.com").await?;
    dra_pod(&ctx, "after", "after").await?;
    wait_bound(&ctx, "after").await?;
    let mut after = allocated(&claims.get("after").await?);
    after.sort();
    assert_eq!(after, [format!("{node}/gpu-0"), format!("{node}/gpu-1")]);
    upstream_agrees(&ctx).await?;

    clean_up(&ctx, controller, &slice_name, node).await
}

#[tokio::test]
async fn a_device_taint_rule_keeps_its_devices_from_claims_that_do_not_tolerate_it() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-dra-taints").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let (node, slice_name) = h100_node(&ctx, 2).await?;
    // The node's whole pool drained, as an operator would before maintenance.
    let rules: Api<DeviceTaintRule> = ctx.cluster_api();
    let rule_name = format!("{}-drain", ctx.namespace);
    let rule: DeviceTaintRule = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": rule_name},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": node},
            "taint": {"key": "example.com/drain", "value": "maintenance", "effect": "NoSchedule"},
        },
    }))?;
    rules.create(&PostParams::default(), &rule).await?;
    let controller = Controller::start(&ctx).await?;

    claim(&ctx, "plain", 1, "true", "gpu.nvidia.com").await?;
    let tolerant: ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "tolerant"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "count": 1,
            "tolerations": [{"key": "example.com/drain", "operator": "Equal",
                             "value": "maintenance", "effect": "NoSchedule"}],
        }}]}},
    }))?;
    ctx.api::<ResourceClaim>()
        .create(&PostParams::default(), &tolerant)
        .await?;
    dra_pod(&ctx, "plain", "plain").await?;
    dra_pod(&ctx, "tolerant", "tolerant").await?;

    // The pod that tolerates the taint gets a device, its tolerations
    // copied into the result as kube-scheduler copies them.
    let bound = wait_bound(&ctx, "tolerant").await?;
    assert_eq!(node_of(&bound).as_deref(), Some(node.as_str()));
    let claims = ctx.api::<ResourceClaim>();
    let result = claims.get("tolerant").await?;
    let results = result
        .status
        .and_then(|s| s.allocation)
        .and_then(|a| a.devices)
        .and_then(|d| d.results)
        .expect("allocated");
    let tolerations = results[0].tolerations.clone().expect("tolerations copied");
    assert_eq!(tolerations[0].key.as_deref(), Some("example.com/drain"));

    // The other waits, told which taint keeps it and what to do.
    let note = wait_event(
        &ctx,
        "plain",
        "Unsatisfiable",
        "add a toleration",
        &controller,
    )
    .await?;
    assert!(
        note.contains("example.com/drain=maintenance:NoSchedule")
            && note.contains("add a toleration"),
        "{note}"
    );
    assert!(allocated(&claims.get("plain").await?).is_empty());

    // The drain ends: the claim gets the device left, the pod is bound.
    rules.delete(&rule_name, &DeleteParams::default()).await?;
    let bound = wait_bound(&ctx, "plain").await?;
    assert_eq!(node_of(&bound).as_deref(), Some(node.as_str()));
    let mut devices: Vec<String> = allocated(&claims.get("plain").await?);
    devices.extend(allocated(&claims.get("tolerant").await?));
    devices.sort();
    assert_eq!(
        devices,
        [format!("{node}/gpu-0"), format!("{node}/gpu-1")],
        "each device once"
    );
    upstream_agrees(&ctx).await?;
    clean_up(&ctx, controller, &slice_name, node).await
}

/// The controller writes a claim from the copy its watch showed when the
/// round decided, without reading it again. Here another writer changes
/// every claim every few milliseconds while they are allocated, so that
/// copy is often out of date: the server refuses the write (409), the
/// controller reads the claim and writes from what it finds, and nothing
/// the other writer wrote is lost.
#[tokio::test]
async fn a_claim_changed_after_the_round_saw_it_is_written_from_what_the_server_has() -> Result<()>
{
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-dra-stale").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let (node, slice_name) = h100_node(&ctx, 8).await?;
    let names: Vec<String> = (0..4).map(|i| format!("busy-{i}")).collect();
    for name in &names {
        claim(&ctx, name, 2, "true", "gpu.nvidia.com").await?;
    }

    // The other writer: a label bumped on every claim, every 5 ms.
    let claims = ctx.api::<ResourceClaim>();
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let toucher = {
        let (claims, names) = (claims.clone(), names.clone());
        tokio::spawn(async move {
            let mut touches = 0u32;
            while !*stopped.borrow_and_update() {
                touches += 1;
                for name in &names {
                    let patch = json!({"metadata": {"labels": {"touched": touches.to_string()}}});
                    claims
                        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await?;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            anyhow::Ok(touches)
        })
    };

    let port = super::operate::free_port()?;
    let controller = Controller::start_with(
        &ctx,
        &["--http-address".into(), format!("127.0.0.1:{port}")],
    )
    .await?;
    for name in &names {
        dra_pod(&ctx, name, name).await?;
    }
    let mut devices = BTreeSet::new();
    for name in &names {
        let pod = wait_bound(&ctx, name).await?;
        assert_eq!(node_of(&pod).as_deref(), Some(node.as_str()));
    }
    stop.send(true)?;
    let touches = toucher.await??;

    for name in &names {
        let claim = claims.get(name).await?;
        let reserved: Vec<String> = claim
            .status
            .iter()
            .flat_map(|s| s.reserved_for.iter().flatten())
            .map(|r| r.name.clone())
            .collect();
        assert_eq!(
            reserved,
            std::slice::from_ref(name),
            "{name} reserved for its pod"
        );
        let held = allocated(&claim);
        assert_eq!(held.len(), 2, "{name}: {held:?}");
        for device in held {
            assert!(devices.insert(device.clone()), "{device} in two claims");
        }
        // The other writer's last label is there: no write of the
        // controller overwrote the claim from an older copy.
        assert_eq!(
            claim
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("touched")),
            Some(&touches.to_string()),
            "{name}"
        );
        assert!(
            claim
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == "resource.kubernetes.io/delete-protection")
        );
    }
    // The path this test is about was taken: writes from an out-of-date
    // copy were refused and done again from the server's.
    let (_, metrics) = super::operate::get(port, "/metrics").await?;
    let conflicts: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("wasmgpu_api_writes_total{") && l.contains("result=\"409\""))
        .filter(|l| l.contains("kind=\"claim\"") || l.contains("kind=\"claim-status\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(conflicts > 0, "no claim write refused:\n{metrics}");
    println!(
        "{touches} touches of each claim; {conflicts} claim writes refused (409) and done again"
    );
    upstream_agrees(&ctx).await?;

    clean_up(&ctx, controller, &slice_name, node).await
}
