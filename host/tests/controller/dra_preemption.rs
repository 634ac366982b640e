//! DRA pods in preemption, on the real API server with the resourceclaim
//! controller of kube-controller-manager: a pod of higher priority asking
//! through a ResourceClaim evicts exactly the DRA pods whose devices it
//! needs, waits until their claims are deallocated, and gets its claim
//! allocated on their devices before its Binding; a pod whose
//! `preemptionPolicy` is `Never` evicts nobody. Upstream's checker judges
//! every allocation afterwards. The test plays the kubelet: an evicted pod
//! is gone once its deletion is requested.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams};
use wasmgpu_test_harness::TestContext;

use super::dra_claims::{
    allocated, claim, clean_up, dra_pod_of_class, h100_node, nvidia_class, upstream_agrees,
};
use super::preemption::{bound_evicting, priority_class, remove_priority_classes};
use super::{node_of, wait_bound};
use crate::support::*;

/// Every GPU: what the test's claims select.
const ANY_GPU: &str = "device.attributes['gpu.nvidia.com'].type == 'gpu'";

#[tokio::test]
async fn a_dra_pod_of_higher_priority_evicts_dra_pods_and_gets_their_devices_through_its_claim()
-> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-dra-preempt").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let (node, slice_name) = h100_node(&ctx, 8).await?;
    let low = priority_class(&ctx, "low", 100, false).await?;
    let high = priority_class(&ctx, "high", 1000, false).await?;
    let polite = priority_class(&ctx, "polite", 1000, true).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();
    let claims = ctx.api::<ResourceClaim>();

    // 8 pods of priority 100 each hold one of the node's 8 devices.
    let fillers: Vec<String> = (0..8).map(|i| format!("low-{i}")).collect();
    for name in &fillers {
        claim(&ctx, name, 1, ANY_GPU, "gpu.nvidia.com").await?;
        dra_pod_of_class(&ctx, name, &[("gpus", name)], Some(&low)).await?;
    }
    let mut held_by = std::collections::BTreeMap::new();
    for name in &fillers {
        if let Err(e) = wait_bound(&ctx, name).await {
            anyhow::bail!("{e}\n{}", controller.log_tail());
        }
        let devices = allocated(&claims.get(name).await?);
        ensure!(devices.len() == 1, "{name}: {devices:?}");
        held_by.insert(name.clone(), devices[0].clone());
    }

    // Priority 1000 but preemptionPolicy Never: nobody is evicted.
    claim(&ctx, "never", 4, ANY_GPU, "gpu.nvidia.com").await?;
    dra_pod_of_class(&ctx, "never", &[("gpus", "never")], Some(&polite)).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let going = pods
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .count();
    ensure!(going == 0, "{going} pod(s) evicted for a Never pod");
    ensure!(node_of(&pods.get("never").await?).is_none());
    pods.delete("never", &DeleteParams::default().grace_period(0))
        .await?;

    // Priority 1000, may preempt: exactly 4 go, their claims are
    // deallocated, and its claim gets their devices.
    claim(&ctx, "urgent", 4, ANY_GPU, "gpu.nvidia.com").await?;
    let created = Instant::now();
    dra_pod_of_class(&ctx, "urgent", &[("gpus", "urgent")], Some(&high)).await?;
    let (urgent, mut gone) = bound_evicting(&pods, "urgent", &controller).await?;
    let bound_after = created.elapsed();
    gone.sort();
    ensure!(gone.len() == 4, "evicted {gone:?}");
    ensure!(node_of(&urgent).as_deref() == Some(node.as_str()));
    let taken: BTreeSet<String> = allocated(&claims.get("urgent").await?)
        .into_iter()
        .collect();
    let freed: BTreeSet<String> = gone.iter().map(|v| held_by[v].clone()).collect();
    ensure!(
        taken == freed,
        "the claim got {taken:?}, the victims held {freed:?}"
    );
    for name in fillers.iter().filter(|f| !gone.contains(f)) {
        let pod = pods.get(name).await?;
        ensure!(node_of(&pod).is_some(), "{name} still runs");
        ensure!(
            !taken.contains(&held_by[name]),
            "{} held twice: {name} and urgent",
            held_by[name]
        );
    }
    let nomination = urgent
        .annotations()
        .get("wasmgpu.io/nomination")
        .cloned()
        .unwrap_or_default();
    ensure!(
        nomination.contains("\"claims\"") && nomination.contains("\"urgent\""),
        "the nomination records the claim's devices: {nomination}"
    );
    upstream_agrees(&ctx).await?;
    println!(
        "DRA preemption: 8 x priority 100 holding 8 devices through claims, a priority-1000 pod claiming 4: evicted {gone:?}, bound {:.2}s after its creation",
        bound_after.as_secs_f64()
    );

    clean_up(&ctx, controller, &slice_name, node).await?;
    remove_priority_classes(&ctx, [low, high, polite]).await
}
