//! What kube-controller-manager cleans up, as in a cluster: deleting a
//! namespace deletes its pods (the namespace controller), and the GPU such
//! a pod held goes to a pod of another namespace once it is gone; the
//! ResourceClaim made for a pod's extended resource, owned by the pod, goes
//! with it (the garbage collector), and its devices serve the next pod.

use std::time::Instant;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use wasmgpu::api::Sharing;
use wasmgpu_test_harness::{PodPhase, TestContext, set_pod_phase, wait_for};

use super::dra_claims::{allocated, clean_up, h100_node, nvidia_class};
use super::dra_extended::{extended_pod, made_claim};
use super::{condition, devices, node_of, wait_bound, wait_resource};
use crate::support::*;

#[tokio::test]
async fn deleting_a_namespace_deletes_its_pods_and_their_gpu_goes_to_another_namespaces_pod()
-> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("cleanup-namespace").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 1).await?;
    let controller = Controller::start(&ctx).await?;

    // A team's pod holds the only GPU. Its grace period is 1 s, not the
    // default 30 s: the namespace controller starts 5 s after the deletion
    // and, while the pods' grace period lasts, looks again only after half
    // of it (16 s for 30 s).
    let team = TestContext::new("cleanup-team").await?;
    gpuresource(&team, "one", 1, Sharing::Exclusive, 0, None).await?;
    let team_pods = team.api::<Pod>();
    let mut train = pod(&ctx, "train", "one");
    train
        .spec
        .as_mut()
        .expect("spec")
        .termination_grace_period_seconds = Some(1);
    team_pods.create(&PostParams::default(), &train).await?;
    let train = wait_for(&team_pods, "train", ACT, "bound", |p| {
        p.and_then(node_of).is_some()
    })
    .await?
    .expect("bound");
    set_pod_phase(&team_pods, "train", PodPhase::Running).await?;

    // A pod of another namespace waits for it.
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    create_pod(&ctx, "next", "one").await?;
    wait_resource(&ctx, "one", "waiting", |r| {
        condition(r, "Ready").is_some_and(|c| c.reason == "Waiting")
    })
    .await?;

    // The team's namespace is deleted: the namespace controller deletes
    // the pod, which terminates, still holding its GPU ...
    let deleted = Instant::now();
    let namespaces: Api<Namespace> = ctx.cluster_api();
    namespaces
        .delete(&team.namespace, &DeleteParams::default())
        .await?;
    wait_for(&team_pods, "train", ACT, "terminating", |p| {
        p.is_some_and(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await?;
    ensure!(
        node_of(&ctx.api::<Pod>().get("next").await?).is_none(),
        "next was bound while train still held the GPU"
    );
    // ... until its kubelet, its containers stopped, removes it.
    team_pods
        .delete("train", &DeleteParams::default().grace_period(0))
        .await?;
    let next = wait_bound(&ctx, "next").await?;
    assert_eq!(
        devices(&next),
        devices(&train),
        "next gets the GPU train held"
    );
    let bound_after = deleted.elapsed();
    wait_for(&namespaces, &team.namespace, ACT, "deleted", |c| {
        c.is_none()
    })
    .await?;
    eprintln!(
        "namespace deleted → next bound in {bound_after:.1?}, namespace gone in {:.1?}",
        deleted.elapsed()
    );
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}

#[tokio::test]
async fn the_claim_made_for_a_pods_extended_resource_is_deleted_with_the_pod() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("cleanup-claim").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let (node, slice_name) = h100_node(&ctx, 2).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();

    // train holds both GPUs through the claim made for it, owned by it;
    // next waits.
    extended_pod(&ctx, "train", "nvidia.com/gpu", 2).await?;
    let train = wait_bound(&ctx, "train").await?;
    let claim = made_claim(&ctx, &train, 2).await?;
    set_pod_phase(&pods, "train", PodPhase::Running).await?;
    extended_pod(&ctx, "next", "nvidia.com/gpu", 2).await?;

    // train is deleted (its kubelet confirms at once): the resourceclaim
    // controller deallocates the claim and leaves its deletion to the
    // garbage collector, which deletes it, its owner gone.
    let deleted = Instant::now();
    pods.delete("train", &DeleteParams::default().grace_period(0))
        .await?;
    wait_for(
        &ctx.api::<ResourceClaim>(),
        &claim.name_any(),
        ACT,
        "deleted with its pod",
        |c| c.is_none(),
    )
    .await?;
    eprintln!("pod deleted → its claim gone in {:.1?}", deleted.elapsed());
    let next = wait_bound(&ctx, "next").await?;
    let mut freed = allocated(&claim);
    let mut got = allocated(&made_claim(&ctx, &next, 2).await?);
    freed.sort();
    got.sort();
    assert_eq!(got, freed, "next gets the devices train's claim held");

    clean_up(&ctx, controller, &slice_name, node).await
}
