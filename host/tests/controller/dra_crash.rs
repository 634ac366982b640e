//! SIGKILLs of the controller while it writes DRA claims, on the real API
//! server: kube-scheduler's order (the finalizer, one status update with
//! `allocation` and `reservedFor`, then the Binding) means a crash between
//! any two writes leaves a state the next controller finishes. Devices are
//! never in two claims, and no claim stays allocated for a pod that will
//! not run there. The test plays the kubelet (a deleted pod is gone at once)
//! and kube-controller-manager's resourceclaim controller releases the
//! claims of deleted pods.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use wasmgpu::api::CLAIM_DELETE_PROTECTION;
use wasmgpu_test_harness::TestContext;

use super::dra_claims::{
    allocated, claim, clean_up, dra_pod, h100_node, nvidia_class, upstream_agrees,
};
use super::node_of;
use crate::support::*;

/// Claims (and pods) asking one device each, for 8 devices.
const PODS: usize = 10;
/// Kills in each phase.
const KILLS: usize = 4;

/// Where a claim's writes stand.
#[derive(Default, Debug)]
struct Census {
    /// Claims with the finalizer and no allocation yet.
    finalized_only: usize,
    /// Claims allocated whose pod is not bound yet.
    allocated_unbound: usize,
    /// Pods bound.
    bound: usize,
    /// Writes seen: finalizers + allocations + bindings, for progress.
    writes: usize,
}

/// Reads the claims and pods of `ctx`, failing on any device in two
/// claims, a claim reserved for a pod other than its own, or a bound pod on
/// another node than its claim's.
async fn census(ctx: &TestContext) -> Result<Census> {
    let claims = ctx
        .api::<ResourceClaim>()
        .list(&ListParams::default())
        .await?
        .items;
    let pods: BTreeMap<String, Pod> = ctx
        .api::<Pod>()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
        .collect();
    let mut census = Census::default();
    let mut holder: BTreeMap<String, String> = BTreeMap::new();
    for claim in &claims {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let finalized = claim
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == CLAIM_DELETE_PROTECTION);
        let devices = allocated(claim);
        for device in &devices {
            if let Some(other) = holder.insert(device.clone(), name.clone()) {
                bail!("{device} is allocated to {other} and to {name}");
            }
        }
        let reserved: Vec<&str> = claim
            .status
            .iter()
            .flat_map(|s| s.reserved_for.iter().flatten())
            .map(|r| r.name.as_str())
            .collect();
        ensure!(
            reserved.iter().all(|r| *r == name),
            "claim {name} reserved for {reserved:?}"
        );
        census.writes += usize::from(finalized) + usize::from(!devices.is_empty());
        match (
            finalized,
            devices.first(),
            pods.get(&name).and_then(node_of),
        ) {
            (true, None, _) if pods.contains_key(&name) => census.finalized_only += 1,
            (_, Some(_), None) => census.allocated_unbound += 1,
            (_, Some(device), Some(node)) => {
                ensure!(
                    device.starts_with(&format!("{node}/")),
                    "pod {name} is bound to {node}, its claim holds {device}"
                );
            }
            _ => {}
        }
    }
    census.bound = pods.values().filter(|p| node_of(p).is_some()).count();
    census.writes += census.bound;
    Ok(census)
}

/// Starts the controller (one write at a time, so that a kill lands
/// between two), waits for its first write past `writes` and kills it
/// (SIGKILL) at once; the census at the kill, none when nothing was written
/// in 10 s (nothing left to write).
async fn kill_while_writing(ctx: &TestContext, writes: usize) -> Result<Option<Census>> {
    let controller = Controller::start_with(ctx, &["--write-concurrency=1".to_owned()]).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = census(ctx).await?;
        if now.writes > writes {
            controller.kill().await?;
            return Ok(Some(census(ctx).await?));
        }
        if Instant::now() > deadline {
            // Nothing left to write (or nothing written in time).
            controller.kill().await?;
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Kills the controller `KILLS` times while it writes, then lets one run
/// until `bound` pods are bound; what the kills interrupted.
async fn phase(ctx: &TestContext, bound: usize) -> Result<(Controller, Vec<Census>)> {
    let mut seen = Vec::new();
    for _ in 0..KILLS {
        let writes = census(ctx).await?.writes;
        match kill_while_writing(ctx, writes).await? {
            Some(at_kill) => seen.push(at_kill),
            None => break,
        }
    }
    let controller = Controller::start(ctx).await?;
    let deadline = Instant::now() + ACT;
    loop {
        let now = census(ctx).await?;
        if now.bound == bound && now.finalized_only == 0 && now.allocated_unbound == 0 {
            return Ok((controller, seen));
        }
        ensure!(
            Instant::now() < deadline,
            "after the kills: {now:?}, {bound} bound wanted\n{}",
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn sigkills_between_a_claims_writes_give_no_device_twice_and_strand_no_claim() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-dra-kill").await?;
    install_crds(&ctx).await?;
    nvidia_class(&ctx).await?;
    let (node, slice_name) = h100_node(&ctx, 8).await?;
    let claims = ctx.api::<ResourceClaim>();
    for i in 0..PODS {
        let name = format!("p-{i}");
        claim(&ctx, &name, 1, "true", "gpu.nvidia.com").await?;
        dra_pod(&ctx, &name, &name).await?;
    }
    // What a kill right after the first write leaves, made by hand: p-0's
    // claim has the finalizer and no allocation.
    claims
        .patch(
            "p-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [CLAIM_DELETE_PROTECTION]}})),
        )
        .await?;

    // 10 pods for 8 devices: 8 bound, whatever the kills interrupted.
    let (controller, first) = phase(&ctx, 8).await?;
    drop(controller);
    let mut seen = first;
    let census_now = census(&ctx).await?;
    ensure!(census_now.bound == 8, "{census_now:?}");

    // Two bound pods finish: their claims are released (resourceclaim
    // controller) and the two waiting pods get their devices, with kills
    // again while the controller writes.
    let pods = ctx.api::<Pod>().list(&ListParams::default()).await?.items;
    let done: Vec<String> = pods
        .iter()
        .filter(|p| node_of(p).is_some())
        .filter_map(|p| p.metadata.name.clone())
        .take(2)
        .collect();
    for name in &done {
        ctx.api::<Pod>()
            .delete(name, &DeleteParams::default().grace_period(0))
            .await?;
    }
    let (controller, second) = phase(&ctx, 8).await?;
    seen.extend(second);

    // Every pod bound holds its own claim's device on its node (checked by
    // `census`); the finished pods' claims hold nothing; upstream agrees.
    let mut devices = BTreeSet::new();
    for claim in claims.list(&ListParams::default()).await?.items {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let held = allocated(&claim);
        if done.contains(&name) {
            ensure!(
                held.is_empty(),
                "{name}'s pod is gone, its claim holds {held:?}"
            );
        } else {
            ensure!(held.len() == 1, "{name}: {held:?}");
            devices.extend(held);
        }
    }
    ensure!(devices.len() == 8, "8 devices held once each: {devices:?}");
    upstream_agrees(&ctx).await?;
    let interrupted = |f: fn(&Census) -> usize| seen.iter().filter(|c| f(c) > 0).count();
    println!(
        "DRA SIGKILLs: {} kills; at the kill, {} left a claim finalized and not allocated, {} a claim allocated and its pod not bound; node {node}",
        seen.len(),
        interrupted(|c| c.finalized_only),
        interrupted(|c| c.allocated_unbound),
    );
    clean_up(&ctx, controller, &slice_name, node).await
}
