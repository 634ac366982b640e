//! Extended resources backed by DRA (KEP-5004) on the real API server: a
//! wasmgpu pod asking `nvidia.com/gpu` (which NVIDIA's DeviceClass maps
//! through `spec.extendedResourceName`), or a class's implicit name
//! `deviceclass.resource.kubernetes.io/<class>`, gets the claim
//! kube-scheduler would make (generated name, annotation, the pod its
//! controller owner, requests named by container and resource), recorded in
//! `pod.status.extendedResourceClaimStatus`, allocated and bound; upstream's
//! checker agrees with the allocation.

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::ResourceExt;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use wasmgpu_test_harness::TestContext;

use super::dra_claims::{allocated, clean_up, h100_node, nvidia_class, upstream_agrees};
use super::{events_for, wait_bound};
use crate::support::*;

/// A pending wasmgpu pod of the test's nodes whose container `main` asks
/// `count` of extended resource `resource`, beside an init container
/// asking 1 of it.
pub(super) async fn extended_pod(
    ctx: &TestContext,
    name: &str,
    resource: &str,
    count: u32,
) -> Result<Pod> {
    let asks = json!({resource: count.to_string()});
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "wasmgpu",
            "nodeSelector": {GROUP_LABEL: ctx.namespace},
            "initContainers": [{
                "name": "init",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {resource: "1"}, "limits": {resource: "1"}},
            }],
            "containers": [{
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": asks, "limits": asks},
            }],
        },
    }))?;
    Ok(ctx
        .api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await?)
}

/// The claim made for pod `pod`: checked to be the one kube-scheduler
/// makes, with one request of `count` for container 1 (`main`), which the
/// init container reuses.
pub(super) async fn made_claim(ctx: &TestContext, pod: &Pod, count: i64) -> Result<ResourceClaim> {
    let name = pod.name_any();
    let mut made: Vec<ResourceClaim> = ctx
        .api::<ResourceClaim>()
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|c| {
            c.owner_references()
                .iter()
                .any(|o| o.uid == pod.uid().unwrap_or_default())
        })
        .collect();
    ensure!(made.len() == 1, "one claim for {name}: {made:?}");
    let claim = made.remove(0);
    let claim_name = claim.name_any();
    ensure!(
        claim_name.starts_with(&format!("{name}-extended-resources-")),
        "{claim_name}"
    );
    ensure!(
        claim
            .annotations()
            .get("resource.kubernetes.io/extended-resource-claim")
            == Some(&"true".to_owned())
    );
    let owner = &claim.owner_references()[0];
    ensure!(owner.kind == "Pod" && owner.name == name && owner.controller == Some(true));
    let requests = serde_json::to_value(&claim.spec)?["devices"]["requests"].clone();
    ensure!(
        requests
            == json!([{"name": "container-1-request-0", "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "allocationMode": "ExactCount",
                "count": count,
            }}]),
        "{requests}"
    );
    let devices = allocated(&claim);
    ensure!(devices.len() == count as usize, "{devices:?}");
    Ok(claim)
}

#[tokio::test]
async fn a_pod_asking_an_extended_resource_a_device_class_maps_gets_its_claim_as_kube_scheduler_makes_it()
-> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-dra-extended").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let (node, slice_name) = h100_node(&ctx, 4).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();

    // nvidia.com/gpu: 2, the class's extendedResourceName.
    extended_pod(&ctx, "train", "nvidia.com/gpu", 2).await?;
    let train = wait_bound(&ctx, "train").await?;
    let claim = made_claim(&ctx, &train, 2).await?;
    let status = serde_json::to_value(&train.status)?["extendedResourceClaimStatus"].clone();
    ensure!(
        status
            == json!({
                "resourceClaimName": claim.name_any(),
                "requestMappings": [
                    {"containerName": "main", "resourceName": "nvidia.com/gpu",
                     "requestName": "container-1-request-0"},
                    {"containerName": "init", "resourceName": "nvidia.com/gpu",
                     "requestName": "container-1-request-0"},
                ],
            }),
        "{status}"
    );
    let reserved = serde_json::to_value(&claim.status)?["reservedFor"].clone();
    ensure!(
        reserved[0]["uid"] == json!(train.uid()),
        "reserved for the pod: {reserved}"
    );
    let events = events_for(&ctx, "train").await?;
    ensure!(
        events.iter().any(|(r, _)| r == "ExtendedResourceClaim"),
        "{events:?}"
    );

    // The class's implicit name, 1 device: the next one of the node.
    extended_pod(
        &ctx,
        "infer",
        "deviceclass.resource.kubernetes.io/gpu.nvidia.com",
        1,
    )
    .await?;
    let infer = wait_bound(&ctx, "infer").await?;
    let second = made_claim(&ctx, &infer, 1).await?;
    ensure!(
        allocated(&second)
            .iter()
            .all(|d| !allocated(&claim).contains(d)),
        "two claims never share a device"
    );
    upstream_agrees(&ctx).await?;
    ensure!(pods.get("train").await?.spec.unwrap().node_name.as_deref() == Some(&*node));

    clean_up(&ctx, controller, &slice_name, node).await
}
