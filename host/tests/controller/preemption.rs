//! Preemption on the real API server: a pod of higher priority that fits
//! nowhere evicts exactly the pods it needs (through the Eviction API), is
//! bound to their GPUs once they are gone, and a pod whose
//! `preemptionPolicy` is `Never` evicts nobody, nor does one whose victims a
//! PodDisruptionBudget protects; a preemption whose second eviction the
//! budget refuses (429) is dropped and backs off. The test plays the kubelet:
//! an evicted pod is gone once its deletion is requested.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use wasmgpu::api::Sharing;
use wasmgpu_test_harness::{PodPhase, TestContext, set_pod_phase};

use super::common::policy_bytes;
use super::configmaps::{put_policy, wait_observed};
use super::{devices, node_of, wait_bound};
use crate::support::*;

/// Creates PriorityClass `{namespace}-{name}` of `value`.
pub(super) async fn priority_class(
    ctx: &TestContext,
    name: &str,
    value: i32,
    never: bool,
) -> Result<String> {
    let name = format!("{}-{name}", ctx.namespace);
    let class = PriorityClass {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        value: Some(value),
        preemption_policy: never.then(|| "Never".to_owned()),
        ..Default::default()
    };
    Api::<PriorityClass>::all(ctx.client.clone())
        .create(&PostParams::default(), &class)
        .await?;
    Ok(name)
}

/// Deletes the PriorityClasses `classes` (cluster-scoped, so each test
/// removes its own).
pub(super) async fn remove_priority_classes<const N: usize>(
    ctx: &TestContext,
    classes: [String; N],
) -> Result<()> {
    let api = Api::<PriorityClass>::all(ctx.client.clone());
    for class in classes {
        api.delete(&class, &DeleteParams::default()).await?;
    }
    Ok(())
}

/// Creates pod `name` of GPUResource `resource` and PriorityClass `class`,
/// labelled `tier: {class}`.
pub(super) async fn pod_of_class(
    ctx: &TestContext,
    name: &str,
    resource: &str,
    class: &str,
) -> Result<Pod> {
    let mut pod = pod(ctx, name, resource);
    pod.spec.as_mut().expect("a spec").priority_class_name = Some(class.to_owned());
    pod.metadata.labels = Some([("tier".to_owned(), class.to_owned())].into());
    Ok(ctx
        .api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await?)
}

/// Creates `count` one-GPU pods `{prefix}-{i}` (GPUResource `one`) of
/// PriorityClass `class` and waits until each is bound; their names.
async fn fill(ctx: &TestContext, prefix: &str, count: usize, class: &str) -> Result<Vec<String>> {
    let names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i}")).collect();
    for name in &names {
        pod_of_class(ctx, name, "one", class).await?;
    }
    for name in &names {
        wait_bound(ctx, name).await?;
    }
    Ok(names)
}

/// The kubelet's part: pods whose deletion was requested (evicted) are
/// gone at once. Returns their names.
pub(super) async fn finish_evicted(pods: &Api<Pod>) -> Result<Vec<String>> {
    let mut gone = Vec::new();
    for pod in pods.list(&ListParams::default()).await? {
        if pod.metadata.deletion_timestamp.is_some() {
            let name = pod.name_any();
            pods.delete(&name, &DeleteParams::default().grace_period(0))
                .await?;
            gone.push(name);
        }
    }
    Ok(gone)
}

/// Plays the kubelet (evicted pods finish) until pod `name` is bound;
/// the pod, and the names of the pods evicted meanwhile.
pub(super) async fn bound_evicting(
    pods: &Api<Pod>,
    name: &str,
    controller: &Controller,
) -> Result<(Pod, Vec<String>)> {
    let mut gone = Vec::new();
    let deadline = Instant::now() + ACT;
    loop {
        gone.extend(finish_evicted(pods).await?);
        let pod = pods.get(name).await?;
        if node_of(&pod).is_some() {
            return Ok((pod, gone));
        }
        ensure!(
            Instant::now() < deadline,
            "{name} not bound; evicted {gone:?}\n{}",
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_higher_priority_pod_evicts_exactly_what_it_needs_and_never_means_never() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("preempt").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n0", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "four", 4, Sharing::Exclusive, 0, None).await?;
    let low = priority_class(&ctx, "low", 100, false).await?;
    let high = priority_class(&ctx, "high", 1000, false).await?;
    let polite = priority_class(&ctx, "polite", 1000, true).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();

    // 8 pods of priority 100 hold the node's 8 GPUs.
    let fillers = fill(&ctx, "low", 8, &low).await?;

    // Priority 1000 but preemptionPolicy Never: nobody is evicted.
    pod_of_class(&ctx, "never", "four", &polite).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let evicted = pods
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .count();
    ensure!(evicted == 0, "{evicted} pod(s) evicted for a Never pod");
    ensure!(node_of(&pods.get("never").await?).is_none());
    pods.delete("never", &DeleteParams::default()).await?;

    // Priority 1000, may preempt: exactly 4 go, and it gets their GPUs.
    let created = Instant::now();
    pod_of_class(&ctx, "urgent", "four", &high).await?;
    let (urgent, mut gone) = bound_evicting(&pods, "urgent", &controller).await?;
    let bound_after = created.elapsed();
    gone.sort();
    ensure!(gone.len() == 4, "evicted {gone:?}");
    let left: Vec<String> = fillers
        .iter()
        .filter(|f| !gone.contains(f))
        .cloned()
        .collect();
    let mut held: Vec<String> = Vec::new();
    for name in &left {
        let pod = pods.get(name).await?;
        ensure!(node_of(&pod).is_some(), "{name} still runs");
        held.extend(devices(&pod));
    }
    let taken = devices(&urgent);
    ensure!(taken.len() == 4, "{taken:?}");
    ensure!(
        taken.iter().all(|d| !held.contains(d)),
        "a GPU held twice: urgent {taken:?}, the others {held:?}"
    );
    let nomination = urgent.annotations().get("wasmgpu.io/nomination").cloned();
    ensure!(
        nomination.is_some(),
        "the nomination is recorded on the preemptor"
    );
    println!(
        "preemption: 8 x priority 100 holding 8 GPUs, a priority-1000 pod asking 4: evicted {gone:?}, bound {:.2}s after its creation",
        bound_after.as_secs_f64()
    );

    // A PodDisruptionBudget that allows no disruption over the 4 left:
    // another pod of priority 1000 evicts nobody and waits.
    let budget: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "keep-low"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"tier": low}}},
    }))?;
    ctx.api::<PodDisruptionBudget>()
        .create(&PostParams::default(), &budget)
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let created = Instant::now();
    pod_of_class(&ctx, "blocked", "four", &high).await?;
    // It is told why, and stays unbound with nobody evicted for 5 s.
    let deadline = Instant::now() + ACT;
    let told_after = loop {
        let events = super::events_for(&ctx, "blocked").await?;
        if events.iter().any(|(reason, note)| {
            reason == "Waiting" && note.contains("protected by a PodDisruptionBudget")
        }) {
            break created.elapsed();
        }
        ensure!(
            Instant::now() < deadline,
            "blocked is not told of the PodDisruptionBudget: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(created.elapsed())).await;
    for name in &left {
        let pod = pods.get(name).await?;
        ensure!(
            pod.metadata.deletion_timestamp.is_none(),
            "{name} evicted despite its PodDisruptionBudget"
        );
    }
    ensure!(
        node_of(&pods.get("blocked").await?).is_none(),
        "blocked is not bound"
    );
    println!(
        "PodDisruptionBudget maxUnavailable 0 over the victims: nobody evicted; the preemptor told why {:.2}s after its creation",
        told_after.as_secs_f64()
    );
    drop(controller);
    remove_nodes(&ctx, &[node]).await?;
    remove_priority_classes(&ctx, [low, high, polite]).await
}

/// No pod of `pods` is being evicted.
async fn none_evicted(pods: &Api<Pod>) -> Result<()> {
    let going: Vec<String> = pods
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .map(|p| p.name_any())
        .collect();
    ensure!(going.is_empty(), "evicted: {going:?}");
    Ok(())
}

#[tokio::test]
async fn a_hostile_policys_preemptions_are_refused_each_with_its_reason() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("preempt-hostile").await?;
    install_crds(&ctx).await?;
    // n0 holds two priority-100 pods, n1 one.
    let nodes = [
        format!("{}-n0", ctx.namespace),
        format!("{}-n1", ctx.namespace),
    ];
    gpu_node(&ctx, &nodes[0], 2).await?;
    gpu_node(&ctx, &nodes[1], 1).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "h", 1, Sharing::Exclusive, 0, Some("hostile")).await?;
    let low = priority_class(&ctx, "low", 100, false).await?;
    let lower = priority_class(&ctx, "lower", 50, false).await?;
    let high = priority_class(&ctx, "high", 1000, false).await?;
    let polite = priority_class(&ctx, "polite", 1000, true).await?;
    let mut controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();
    fill(&ctx, "filler", 3, &low).await?;
    let cases = [
        (
            "preempt-first",
            &lower,
            "has priority 100, not lower than the preemptor's 50",
        ),
        ("preempt-first", &polite, "preemptionPolicy is Never"),
        (
            "preempt-needless",
            &high,
            "is needless: the preemptor fits without evicting it",
        ),
        ("preempt-elsewhere", &high, "runs on another node"),
    ];
    for (n, (misbehaviour, class, reason)) in cases.into_iter().enumerate() {
        let config = format!("\"{misbehaviour}\"");
        let observed = put_policy(
            &ctx,
            "hostile",
            "policy.wasm",
            policy_bytes("hostile-policy"),
            None,
            Some(&config),
        )
        .await?;
        wait_observed(&ctx, "hostile", &observed).await?;
        let name = format!("urgent-{n}");
        pod_of_class(&ctx, &name, "h", class).await?;
        let deadline = Instant::now() + ACT;
        while !controller.log_tail().contains(reason) {
            controller.check_alive()?;
            ensure!(
                Instant::now() < deadline,
                "{misbehaviour} for a pod of {class}: no refusal naming {reason:?}\n{}",
                controller.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        none_evicted(&pods).await?;
        ensure!(
            node_of(&pods.get(&name).await?).is_none(),
            "{name} is not bound"
        );
        pods.delete(&name, &DeleteParams::default().grace_period(0))
            .await?;
        println!("hostile {misbehaviour} ({class}): refused, {reason:?}; nobody evicted");
    }
    drop(controller);
    pods.delete_collection(
        &DeleteParams::default().grace_period(0),
        &ListParams::default(),
    )
    .await?;
    remove_nodes(&ctx, &nodes).await?;
    remove_priority_classes(&ctx, [low, lower, high, polite]).await
}

#[tokio::test]
async fn a_controller_killed_between_the_evictions_and_the_binding_binds_the_preemptor_after_restart()
-> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("preempt-kill").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n0", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "four", 4, Sharing::Exclusive, 0, None).await?;
    let low = priority_class(&ctx, "low", 100, false).await?;
    let high = priority_class(&ctx, "high", 1000, false).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();
    let fillers = fill(&ctx, "low", 8, &low).await?;
    let created = Instant::now();
    pod_of_class(&ctx, "urgent", "four", &high).await?;
    // Wait for the 4 evictions (the victims are going, not gone).
    let deadline = Instant::now() + ACT;
    let going = loop {
        let going: Vec<String> = pods
            .list(&ListParams::default())
            .await?
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .map(|p| p.name_any())
            .collect();
        if going.len() == 4 {
            break going;
        }
        ensure!(
            Instant::now() < deadline,
            "evicted {going:?}\n{}",
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let nomination = wasmgpu::api::Nomination::from_annotations(
        pods.get("urgent").await?.metadata.annotations.as_ref(),
    )
    .expect("a nomination before the evictions")?;
    controller.kill().await?;
    // The victims finish while no controller runs; a pod of the same
    // priority arrives that could take a freed GPU.
    let finished = finish_evicted(&pods).await?;
    ensure!(finished.len() == 4, "{finished:?}");
    pod_of_class(&ctx, "sneaky", "one", &low).await?;
    let restarted = Instant::now();
    let controller = Controller::start(&ctx).await?;
    let urgent = wait_bound(&ctx, "urgent").await?;
    let (bound_after, after_restart) = (created.elapsed(), restarted.elapsed());
    let taken = devices(&urgent);
    let nominated: Vec<String> = nomination
        .allocation
        .devices
        .iter()
        .map(|d| d.uuid.clone())
        .collect();
    ensure!(
        taken == nominated,
        "bound to {taken:?}, nominated {nominated:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        node_of(&pods.get("sneaky").await?).is_none(),
        "sneaky took a GPU: none is free"
    );
    let mut held: Vec<String> = taken.clone();
    for name in fillers.iter().filter(|f| !going.contains(f)) {
        let pod = pods.get(name).await?;
        ensure!(
            pod.metadata.deletion_timestamp.is_none(),
            "{name} evicted needlessly after the restart"
        );
        held.extend(devices(&pod));
    }
    let total = held.len();
    held.sort();
    held.dedup();
    ensure!(
        held.len() == total && total == 8,
        "a GPU held twice: {held:?}"
    );
    println!(
        "killed between the evictions and the binding: {going:?} went; after the restart urgent was bound to its nominated GPUs {taken:?}, nobody else evicted; bound {:.2}s after its creation, {:.2}s after the restart began",
        bound_after.as_secs_f64(),
        after_restart.as_secs_f64()
    );
    drop(controller);
    pods.delete_collection(
        &DeleteParams::default().grace_period(0),
        &ListParams::default(),
    )
    .await?;
    remove_nodes(&ctx, &[node]).await?;
    remove_priority_classes(&ctx, [low, high]).await
}

#[tokio::test]
async fn pods_within_their_tenants_minimum_runtime_are_not_preempted() -> Result<()> {
    use kube::api::{Patch, PatchParams};
    use wasmgpu::api::{GPUTenant, GPUTenantSpec};

    let _turn = exclusive().await;
    let ctx = TestContext::new("min-runtime").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n0", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "four", 4, Sharing::Exclusive, 0, None).await?;
    let tenants = Api::<GPUTenant>::all(ctx.client.clone());
    let tenant = format!("{}-t", ctx.namespace);
    tenants
        .create(
            &PostParams::default(),
            &GPUTenant::new(
                &tenant,
                GPUTenantSpec {
                    namespaces: vec![ctx.namespace.clone()],
                    namespace_selector: None,
                    quota: 0,
                    limit: None,
                    weight: 1,
                    min_runtime_seconds: Some(3600),
                },
            ),
        )
        .await?;
    let low = priority_class(&ctx, "low", 100, false).await?;
    let high = priority_class(&ctx, "high", 1000, false).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();
    let fillers = fill(&ctx, "low", 8, &low).await?;

    // Every pod of priority 100 is in its first hour: nobody goes, and the
    // preemptor is told why.
    pod_of_class(&ctx, "urgent", "four", &high).await?;
    let deadline = Instant::now() + ACT;
    loop {
        none_evicted(&pods).await?;
        let events = super::events_for(&ctx, "urgent").await?;
        if events.iter().any(|(reason, note)| {
            reason == "Waiting"
                && note.contains(
                    "8 pod(s) of lower priority it could preempt are within their minimum runtime",
                )
        }) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "urgent is not told of the minimum runtime: {events:?}\n{}",
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    none_evicted(&pods).await?;
    ensure!(node_of(&pods.get("urgent").await?).is_none());

    // The tenant drops its minimum: exactly 4 go and urgent is bound.
    tenants
        .patch(
            &tenant,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"minRuntimeSeconds": null}})),
        )
        .await?;
    let (urgent, gone) = bound_evicting(&pods, "urgent", &controller).await?;
    ensure!(gone.len() == 4, "evicted {gone:?}");
    ensure!(gone.iter().all(|g| fillers.contains(g)));
    ensure!(devices(&urgent).len() == 4);
    drop(controller);
    tenants.delete(&tenant, &DeleteParams::default()).await?;
    remove_nodes(&ctx, &[node]).await?;
    remove_priority_classes(&ctx, [low, high]).await
}

#[tokio::test]
async fn a_preemption_a_budget_refuses_midway_is_dropped_and_backs_off() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("preempt-backoff").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n0", ctx.namespace);
    gpu_node(&ctx, &node, 4).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "two", 2, Sharing::Exclusive, 0, None).await?;
    let low = priority_class(&ctx, "low", 100, false).await?;
    let high = priority_class(&ctx, "high", 1000, false).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();
    let fillers = fill(&ctx, "low", 4, &low).await?;
    // Running and ready: the Eviction API holds such pods to their budget
    // (a pending one may always be evicted).
    for name in &fillers {
        set_pod_phase(&pods, name, PodPhase::Running).await?;
    }

    // A budget whose status (written as the disruption controller would)
    // allows one disruption: both victims look evictable, the first
    // eviction spends the budget and the second is refused (429).
    let budgets = ctx.api::<PodDisruptionBudget>();
    let budget: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "one-at-a-time"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"tier": low}}},
    }))?;
    budgets.create(&PostParams::default(), &budget).await?;
    budgets
        .patch_status(
            "one-at-a-time",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"status": {
                "observedGeneration": 1, "disruptionsAllowed": 1,
                "currentHealthy": 4, "desiredHealthy": 3, "expectedPods": 4,
            }})),
        )
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let created = Instant::now();
    pod_of_class(&ctx, "urgent", "two", &high).await?;
    let deadline = Instant::now() + ACT;
    let note = loop {
        let events = super::events_for(&ctx, "urgent").await?;
        if let Some((_, note)) = events.iter().find(|(r, _)| r == "PreemptionBlocked") {
            break note.clone();
        }
        ensure!(
            Instant::now() < deadline,
            "no PreemptionBlocked on urgent: {events:?}\n{}",
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ensure!(note.contains("preempting no one for 10s"), "{note}");
    let blocked_after = created.elapsed();

    // One victim went before the refusal; nobody else is evicted while the
    // preemptor backs off, nor after (the budget is spent), and it waits.
    let mut gone = finish_evicted(&pods).await?;
    tokio::time::sleep(Duration::from_secs(12)).await;
    gone.extend(finish_evicted(&pods).await?);
    ensure!(gone.len() == 1, "evicted {gone:?}");
    ensure!(fillers.contains(&gone[0]), "{gone:?}");
    ensure!(
        node_of(&pods.get("urgent").await?).is_none(),
        "urgent is bound with one free GPU and a spent budget"
    );
    let annotations = pods.get("urgent").await?.annotations().clone();
    ensure!(
        !annotations.contains_key("wasmgpu.io/nomination"),
        "the nomination is dropped: {annotations:?}"
    );
    println!(
        "PodDisruptionBudget refusing the second eviction: evicted {gone:?}, PreemptionBlocked {:.2}s after the preemptor's creation, not bound",
        blocked_after.as_secs_f64()
    );
    drop(controller);
    remove_nodes(&ctx, &[node]).await?;
    remove_priority_classes(&ctx, [low, high]).await
}
