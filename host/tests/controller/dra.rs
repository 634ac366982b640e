//! DRA as a second inventory on the real API server: a node whose GPUs both
//! its GPUNode and a `gpu.nvidia.com` ResourceSlice list has each GPU once,
//! and the devices a ResourceClaim's allocation holds (written here as
//! kube-scheduler writes it) are given to no GPUResource pod until the
//! claim goes.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use wasmgpu::api::{Phase, Sharing};
use wasmgpu_test_harness::TestContext;

use super::{devices, phase, wait_bound, wait_resource};
use crate::support::*;

/// The ResourceSlice NVIDIA's driver publishes for `node` with `gpus` H100s
/// (pool named after the node), UUIDs as the GPUNode's.
pub(super) fn nvidia_slice(node: &str, gpus: u32) -> Result<ResourceSlice> {
    let devices: Vec<_> = (0..gpus)
        .map(|i| {
            json!({
                "name": format!("gpu-{i}"),
                "attributes": {
                    "type": {"string": "gpu"},
                    "uuid": {"string": format!("GPU-{node}-{i}")},
                    "productName": {"string": H100},
                    "cudaComputeCapability": {"version": "9.0.0"},
                    "resource.kubernetes.io/pciBusID": {"string": format!("0000:{:02x}:00.0", 0x18 + i)},
                },
                "capacity": {"memory": {"value": format!("{H100_MIB}Mi")}},
            })
        })
        .collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-gpu.nvidia.com")},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }))?)
}

/// A claim for two GPUs, allocated `gpu-0` and `gpu-1` of `node`'s pool as
/// kube-scheduler allocates: the claim, then one status update.
async fn claim_held_elsewhere(ctx: &TestContext, name: &str, node: &str) -> Result<()> {
    let claims = ctx.api::<ResourceClaim>();
    let claim: ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [
            {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}
        ]}},
    }))?;
    claims.create(&PostParams::default(), &claim).await?;
    let results: Vec<_> = ["gpu-0", "gpu-1"]
        .iter()
        .map(|d| json!({"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": d}))
        .collect();
    claims
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"allocation": {"devices": {"results": results}}}})),
        )
        .await
        .context("writing the claim's allocation")?;
    Ok(())
}

#[tokio::test]
async fn a_gpu_in_a_gpunode_and_a_resourceslice_is_one_gpu_and_a_claims_devices_stay_held()
-> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-dra").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    let slices: Api<ResourceSlice> = ctx.cluster_api();
    let slice = nvidia_slice(&node, 8)?;
    let slice_name = slice.metadata.name.clone().expect("named");
    slices.create(&PostParams::default(), &slice).await?;
    claim_held_elsewhere(&ctx, "scheduled-elsewhere", &node).await?;
    gpuresource(&ctx, "six", 6, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "two", 2, Sharing::Exclusive, 0, None).await?;
    let controller = Controller::start(&ctx).await?;

    // 8 GPUs listed twice are 8 GPUs, 2 of them held by the claim: six fit.
    create_pod(&ctx, "six", "six").await?;
    let six = wait_bound(&ctx, "six").await?;
    let mut got = devices(&six);
    got.sort();
    let want: Vec<String> = (2..8).map(|i| format!("GPU-{node}-{i}")).collect();
    assert_eq!(got, want, "the claim's GPUs 0 and 1 are not given");

    // Two more do not fit: what is left is the claim's.
    create_pod(&ctx, "two", "two").await?;
    let waiting = wait_resource(&ctx, "two", "a round that left it waiting", |r| {
        r.status.as_ref().and_then(|s| s.pods.as_deref()) == Some("0/1")
    })
    .await?;
    assert_eq!(phase(&waiting), Some(Phase::Pending));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods = ctx.api::<Pod>();
    assert!(
        super::node_of(&pods.get("two").await?).is_none(),
        "GPUs 0 and 1 stay the claim's"
    );

    // The claim goes: its GPUs are free.
    ctx.api::<ResourceClaim>()
        .delete("scheduled-elsewhere", &DeleteParams::default())
        .await?;
    let two = wait_bound(&ctx, "two").await?;
    let mut got = devices(&two);
    got.sort();
    assert_eq!(got, [format!("GPU-{node}-0"), format!("GPU-{node}-1")]);

    // A pool the driver has not finished publishing is not used, and the
    // operator is told on the slice.
    let mut incomplete = nvidia_slice(&format!("{}-n2", ctx.namespace), 2)?;
    incomplete.spec.pool.resource_slice_count = 2;
    let incomplete_name = incomplete.metadata.name.clone().expect("named");
    slices.create(&PostParams::default(), &incomplete).await?;
    let events: Api<Event> = Api::namespaced(ctx.client.clone(), "default");
    let deadline = std::time::Instant::now() + ACT;
    let note = loop {
        let found = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("UnusableResourcePool")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                        == Some(incomplete_name.as_str())
            });
        if let Some(event) = found {
            break event.note.unwrap_or_default();
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no UnusableResourcePool Event on {incomplete_name}\n{}",
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        note.contains("is incomplete: generation 1 has 1 of its resourceSliceCount 2 slices"),
        "{note}"
    );

    drop(controller);
    slices.delete(&slice_name, &DeleteParams::default()).await?;
    slices
        .delete(&incomplete_name, &DeleteParams::default())
        .await?;
    remove_nodes(&ctx, &[node]).await
}
