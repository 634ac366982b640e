//! Tenants as GPUTenant objects on the real API server: reclaim toward
//! quotas with the shipped fairshare, and a limit the host enforces against
//! a policy that ignores it (binpack). The test plays the kubelet: an
//! evicted pod is gone once its deletion is requested.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use wasmgpu::api::{GPUTenant, GPUTenantSpec, Sharing};
use wasmgpu_test_harness::TestContext;

use super::common::policy_bytes;
use super::configmaps::{put_policy, wait_observed};
use super::preemption::finish_evicted;
use super::{devices, node_of};
use crate::support::*;

const NODES: u32 = 8;
const GPUS: u32 = 8;
const QUOTA: u32 = 32;

/// Creates GPUTenant `name` over `namespace`.
async fn tenant(
    ctx: &TestContext,
    name: &str,
    namespace: &str,
    quota: u32,
    limit: Option<u32>,
) -> Result<()> {
    let tenant = GPUTenant::new(
        name,
        GPUTenantSpec {
            namespaces: vec![namespace.to_owned()],
            namespace_selector: None,
            quota,
            limit,
            weight: 1,
            min_runtime_seconds: None,
        },
    );
    Api::<GPUTenant>::all(ctx.client.clone())
        .create(&PostParams::default(), &tenant)
        .await?;
    Ok(())
}

/// Creates one-GPU pods `{prefix}-{i}` in `ctx` (GPUResource `gpu`) on the
/// nodes of `group`.
async fn create_pods(
    ctx: &TestContext,
    group: &TestContext,
    prefix: &str,
    count: usize,
) -> Result<()> {
    let api = ctx.api::<Pod>();
    futures::stream::iter((0..count).map(|i| format!("{prefix}-{i:03}")))
        .map(|name| {
            let (api, pod) = (api.clone(), pod(group, &name, "gpu"));
            async move { api.create(&PostParams::default(), &pod).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// `(bound and not going, waiting, going)` pods of `ctx`, with the bound
/// ones' GPUs.
async fn census(ctx: &TestContext) -> Result<(Vec<(String, Vec<String>)>, usize, usize)> {
    let pods = ctx.api::<Pod>().list(&ListParams::default()).await?.items;
    let mut holding = Vec::new();
    let (mut waiting, mut going) = (0, 0);
    for pod in &pods {
        if pod.metadata.deletion_timestamp.is_some() {
            going += 1;
        } else if node_of(pod).is_some() {
            holding.push((pod.metadata.name.clone().unwrap_or_default(), devices(pod)));
        } else {
            waiting += 1;
        }
    }
    Ok((holding, waiting, going))
}

/// A GPUTenant's status once it shows `holding`.
async fn wait_tenant(ctx: &TestContext, name: &str, holding: u32) -> Result<GPUTenant> {
    let api = Api::<GPUTenant>::all(ctx.client.clone());
    let deadline = Instant::now() + ACT;
    loop {
        let tenant = api.get(name).await?;
        if tenant.status.as_ref().is_some_and(|s| s.holding == holding) {
            return Ok(tenant);
        }
        ensure!(
            Instant::now() < deadline,
            "GPUTenant {name} never showed holding {holding}: {:?}",
            tenant.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn condition(tenant: &GPUTenant, type_: &str) -> Option<String> {
    let status = tenant.status.as_ref()?;
    let c = status.conditions.iter().find(|c| c.type_ == type_)?;
    Some(c.status.clone())
}

#[tokio::test]
async fn a_tenant_under_its_quota_reclaims_up_to_it_and_the_other_keeps_its_own() -> Result<()> {
    let _turn = exclusive().await;
    let group = TestContext::new("ctl-reclaim").await?;
    install_crds(&group).await?;
    let a = TestContext::new("ctl-reclaim-a").await?;
    let b = TestContext::new("ctl-reclaim-b").await?;
    for ctx in [&a, &b] {
        gpuresource(ctx, "gpu", 1, Sharing::Exclusive, 0, Some("fairshare")).await?;
    }
    let nodes: Vec<String> = (0..NODES)
        .map(|n| format!("{}-n{n}", group.namespace))
        .collect();
    for node in &nodes {
        gpu_node(&group, node, GPUS).await?;
    }
    let (tenant_a, tenant_b) = (
        format!("{}-a", group.namespace),
        format!("{}-b", group.namespace),
    );
    tenant(&group, &tenant_a, &a.namespace, QUOTA, None).await?;
    tenant(&group, &tenant_b, &b.namespace, QUOTA, None).await?;
    let observed = put_policy(
        &group,
        "fairshare",
        "policy.wasm",
        policy_bytes("fairshare"),
        None,
        None,
    )
    .await?;
    let mut controller = Controller::start(&group).await?;
    let status = wait_observed(&group, "fairshare", &observed).await?;
    ensure!(
        status.last_error.is_none(),
        "fairshare did not load: {status:?}"
    );

    // A takes all 64 GPUs while B is idle.
    create_pods(&a, &group, "a", (NODES * GPUS) as usize).await?;
    let deadline = Instant::now() + ACT;
    while census(&a).await?.0.len() < (NODES * GPUS) as usize {
        controller.check_alive()?;
        ensure!(
            Instant::now() < deadline,
            "A never held 64 GPUs\n{}",
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status_a = wait_tenant(&group, &tenant_a, NODES * GPUS).await?;
    ensure!(
        condition(&status_a, "OverQuota").as_deref() == Some("True"),
        "{:?}",
        status_a.status
    );

    // B submits 40: it reaches its quota of 32, A keeps 32, B's other 8 wait.
    let created = Instant::now();
    create_pods(&b, &group, "b", 40).await?;
    let pods_a = a.api::<Pod>();
    let mut evicted = Vec::new();
    let mut bound_at: BTreeMap<String, Duration> = BTreeMap::new();
    let mut lowest_a = usize::MAX;
    let deadline = Instant::now() + ACT;
    let mut stable_since: Option<Instant> = None;
    loop {
        evicted.extend(finish_evicted(&pods_a).await?);
        let (held_a, _, _) = census(&a).await?;
        let (held_b, waiting_b, _) = census(&b).await?;
        lowest_a = lowest_a.min(held_a.len());
        for (name, _) in &held_b {
            bound_at
                .entry(name.clone())
                .or_insert_with(|| created.elapsed());
        }
        // No GPU held twice, at any point.
        let mut all: Vec<&String> = held_a.iter().chain(&held_b).flat_map(|(_, d)| d).collect();
        let total = all.len();
        all.sort();
        all.dedup();
        ensure!(
            all.len() == total,
            "a GPU held twice\n{}",
            controller.log_tail()
        );
        if held_b.len() == QUOTA as usize && waiting_b == 8 {
            let since = *stable_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(5) {
                break;
            }
        } else {
            stable_since = None;
        }
        controller.check_alive()?;
        ensure!(
            Instant::now() < deadline,
            "B holds {} and {waiting_b} wait; A holds {}\n{}",
            held_b.len(),
            held_a.len(),
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (held_a, _, _) = census(&a).await?;
    ensure!(held_a.len() == QUOTA as usize, "A holds {}", held_a.len());
    ensure!(
        lowest_a >= QUOTA as usize,
        "A dropped to {lowest_a}, below its quota"
    );
    ensure!(
        evicted.len() == QUOTA as usize,
        "evicted {} of A: {evicted:?}",
        evicted.len()
    );
    let mut times: Vec<Duration> = bound_at.values().copied().collect();
    times.sort();
    let median = times[times.len() / 2];
    let p99 = times[(times.len() * 99 / 100).min(times.len() - 1)];
    println!(
        "reclaim: A 64 of 64 GPUs (quota 32), B submits 40 (quota 32): B bound {} ({} evicted from A, A never below {lowest_a}); B's pods bound after their creation: median {:.2}s, p99 {:.2}s",
        times.len(),
        evicted.len(),
        median.as_secs_f64(),
        p99.as_secs_f64()
    );
    let status_b = wait_tenant(&group, &tenant_b, QUOTA).await?;
    let waiting = status_b.status.as_ref().map(|s| s.waiting);
    ensure!(waiting == Some(8), "B's status: {:?}", status_b.status);
    ensure!(condition(&status_b, "OverQuota").as_deref() == Some("False"));

    drop(controller);
    for ctx in [&a, &b] {
        ctx.api::<Pod>()
            .delete_collection(
                &DeleteParams::default().grace_period(0),
                &ListParams::default(),
            )
            .await?;
    }
    for name in [&tenant_a, &tenant_b] {
        Api::<GPUTenant>::all(group.client.clone())
            .delete(name, &DeleteParams::default())
            .await?;
    }
    remove_nodes(&group, &nodes).await
}

#[tokio::test]
async fn a_tenants_limit_holds_whatever_the_policy() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-limit").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n0", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    // binpack keeps to the limit; the hostile policy gives every pod a GPU.
    gpuresource(&ctx, "gpu", 1, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "h", 1, Sharing::Exclusive, 0, Some("hostile")).await?;
    let name = format!("{}-t", ctx.namespace);
    tenant(&ctx, &name, &ctx.namespace, 1, Some(2)).await?;
    let observed = put_policy(
        &ctx,
        "hostile",
        "policy.wasm",
        policy_bytes("hostile-policy"),
        None,
        Some("\"past-limit\""),
    )
    .await?;
    let controller = Controller::start(&ctx).await?;
    wait_observed(&ctx, "hostile", &observed).await?;
    create_pods(&ctx, &ctx, "p", 3).await?;
    let deadline = Instant::now() + ACT;
    let waiting = loop {
        let (held, waiting, _) = census(&ctx).await?;
        if held.len() == 2 && waiting == 1 {
            let pods = ctx.api::<Pod>().list(&ListParams::default()).await?.items;
            break pods
                .into_iter()
                .find(|p| node_of(p).is_none())
                .and_then(|p| p.metadata.name)
                .unwrap_or_default();
        }
        ensure!(
            Instant::now() < deadline,
            "{} bound, {waiting} wait\n{}",
            held.len(),
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // binpack says why the third waits.
    let deadline = Instant::now() + ACT;
    loop {
        let events = super::events_for(&ctx, &waiting).await?;
        if events
            .iter()
            .any(|(_, note)| note.contains("holds 2 of its limit 2 GPUs"))
        {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{waiting}'s Events do not name the limit: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A policy that ignores the limit is refused by the host.
    let api = ctx.api::<Pod>();
    api.create(&PostParams::default(), &pod(&ctx, "hostile-pod", "h"))
        .await?;
    let deadline = Instant::now() + ACT;
    while !controller.log_tail().contains("past its limit of 2") {
        ensure!(
            Instant::now() < deadline,
            "no refusal past the limit\n{}",
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (held, waiting, _) = census(&ctx).await?;
    ensure!(
        held.len() == 2 && waiting == 2,
        "{} bound, {waiting} wait",
        held.len()
    );
    let status = wait_tenant(&ctx, &name, 2).await?;
    ensure!(
        condition(&status, "OverLimit").as_deref() == Some("False"),
        "{:?}",
        status.status
    );
    ensure!(
        condition(&status, "OverQuota").as_deref() == Some("True"),
        "{:?}",
        status.status
    );

    // Lowering the limit under what it holds: OverLimit, nobody evicted.
    let tenants = Api::<GPUTenant>::all(ctx.client.clone());
    let mut t = tenants.get(&name).await?;
    t.spec.quota = 0;
    t.spec.limit = Some(1);
    tenants.replace(&name, &PostParams::default(), &t).await?;
    let deadline = Instant::now() + ACT;
    loop {
        let t = tenants.get(&name).await?;
        if condition(&t, "OverLimit").as_deref() == Some("True") {
            break;
        }
        ensure!(Instant::now() < deadline, "never OverLimit: {:?}", t.status);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ensure!(census(&ctx).await?.0.len() == 2, "its pods keep their GPUs");
    drop(controller);
    tenants.delete(&name, &DeleteParams::default()).await?;
    api.delete_collection(
        &DeleteParams::default().grace_period(0),
        &ListParams::default(),
    )
    .await?;
    remove_nodes(&ctx, &[node]).await
}

#[tokio::test]
async fn a_tenant_chooses_its_namespaces_by_label() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-tenant-label").await?;
    install_crds(&ctx).await?;
    let tenants = Api::<GPUTenant>::all(ctx.client.clone());
    // Neither globs nor a selector: the API server refuses it, naming both.
    let error = tenants
        .create(
            &PostParams::default(),
            &GPUTenant::new(
                &format!("{}-none", ctx.namespace),
                GPUTenantSpec {
                    namespaces: Vec::new(),
                    namespace_selector: None,
                    quota: 0,
                    limit: None,
                    weight: 1,
                    min_runtime_seconds: None,
                },
            ),
        )
        .await
        .expect_err("a tenant naming no namespaces is refused");
    ensure!(
        error.to_string().contains("namespaceSelector"),
        "the refusal names the fields: {error}"
    );

    let node = format!("{}-n0", ctx.namespace);
    gpu_node(&ctx, &node, 4).await?;
    gpuresource(&ctx, "gpu", 1, Sharing::Exclusive, 0, None).await?;
    let team = format!("{}-team", ctx.namespace);
    let name = format!("{}-t", ctx.namespace);
    tenants
        .create(
            &PostParams::default(),
            &GPUTenant::new(
                &name,
                GPUTenantSpec {
                    namespaces: Vec::new(),
                    namespace_selector: Some(LabelSelector {
                        match_labels: Some([("team".to_owned(), team.clone())].into()),
                        ..LabelSelector::default()
                    }),
                    quota: 0,
                    limit: Some(1),
                    weight: 1,
                    min_runtime_seconds: None,
                },
            ),
        )
        .await?;
    let namespaces = Api::<Namespace>::all(ctx.client.clone());
    let label = |value: Option<&str>| {
        Patch::Merge(serde_json::json!({"metadata": {"labels": {"team": value}}}))
    };
    namespaces
        .patch(&ctx.namespace, &PatchParams::default(), &label(Some(&team)))
        .await?;
    let controller = Controller::start(&ctx).await?;
    create_pods(&ctx, &ctx, "p", 2).await?;
    // The label makes the namespace the tenant's: its limit of 1 holds.
    let status = wait_tenant(&ctx, &name, 1).await?;
    let seen = &status.status.as_ref().map(|s| s.namespaces_seen.clone());
    ensure!(
        seen.as_deref() == Some(std::slice::from_ref(&ctx.namespace)),
        "namespacesSeen: {seen:?}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (held, waiting, _) = census(&ctx).await?;
    ensure!(
        held.len() == 1 && waiting == 1,
        "limit 1 through the selector: {} bound, {waiting} wait\n{}",
        held.len(),
        controller.log_tail()
    );
    // Without the label the namespace is nobody's: no limit, the second
    // pod is placed, and the tenant holds nothing.
    namespaces
        .patch(&ctx.namespace, &PatchParams::default(), &label(None))
        .await?;
    let deadline = Instant::now() + ACT;
    loop {
        let (held, waiting, _) = census(&ctx).await?;
        if held.len() == 2 && waiting == 0 {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "unlabelled, the namespace is still limited: {} bound, {waiting} wait\n{}",
            held.len(),
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_tenant(&ctx, &name, 0).await?;
    drop(controller);
    tenants.delete(&name, &DeleteParams::default()).await?;
    ctx.api::<Pod>()
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await?;
    remove_nodes(&ctx, &[node]).await
}
