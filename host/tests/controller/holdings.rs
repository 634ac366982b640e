//! A GPU is free only when the pod holding it is gone or finished: never
//! because its GPUResource, its namespace or its node's GPUNode went away.
//! And a controller of this version takes over the ledgers of earlier
//! versions without moving a running pod.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use wasmgpu::api::{GPUNode, GPUResource, Phase, Sharing};
use wasmgpu_test_harness::{PodPhase, TestContext, set_pod_phase, wait_for};

use super::{condition, devices, node_of, phase, wait_bound};
use crate::support::*;

/// Long enough for two resync rounds (`--resync 2s`) and the change that
/// starts one.
const QUIET: Duration = Duration::from_secs(5);

/// Asserts that `name` stays unbound for `QUIET`.
async fn stays_unbound(pods: &Api<Pod>, name: &str, why: &str) -> Result<()> {
    let until = Instant::now() + QUIET;
    while Instant::now() < until {
        let pod = pods.get(name).await?;
        ensure!(
            node_of(&pod).is_none(),
            "{name} was bound to {:?} with GPUs {:?} although {why}",
            node_of(&pod),
            devices(&pod)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Keeps a deleted pod terminating until the finalizer is removed.
const HOLD: &str = "wasmgpu.io/test-hold";

async fn release_hold(pods: &Api<Pod>, name: &str) -> Result<()> {
    let patch = json!({ "metadata": { "finalizers": null } });
    pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

#[tokio::test]
async fn deleting_a_gpuresource_or_its_namespace_frees_no_gpu_a_live_pod_holds() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("hold-delete").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 3).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();

    // A running pod and one that will be terminating, of GPUResource gd.
    gpuresource(&ctx, "gd", 1, Sharing::Exclusive, 0, None).await?;
    create_pod(&ctx, "run", "gd").await?;
    let mut term = pod(&ctx, "term", "gd");
    term.metadata.finalizers = Some(vec![HOLD.into()]);
    pods.create(&PostParams::default(), &term).await?;
    // A pod of another team's namespace, also terminating once deleted.
    let team = TestContext::new("hold-team").await?;
    let team_pods = team.api::<Pod>();
    team.api::<GPUResource>()
        .create(
            &PostParams::default(),
            &GPUResource::new(
                "tg",
                wasmgpu::api::GPUResourceSpec {
                    mig_profile: None,
                    count: 1,
                    model: None,
                    memory_mib: 0,
                    sharing: Sharing::Exclusive,
                    policy: None,
                },
            ),
        )
        .await?;
    let mut t0 = pod(&ctx, "t0", "tg");
    t0.metadata.finalizers = Some(vec![HOLD.into()]);
    team_pods.create(&PostParams::default(), &t0).await?;

    let mut gpu_of = BTreeMap::new();
    for (api, name) in [(&pods, "run"), (&pods, "term"), (&team_pods, "t0")] {
        let bound = wait_bound_in(api, name).await?;
        set_pod_phase(api, name, PodPhase::Running).await?;
        gpu_of.insert(name, devices(&bound)[0].clone());
    }

    // The GPUResource of running and terminating pods goes; the team's
    // namespace goes: the namespace controller deletes its pod, which
    // terminates (its kubelet confirms at once; the finalizer keeps it),
    // and would delete its GPUResource once the pod is gone.
    pods.delete("term", &DeleteParams::default().grace_period(0))
        .await?;
    ctx.api::<GPUResource>()
        .delete("gd", &DeleteParams::default())
        .await?;
    wait_for(&ctx.api::<GPUResource>(), "gd", ACT, "deleted", |r| {
        r.is_none()
    })
    .await?;
    Api::<Namespace>::all(ctx.client.clone())
        .delete(&team.namespace, &DeleteParams::default())
        .await?;
    wait_for(&team_pods, "t0", ACT, "terminating", |p| {
        p.is_some_and(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await?;
    team_pods
        .delete("t0", &DeleteParams::default().grace_period(0))
        .await?;

    // Every GPU is held by a live pod: a new pod waits.
    gpuresource(&ctx, "next", 1, Sharing::Exclusive, 0, None).await?;
    create_pod(&ctx, "w1", "next").await?;
    stays_unbound(&pods, "w1", "run, term and t0 hold the 3 GPUs").await?;

    // Each GPU is free once its pod is finished or gone, and only then.
    let mut freed_to_bound = Vec::new();
    for (step, (api, holder, waiter)) in [
        (&pods, "run", "w1"),
        (&pods, "term", "w2"),
        (&team_pods, "t0", "w3"),
    ]
    .into_iter()
    .enumerate()
    {
        if step > 0 {
            create_pod(&ctx, waiter, "next").await?;
            stays_unbound(&pods, waiter, &format!("{holder} still holds its GPU")).await?;
        }
        let freed = Instant::now();
        if holder == "run" {
            set_pod_phase(api, holder, PodPhase::Succeeded).await?;
        } else {
            release_hold(api, holder).await?;
        }
        let bound = wait_bound_in(&pods, waiter).await?;
        freed_to_bound.push(freed.elapsed());
        assert_eq!(
            devices(&bound),
            [gpu_of[holder].clone()],
            "{waiter} gets the GPU {holder} freed"
        );
    }
    eprintln!("pod finished or gone → its GPU bound to the next pod: {freed_to_bound:?}");
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}

async fn wait_bound_in(pods: &Api<Pod>, name: &str) -> Result<Pod> {
    Ok(
        wait_for(pods, name, ACT, "bound", |p| p.and_then(node_of).is_some())
            .await?
            .expect("bound"),
    )
}

#[tokio::test]
async fn a_missing_gpunode_keeps_held_gpus_held_and_its_pods_waiting() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("hold-gpunode").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 1).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();
    create_pod(&ctx, "run", "one").await?;
    let run = wait_bound(&ctx, "run").await?;
    set_pod_phase(&pods, "run", PodPhase::Running).await?;

    ctx.cluster_api::<GPUNode>()
        .delete(&node, &DeleteParams::default())
        .await?;
    create_pod(&ctx, "next", "one").await?;
    stays_unbound(&pods, "next", "the node's GPUNode is gone").await?;
    let one = ctx.api::<GPUResource>().get("one").await?;
    assert_ne!(phase(&one), Some(Phase::Failed), "{:?}", one.status);
    assert!(
        condition(&one, "Unsatisfiable").is_none_or(|c| c.status != "True"),
        "{:?}",
        one.status
    );

    // The agent publishes it again: the held GPU is still held.
    publish_gpunode(&ctx, &node, 1).await?;
    stays_unbound(&pods, "next", "run still holds the only GPU").await?;
    set_pod_phase(&pods, "run", PodPhase::Succeeded).await?;
    let next = wait_bound(&ctx, "next").await?;
    assert_eq!(devices(&next), devices(&run));
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}

#[tokio::test]
async fn an_earlier_versions_ledger_is_moved_onto_its_pods_without_moving_them() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("hold-adopt").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 3).await?;
    let pods = ctx.api::<Pod>();

    // What an earlier version left: a GPUResource with its finalizer and a
    // ledger holding GPU 1 for a bound pod and GPU 2 for a pod it had not
    // bound yet (crashed in between).
    let mut old = GPUResource::new(
        "old",
        wasmgpu::api::GPUResourceSpec {
            mig_profile: None,
            count: 1,
            model: None,
            memory_mib: 0,
            sharing: Sharing::Exclusive,
            policy: None,
        },
    );
    old.metadata.finalizers = Some(vec!["wasmgpu.io/release".into()]);
    let resources = ctx.api::<GPUResource>();
    resources.create(&PostParams::default(), &old).await?;
    let kept = pods
        .create(&PostParams::default(), &pod(&ctx, "kept", "old"))
        .await?;
    let half = pods
        .create(&PostParams::default(), &pod(&ctx, "half", "old"))
        .await?;
    let gpu = |i: u32| format!("GPU-{node}-{i}");
    let entry = |p: &Pod, i: u32| {
        json!({
            "pod": p.name_any(), "podUID": p.uid(), "node": node, "sharing": "Exclusive",
            "devices": [{ "uuid": gpu(i), "index": i, "memoryMiB": H100_MIB }],
            "policy": { "name": "binpack", "digest": "sha256:00" },
        })
    };
    resources
        .patch_status(
            "old",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({ "status": { "allocations": [entry(&kept, 1), entry(&half, 2)] } }),
            ),
        )
        .await?;
    pods.patch(
        "kept",
        &PatchParams::default(),
        &Patch::Merge(&json!({ "metadata": { "annotations": {
            "wasmgpu.io/devices": gpu(1), "wasmgpu.io/node": node,
        } } })),
    )
    .await?;
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": { "name": "kept" },
        "target": { "apiVersion": "v1", "kind": "Node", "name": node },
    });
    pods.create_subresource::<serde_json::Value, serde_json::Value>(
        "binding",
        "kept",
        &PostParams::default(),
        &binding,
    )
    .await?;
    set_pod_phase(&pods, "kept", PodPhase::Running).await?;
    // A new pod, waiting when the new controller starts: only GPU 0 is free.
    create_pod(&ctx, "fresh", "old").await?;

    let controller = Controller::start(&ctx).await?;
    let fresh = wait_bound(&ctx, "fresh").await?;
    assert_eq!(devices(&fresh), [gpu(0)]);
    let half = wait_bound(&ctx, "half").await?;
    assert_eq!(devices(&half), [gpu(2)], "the ledger's GPUs, not others");
    assert_eq!(allocation(&half).expect("recorded").devices[0].uuid, gpu(2));
    let kept_now = wait_for(&pods, "kept", ACT, "its allocation recorded", |p| {
        p.and_then(allocation).is_some()
    })
    .await?
    .expect("exists");
    assert_eq!(kept_now.uid(), kept.uid(), "the same pod");
    assert_eq!(node_of(&kept_now).as_deref(), Some(node.as_str()));
    assert_eq!(
        allocation(&kept_now).expect("recorded").devices[0].uuid,
        gpu(1)
    );
    let emptied = wait_for(
        &resources,
        "old",
        ACT,
        "ledger emptied, finalizer gone",
        |r| {
            r.is_some_and(|r| {
                // The status writer may write the count after the ledger.
                r.status
                    .as_ref()
                    .is_some_and(|s| s.allocations.is_empty() && s.holding.is_some())
                    && r.finalizers().is_empty()
            })
        },
    )
    .await?
    .expect("exists");
    assert_eq!(emptied.status.and_then(|s| s.holding), Some(3));
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}

#[tokio::test]
async fn what_changes_under_running_pods_is_told_and_frees_nothing() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("hold-drift").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 2).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    let controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();
    create_pod(&ctx, "run", "one").await?;
    let run = wait_bound(&ctx, "run").await?;
    set_pod_phase(&pods, "run", PodPhase::Running).await?;
    let held: u32 = allocation(&run).expect("recorded").devices[0].index;

    // The GPU the pod holds turns unhealthy: the pod hears it, the
    // GPUResource says it, and the GPU stays the pod's.
    publish_gpunode_with(&ctx, &node, 2, &[held]).await?;
    let degraded = super::wait_resource(&ctx, "one", "Degraded", |r| {
        condition(r, "Degraded").is_some_and(|c| c.status == "True")
    })
    .await?;
    let message = &condition(&degraded, "Degraded").expect("condition").message;
    assert!(
        message.contains("run") && message.contains("XID 79"),
        "{message}"
    );
    let deadline = Instant::now() + ACT;
    loop {
        let events = super::events_for(&ctx, "run").await?;
        if events.iter().any(|(reason, note)| {
            reason == "GPUUnhealthy" && note.contains(&format!("index {held}"))
        }) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "no GPUUnhealthy Event: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(allocation(&pods.get("run").await?), allocation(&run));

    // The spec changes under the running pod: the status says so; the
    // pod keeps its GPU.
    ctx.api::<GPUResource>()
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "count": 2 } })),
        )
        .await?;
    let changed = super::wait_resource(&ctx, "one", "SpecChanged", |r| {
        condition(r, "SpecChanged").is_some_and(|c| c.status == "True")
    })
    .await?;
    let message = &condition(&changed, "SpecChanged")
        .expect("condition")
        .message;
    assert!(
        message.contains("run (1 exclusive GPU(s))")
            && message.contains("new pods get 2 exclusive"),
        "{message}"
    );
    // Healthy again, back to one GPU: both conditions go.
    publish_gpunode(&ctx, &node, 2).await?;
    ctx.api::<GPUResource>()
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "count": 1 } })),
        )
        .await?;
    super::wait_resource(&ctx, "one", "conditions cleared", |r| {
        condition(r, "Degraded").is_none() && condition(r, "SpecChanged").is_none()
    })
    .await?;
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}
