//! Gangs (`scheduling.x-k8s.io/pod-group` with a PodGroup) are bound all
//! together or not at all, and a controller killed while binding one
//! finishes it when it restarts.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, CustomResourceExt, ResourceExt};
use wasmgpu::api::{GPUResource, POD_GROUP_LABEL, PodGroup, PodGroupSpec, Sharing};
use wasmgpu_test_harness::{PodPhase, TestContext, set_pod_phase, wait_for};

use super::{devices, node_of};
use crate::support::*;

/// Installs the PodGroup CRD (the shape wasmgpu reads) once per API server.
async fn install_podgroup_crd(ctx: &TestContext) -> Result<()> {
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_try_init(|| async {
            let crds: Api<CustomResourceDefinition> = ctx.cluster_api();
            let crd = PodGroup::crd();
            let name = crd.name_any();
            crds.patch(
                &name,
                &PatchParams::apply("wasmgpu-test").force(),
                &Patch::Apply(&crd),
            )
            .await?;
            wait_for(&crds, &name, ACT, "established", |crd| {
                crd.and_then(|c| c.status.as_ref())
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    })
            })
            .await?;
            anyhow::Ok(())
        })
        .await?;
    Ok(())
}

async fn podgroup(
    ctx: &TestContext,
    name: &str,
    min_member: i32,
    schedule_timeout_seconds: Option<i32>,
) -> Result<()> {
    let group = PodGroup::new(
        name,
        PodGroupSpec {
            min_member,
            schedule_timeout_seconds,
        },
    );
    ctx.api::<PodGroup>()
        .create(&PostParams::default(), &group)
        .await?;
    Ok(())
}

/// Creates `count` members `<gang>-<i>` of gang `gang`, using `resource`.
async fn members(
    ctx: &TestContext,
    gang: &str,
    count: usize,
    resource: &str,
) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for i in 0..count {
        let name = format!("{gang}-{i}");
        let mut pod = pod(ctx, &name, resource);
        pod.metadata.labels = Some(BTreeMap::from([(
            POD_GROUP_LABEL.to_string(),
            gang.to_string(),
        )]));
        ctx.api::<Pod>()
            .create(&PostParams::default(), &pod)
            .await?;
        names.push(name);
    }
    Ok(names)
}

/// How many of `names` are bound now.
async fn bound_of(pods: &Api<Pod>, names: &[String]) -> Result<Vec<String>> {
    let mut bound = Vec::new();
    for name in names {
        if node_of(&pods.get(name).await?).is_some() {
            bound.push(name.clone());
        }
    }
    Ok(bound)
}

/// Asserts that none of `names` is bound for `quiet`.
async fn none_bound_for(pods: &Api<Pod>, names: &[String], quiet: Duration) -> Result<()> {
    let until = Instant::now() + quiet;
    while Instant::now() < until {
        let bound = bound_of(pods, names).await?;
        ensure!(bound.is_empty(), "gang members bound early: {bound:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// Waits until all of `names` are bound; fails at once if the GPUs of
/// bound pods ever overlap.
async fn all_bound(pods: &Api<Pod>, names: &[String]) -> Result<Vec<Pod>> {
    let until = Instant::now() + ACT;
    loop {
        let mut got = Vec::new();
        for name in names {
            got.push(pods.get(name).await?);
        }
        let mut seen = HashSet::new();
        for pod in got.iter().filter(|p| node_of(p).is_some()) {
            for device in devices(pod) {
                ensure!(seen.insert(device.clone()), "GPU {device} handed out twice");
            }
        }
        if got.iter().all(|p| node_of(p).is_some()) {
            return Ok(got);
        }
        ensure!(
            Instant::now() < until,
            "only {} of {} members bound",
            got.iter().filter(|p| node_of(p).is_some()).count(),
            names.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_gang_binds_whole_once_room_exists_and_one_that_never_fits_binds_nothing() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("gang-whole").await?;
    install_crds(&ctx).await?;
    install_podgroup_crd(&ctx).await?;
    let nodes: Vec<String> = (0..4).map(|i| format!("{}-n{i}", ctx.namespace)).collect();
    for node in &nodes {
        gpu_node(&ctx, node, 8).await?;
    }
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "four", 4, Sharing::Exclusive, 0, None).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();

    // Four single-GPU pods take 4 of the 32 GPUs.
    let fillers: Vec<String> = (0..4).map(|i| format!("filler-{i}")).collect();
    for name in &fillers {
        create_pod(&ctx, name, "one").await?;
    }
    all_bound(&pods, &fillers).await?;

    // A gang of nine 4-GPU members (36 GPUs) can never fit 32: none binds,
    // and each member is told why; past its scheduleTimeoutSeconds, each
    // member and the GPUResource's Ready condition say so.
    podgroup(&ctx, "huge", 9, Some(2)).await?;
    let huge = members(&ctx, "huge", 9, "four").await?;
    none_bound_for(&pods, &huge, Duration::from_secs(5)).await?;
    let events: Api<Event> = ctx.api();
    let told = wait_for_event(&events, "huge-0", "GangWaiting").await?;
    ensure!(told.contains("gang"), "{told}");
    let timed_out = wait_for_event(&events, "huge-8", "GangTimedOut").await?;
    ensure!(
        timed_out.contains("scheduleTimeoutSeconds (2 s)") && timed_out.contains("9 wait"),
        "{timed_out}"
    );
    let resource = wait_for(
        &ctx.api::<GPUResource>(),
        "four",
        ACT,
        "Ready=False GangTimedOut",
        |r| r.is_some_and(|r| ready_reason(r) == Some("GangTimedOut")),
    )
    .await?;
    println!("GangTimedOut: {timed_out}");
    drop(resource);
    for name in &huge {
        pods.delete(name, &Default::default()).await?;
    }

    // A gang of eight 4-GPU members needs all 32: it waits while the
    // fillers run, no member binds early, and all bind once they finish.
    podgroup(&ctx, "train", 8, None).await?;
    let train = members(&ctx, "train", 8, "four").await?;
    none_bound_for(&pods, &train, Duration::from_secs(5)).await?;
    let started = Instant::now();
    for name in &fillers {
        set_pod_phase(&pods, name, PodPhase::Succeeded).await?;
    }
    let bound = all_bound(&pods, &train).await?;
    let nodes_used: HashSet<String> = bound.iter().filter_map(node_of).collect();
    ensure!(nodes_used.len() == 4, "{nodes_used:?}");
    println!(
        "gang of 8 x 4 GPUs bound {:.2}s after the fillers finished",
        started.elapsed().as_secs_f64()
    );
    // The reservation is cleared once every member is bound.
    wait_for(
        &ctx.api::<PodGroup>(),
        "train",
        ACT,
        "reservation cleared",
        |g| g.is_some_and(|g| !g.annotations().contains_key("wasmgpu.io/gang-reservation")),
    )
    .await?;
    drop(controller);
    remove_nodes(&ctx, &nodes).await?;
    Ok(())
}

/// The reason of a GPUResource's `Ready` condition.
fn ready_reason(resource: &GPUResource) -> Option<&str> {
    resource
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.as_str())
}

async fn wait_for_event(events: &Api<Event>, pod: &str, reason: &str) -> Result<String> {
    let until = Instant::now() + ACT;
    loop {
        let list = events.list(&ListParams::default()).await?;
        if let Some(event) = list.items.iter().find(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod)
        }) {
            return Ok(event.note.clone().unwrap_or_default());
        }
        ensure!(Instant::now() < until, "no {reason} event on {pod}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_controller_killed_while_binding_a_gang_finishes_it_after_a_restart() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("gang-kill").await?;
    install_crds(&ctx).await?;
    install_podgroup_crd(&ctx).await?;
    let nodes: Vec<String> = (0..4).map(|i| format!("{}-n{i}", ctx.namespace)).collect();
    for node in &nodes {
        gpu_node(&ctx, node, 8).await?;
    }
    gpuresource(&ctx, "two", 2, Sharing::Exclusive, 0, None).await?;
    let pods = ctx.api::<Pod>();
    podgroup(&ctx, "train", 16, None).await?;
    let train = members(&ctx, "train", 16, "two").await?;

    // One binding at a time: the kill lands while the gang is half bound.
    let flags = ["--write-concurrency".to_string(), "1".to_string()];
    // A watch sees the first binding within milliseconds: the kill lands
    // then, not after a poll of every member.
    let mut watch = watcher(pods.clone(), Default::default())
        .applied_objects()
        .boxed();
    let controller = Controller::start_with(&ctx, &flags).await?;
    let first_bound = tokio::time::timeout(ACT, async {
        while let Some(pod) = watch.try_next().await? {
            if node_of(&pod).is_some() {
                return Ok(pod.name_any());
            }
        }
        anyhow::bail!("the pod watch ended")
    })
    .await;
    let partial = match first_bound {
        Ok(Ok(name)) => name,
        Ok(Err(error)) => return Err(error),
        Err(_) => anyhow::bail!("no member was bound:\n{}", controller.log_tail()),
    };
    controller.kill().await?;
    let after_kill = bound_of(&pods, &train).await?.len();
    println!("killed after {partial} was bound, with {after_kill} of 16 members bound");
    let group = ctx.api::<PodGroup>().get("train").await?;
    ensure!(
        after_kill == 16
            || group
                .annotations()
                .contains_key("wasmgpu.io/gang-reservation"),
        "a partial gang without its reservation"
    );

    // The restarted controller finishes exactly the reserved bindings.
    let _controller = Controller::start(&ctx).await?;
    let bound = all_bound(&pods, &train).await?;
    let reserved: Vec<String> = bound.iter().flat_map(devices).collect();
    ensure!(reserved.len() == 32, "{reserved:?}");
    remove_nodes(&ctx, &nodes).await?;
    Ok(())
}

#[tokio::test]
async fn a_gang_preempted_goes_whole_and_its_gpus_serve_the_preemptor() -> Result<()> {
    use super::preemption::{
        bound_evicting, pod_of_class, priority_class, remove_priority_classes,
    };

    let _turn = exclusive().await;
    let ctx = TestContext::new("gang-victim").await?;
    install_crds(&ctx).await?;
    install_podgroup_crd(&ctx).await?;
    let node = format!("{}-n0", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    gpuresource(&ctx, "two", 2, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "four", 4, Sharing::Exclusive, 0, None).await?;
    let low = priority_class(&ctx, "low", 100, false).await?;
    let high = priority_class(&ctx, "high", 1000, false).await?;
    podgroup(&ctx, "train", 4, None).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();

    // A gang of 4 members of priority 100, 2 GPUs each, holds the node.
    let mut gang = Vec::new();
    for i in 0..4 {
        let name = format!("train-{i}");
        let mut pod = pod(&ctx, &name, "two");
        pod.metadata.labels = Some(BTreeMap::from([(
            POD_GROUP_LABEL.to_string(),
            "train".to_string(),
        )]));
        pod.spec.as_mut().expect("a spec").priority_class_name = Some(low.clone());
        pods.create(&PostParams::default(), &pod).await?;
        gang.push(name);
    }
    all_bound(&pods, &gang).await?;

    // A pod of priority 1000 needs 4 GPUs, 2 members' worth: the whole gang
    // goes, and it gets GPUs only the gang held.
    let created = std::time::Instant::now();
    pod_of_class(&ctx, "urgent", "four", &high).await?;
    let (urgent, mut gone) = bound_evicting(&pods, "urgent", &controller).await?;
    let bound_after = created.elapsed();
    gone.sort();
    ensure!(gone == gang, "the whole gang goes, nothing else: {gone:?}");
    ensure!(devices(&urgent).len() == 4);
    println!(
        "gang as victim: a priority-1000 pod asking 4 of a gang's 8 GPUs: evicted {gone:?}, bound {:.2}s after its creation",
        bound_after.as_secs_f64()
    );
    drop(controller);
    remove_nodes(&ctx, &[node]).await?;
    remove_priority_classes(&ctx, [low, high]).await
}
