//! MIG instances on the API server: MIG requests get instances of their
//! profile (the devices handed over are `MIG-…` UUIDs), and a whole-GPU
//! request is kept off a GPU while any of its instances is held.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use wasmgpu::api::{GPUResource, GPUResourceSpec, GpuInfo, MigInstanceInfo, MigMode, Sharing};
use wasmgpu_test_harness::{FakeNode, PodPhase, TestContext, set_pod_phase};

use super::{devices, node_of, wait_bound};
use crate::support::*;

const A100: &str = "NVIDIA A100 80GB PCIe";

/// Node `name` with two A100s: GPU 0 in MIG mode, split into 3g.40gb,
/// 2g.20gb and two 1g.10gb instances; GPU 1 used whole.
async fn mig_node(ctx: &TestContext, name: &str) -> Result<(String, String, Vec<String>)> {
    FakeNode::new(name)
        .label(GROUP_LABEL, &ctx.namespace)
        .create(&ctx.client)
        .await?;
    let parent = format!("GPU-{name}-0");
    let whole = format!("GPU-{name}-1");
    let instance = |i: u32, profile: &str, mib: u64| MigInstanceInfo {
        uuid: format!("MIG-{name}-0-{i}"),
        profile: profile.into(),
        memory_total_mib: mib,
        gpu_instance_id: Some(i + 1),
        compute_instance_id: Some(0),
    };
    let instances = vec![
        instance(0, "3g.40gb", 40192),
        instance(1, "2g.20gb", 19968),
        instance(2, "1g.10gb", 9728),
        instance(3, "1g.10gb", 9728),
    ];
    let small: Vec<String> = instances[2..].iter().map(|m| m.uuid.clone()).collect();
    let gpus = vec![
        GpuInfo {
            uuid: parent.clone(),
            index: 0,
            model: A100.into(),
            memory_total_mib: 81920,
            pci_bus_id: "00000000:17:00.0".into(),
            mig_mode: Some(MigMode::Enabled),
            mig_instances: instances,
            healthy: true,
            ..Default::default()
        },
        GpuInfo {
            uuid: whole.clone(),
            index: 1,
            model: A100.into(),
            memory_total_mib: 81920,
            pci_bus_id: "00000000:65:00.0".into(),
            mig_mode: Some(MigMode::Disabled),
            healthy: true,
            ..Default::default()
        },
    ];
    publish_gpus(ctx, name, &gpus).await?;
    Ok((parent, whole, small))
}

async fn mig_resource(ctx: &TestContext, name: &str, profile: &str) -> Result<()> {
    let resource = GPUResource::new(
        name,
        GPUResourceSpec {
            mig_profile: Some(profile.into()),
            count: 1,
            model: None,
            memory_mib: 0,
            sharing: Sharing::Exclusive,
            policy: None,
        },
    );
    ctx.api::<GPUResource>()
        .create(&PostParams::default(), &resource)
        .await?;
    Ok(())
}

/// Asserts that `name` stays unbound for `quiet`.
async fn stays_pending(pods: &Api<Pod>, name: &str, quiet: Duration) -> Result<()> {
    let until = Instant::now() + quiet;
    while Instant::now() < until {
        let pod = pods.get(name).await?;
        ensure!(
            node_of(&pod).is_none(),
            "{name} was bound to {:?}",
            devices(&pod)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

#[tokio::test]
async fn mig_requests_get_instances_and_whole_gpu_requests_keep_off_their_parent() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("mig").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n0", ctx.namespace);
    let (parent, whole, small) = mig_node(&ctx, &node).await?;
    mig_resource(&ctx, "small", "1g.10gb").await?;
    gpuresource(&ctx, "gpu", 1, Sharing::Exclusive, 0, None).await?;
    let _controller = Controller::start(&ctx).await?;
    let pods = ctx.api::<Pod>();

    // Two 1g.10gb requests take the two 1g.10gb instances.
    create_pod(&ctx, "mig-0", "small").await?;
    create_pod(&ctx, "mig-1", "small").await?;
    let mut given: Vec<String> = Vec::new();
    for name in ["mig-0", "mig-1"] {
        let pod = wait_bound(&ctx, name).await?;
        given.extend(devices(&pod));
    }
    given.sort();
    ensure!(given == small, "MIG pods got {given:?}, expected {small:?}");

    // Whole-GPU requests: the first takes GPU 1; the second cannot have
    // GPU 0 while its instances are held, and waits.
    create_pod(&ctx, "whole-0", "gpu").await?;
    let first = wait_bound(&ctx, "whole-0").await?;
    ensure!(devices(&first) == [whole.clone()], "{:?}", devices(&first));
    create_pod(&ctx, "whole-1", "gpu").await?;
    stays_pending(&pods, "whole-1", Duration::from_secs(4)).await?;

    // Once the MIG pods finish, GPU 0 is free as a whole.
    for name in ["mig-0", "mig-1"] {
        set_pod_phase(&pods, name, PodPhase::Succeeded).await?;
    }
    let second = wait_bound(&ctx, "whole-1").await?;
    ensure!(
        devices(&second) == [parent.clone()],
        "{:?}",
        devices(&second)
    );

    // And now the parent is held whole, no instance of it is handed out.
    create_pod(&ctx, "mig-2", "small").await?;
    stays_pending(&pods, "mig-2", Duration::from_secs(4)).await?;
    println!(
        "MIG: {} got {:?}; whole GPUs: whole-0 {:?}, whole-1 {:?} after the instances were freed; mig-2 waits while the parent is held",
        node,
        given,
        devices(&first),
        devices(&second)
    );
    remove_nodes(&ctx, &[node]).await?;
    Ok(())
}
