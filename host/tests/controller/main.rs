//! The controller end to end, on a real API server: the `wasmgpu
//! controller` process with the shipped policies, GPU inventory published
//! as GPUNode objects, the test playing the kubelet.

mod chaos;
mod cleanup;
mod configmaps;
mod dra;
mod dra_churn;
mod dra_claims;
mod dra_crash;
mod dra_extended;
mod dra_kubelet;
mod dra_preemption;
mod fairshare;
mod gangs;
mod holdings;
mod mig;
mod monitoring;
mod oci;
mod operate;
mod oras;
mod outage;
mod preemption;
mod scale;
mod shadow;
mod snapshot;
mod tenants;

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use wasmgpu::api::{GPUResource, Phase, Sharing};
use wasmgpu_test_harness::{PodPhase, TestContext, set_pod_phase, wait_for};
use wasmgpu_test_support as common;
use wasmgpu_test_support::controller as support;

use support::*;

fn devices(pod: &Pod) -> Vec<String> {
    pod.annotations()
        .get("wasmgpu.io/devices")
        .map(|d| d.split(',').map(str::to_string).collect())
        .unwrap_or_default()
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn bound(pod: Option<&Pod>) -> bool {
    pod.and_then(node_of).is_some()
}

async fn wait_bound(ctx: &TestContext, name: &str) -> Result<Pod> {
    let pod = wait_for(&ctx.api::<Pod>(), name, ACT, "bound", bound).await?;
    Ok(pod.expect("bound pods exist"))
}

async fn wait_resource(
    ctx: &TestContext,
    name: &str,
    what: &str,
    cond: impl Fn(&GPUResource) -> bool,
) -> Result<GPUResource> {
    let resource = wait_for(&ctx.api::<GPUResource>(), name, ACT, what, |r| {
        r.is_some_and(&cond)
    })
    .await?;
    Ok(resource.expect("exists"))
}

fn phase(r: &GPUResource) -> Option<Phase> {
    r.status.as_ref().and_then(|s| s.phase)
}

fn condition<'a>(
    r: &'a GPUResource,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    r.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

async fn events_for(ctx: &TestContext, name: &str) -> Result<Vec<(String, String)>> {
    let events: Api<Event> = ctx.api();
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect())
}

/// Waits until an Event on `name` matches `cond`; returns the Events.
async fn wait_event(
    ctx: &TestContext,
    name: &str,
    what: &str,
    cond: impl Fn(&str, &str) -> bool,
) -> Result<Vec<(String, String)>> {
    let deadline = std::time::Instant::now() + ACT;
    loop {
        let events = events_for(ctx, name).await?;
        if events.iter().any(|(reason, note)| cond(reason, note)) {
            return Ok(events);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no Event on {name}: {what} after {ACT:?}: {events:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn exclusive_and_shared_pods_get_gpus_and_are_bound() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-basic").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 4).await?;
    gpuresource(&ctx, "pair", 2, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "slice", 1, Sharing::Shared, 30000, Some("spread")).await?;
    let controller = Controller::start(&ctx).await?;

    create_pod(&ctx, "trainer", "pair").await?;
    create_pod(&ctx, "notebook-a", "slice").await?;
    create_pod(&ctx, "notebook-b", "slice").await?;
    let trainer = wait_bound(&ctx, "trainer").await?;
    let a = wait_bound(&ctx, "notebook-a").await?;
    let b = wait_bound(&ctx, "notebook-b").await?;

    assert_eq!(node_of(&trainer).as_deref(), Some(node.as_str()));
    assert_eq!(trainer.annotations().get("wasmgpu.io/node"), Some(&node));
    let exclusive = devices(&trainer);
    assert_eq!(exclusive.len(), 2, "{exclusive:?}");
    for shared in [&a, &b] {
        let gpus = devices(shared);
        assert_eq!(gpus.len(), 1);
        assert!(
            !exclusive.contains(&gpus[0]),
            "shared {gpus:?} on an exclusive GPU {exclusive:?}"
        );
    }

    // Each pod carries its allocation, with the deciding policy.
    let entry = allocation(&trainer).expect("trainer's allocation");
    assert_eq!(entry.resource, "pair");
    assert_eq!(entry.node, node);
    assert_eq!(entry.sharing, Sharing::Exclusive);
    assert_eq!(entry.policy.name, "binpack");
    assert!(entry.policy.digest.starts_with("sha256:"));
    assert_eq!(
        entry
            .devices
            .iter()
            .map(|d| d.uuid.clone())
            .collect::<Vec<_>>(),
        exclusive
    );
    assert!(entry.devices.iter().all(|d| d.memory_mib == H100_MIB));
    for shared in [&a, &b] {
        let entry = allocation(shared).expect("notebook's allocation");
        assert_eq!(entry.policy.name, "spread");
        assert_eq!(entry.sharing, Sharing::Shared);
        assert_eq!(entry.devices[0].memory_mib, 30000);
    }
    let pair = wait_resource(&ctx, "pair", "Allocated", |r| {
        phase(r) == Some(Phase::Allocated)
    })
    .await?;
    let status = pair.status.as_ref().expect("status");
    assert_eq!(status.pods.as_deref(), Some("1/1"));
    assert_eq!((status.holding, status.asking), (Some(1), Some(1)));
    assert!(status.allocations.is_empty(), "no ledger: {status:?}");
    assert_eq!(
        condition(&pair, "Ready").map(|c| c.status.as_str()),
        Some("True")
    );
    assert!(
        pair.finalizers().is_empty(),
        "a GPUResource holds nothing: {:?}",
        pair.finalizers()
    );
    let slice = wait_resource(&ctx, "slice", "Allocated", |r| {
        phase(r) == Some(Phase::Allocated)
    })
    .await?;
    assert_eq!(slice.status.as_ref().and_then(|s| s.holding), Some(2));

    // Events are published in the background: wait for it.
    let deadline = std::time::Instant::now() + ACT;
    loop {
        let events = events_for(&ctx, "trainer").await?;
        if events
            .iter()
            .any(|(reason, note)| reason == "Allocated" && note.contains(&node))
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{events:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}

#[tokio::test]
async fn a_pod_that_cannot_fit_waits_then_gets_the_gpus_a_finished_pod_frees() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-wait").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 2).await?;
    gpuresource(&ctx, "both", 2, Sharing::Exclusive, 0, None).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();

    create_pod(&ctx, "first", "both").await?;
    let first = wait_bound(&ctx, "first").await?;
    create_pod(&ctx, "second", "both").await?;
    let waiting = wait_resource(&ctx, "both", "1/2 pods", |r| {
        r.status.as_ref().and_then(|s| s.pods.as_deref()) == Some("1/2")
    })
    .await?;
    assert_eq!(phase(&waiting), Some(Phase::Pending));
    assert_eq!(
        condition(&waiting, "Ready").map(|c| c.reason.as_str()),
        Some("Waiting")
    );
    assert!(node_of(&pods.get("second").await?).is_none());

    set_pod_phase(&pods, "first", PodPhase::Running).await?;
    set_pod_phase(&pods, "first", PodPhase::Succeeded).await?;
    let second = wait_bound(&ctx, "second").await?;
    let mut got = devices(&second);
    let mut freed = devices(&first);
    got.sort();
    freed.sort();
    assert_eq!(got, freed, "the second pod gets the GPUs the first freed");
    let both = wait_resource(&ctx, "both", "only the second holds", |r| {
        r.status.as_ref().and_then(|s| s.pods.as_deref()) == Some("1/1")
    })
    .await?;
    assert_eq!(phase(&both), Some(Phase::Allocated));
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}

#[tokio::test]
async fn deleting_or_finishing_a_pod_releases_its_gpus() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-release").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 1).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();

    create_pod(&ctx, "a", "one").await?;
    wait_bound(&ctx, "a").await?;
    create_pod(&ctx, "b", "one").await?;
    // No kubelet: deleting a bound pod needs no grace period.
    pods.delete("a", &DeleteParams::default().grace_period(0))
        .await?;
    let b = wait_bound(&ctx, "b").await?;
    assert_eq!(devices(&b), vec![format!("GPU-{node}-0")]);

    // Pod b finishes: a pod of a new GPUResource gets the GPU.
    set_pod_phase(&pods, "b", PodPhase::Running).await?;
    set_pod_phase(&pods, "b", PodPhase::Failed).await?;
    gpuresource(&ctx, "again", 1, Sharing::Exclusive, 0, None).await?;
    create_pod(&ctx, "c", "again").await?;
    let c = wait_bound(&ctx, "c").await?;
    assert_eq!(devices(&c), vec![format!("GPU-{node}-0")]);
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}

#[tokio::test]
async fn problems_users_can_fix_are_reported_on_the_pod_and_the_gpuresource() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-problems").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    gpuresource(&ctx, "huge", 16, Sharing::Exclusive, 0, None).await?;
    gpuresource(
        &ctx,
        "orphan",
        1,
        Sharing::Exclusive,
        0,
        Some("no-such-policy"),
    )
    .await?;
    let controller = Controller::start(&ctx).await?;

    create_pod(&ctx, "lost", "missing").await?;
    create_pod(&ctx, "giant", "huge").await?;
    create_pod(&ctx, "stray", "orphan").await?;

    let huge = wait_resource(&ctx, "huge", "Failed", |r| phase(r) == Some(Phase::Failed)).await?;
    let unsatisfiable = condition(&huge, "Unsatisfiable").expect("Unsatisfiable condition");
    assert_eq!(unsatisfiable.status, "True");
    assert!(
        unsatisfiable.message.contains("wants 16 GPUs")
            && unsatisfiable.message.contains("at most 8"),
        "{}",
        unsatisfiable.message
    );
    let orphan = wait_resource(&ctx, "orphan", "PolicyError", |r| {
        condition(r, "PolicyError").is_some()
    })
    .await?;
    let policy_error = condition(&orphan, "PolicyError").expect("condition");
    assert_eq!(policy_error.reason, "PolicyNotFound");
    assert!(
        policy_error.message.contains("no-such-policy"),
        "{}",
        policy_error.message
    );

    let deadline = std::time::Instant::now() + ACT;
    loop {
        let lost = events_for(&ctx, "lost").await?;
        let giant = events_for(&ctx, "giant").await?;
        let stray = events_for(&ctx, "stray").await?;
        if lost
            .iter()
            .any(|(r, n)| r == "GPUResourceNotFound" && n.contains("missing"))
            && giant.iter().any(|(r, _)| r == "Unsatisfiable")
            && stray
                .iter()
                .any(|(r, n)| r == "PolicyNotFound" && n.contains("no-such-policy"))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no Events yet: lost {lost:?}, giant {giant:?}, stray {stray:?}\n{}",
            controller.log_tail()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    for name in ["lost", "giant", "stray"] {
        assert!(
            node_of(&ctx.api::<Pod>().get(name).await?).is_none(),
            "{name} was bound"
        );
    }
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}
