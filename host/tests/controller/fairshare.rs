//! The fairshare policy on a real API server: 8 GPUNodes of 8 GPUs, three
//! namespaces of weights 1:2:1 each keeping about 100 one-GPU pods pending,
//! and a few cycles of pods finishing (phase Succeeded) and being replaced.
//! At every quiet point (all 64 GPUs held again) the namespaces hold
//! 16/32/16 GPUs, ± 1.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use wasmgpu::api::Sharing;
use wasmgpu_test_harness::{PodPhase, TestContext, set_pod_phase};

use super::common::policy_bytes;
use super::configmaps::{put_policy, wait_observed};
use super::{bound, node_of};
use crate::support::*;

const NODES: u32 = 8;
const GPUS: u32 = 8;
const PENDING: usize = 100;
const CYCLES: usize = 6;
const WEIGHTS: [u32; 3] = [1, 2, 1];
const FAIR: [usize; 3] = [16, 32, 16];

/// Pods of one namespace: those holding GPUs, and how many wait.
struct Tenant {
    ctx: TestContext,
    created: usize,
}

impl Tenant {
    /// (running pods, pending count).
    async fn pods(&self) -> Result<(Vec<String>, usize)> {
        let pods = self
            .ctx
            .api::<Pod>()
            .list(&ListParams::default())
            .await?
            .items;
        let finished = |p: &Pod| {
            p.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
        };
        let running = pods
            .iter()
            .filter(|p| bound(Some(p)) && !finished(p))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        let pending = pods.iter().filter(|p| node_of(p).is_none()).count();
        Ok((running, pending))
    }

    /// Creates pods until `PENDING` wait; their node selector is the test
    /// group's (`group`).
    async fn top_up(&mut self, group: &TestContext) -> Result<()> {
        let (_, pending) = self.pods().await?;
        let names: Vec<String> = (self.created..self.created + PENDING.saturating_sub(pending))
            .map(|i| format!("job-{i:04}"))
            .collect();
        self.created += names.len();
        let api = self.ctx.api::<Pod>();
        futures::stream::iter(names)
            .map(|name| {
                let (api, pod) = (api.clone(), pod(group, &name, "gpu"));
                async move { api.create(&PostParams::default(), &pod).await }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await?;
        Ok(())
    }
}

/// Waits until the three namespaces hold all the GPUs; returns what each holds.
async fn quiet_point(tenants: &[Tenant], controller: &mut Controller) -> Result<[usize; 3]> {
    let deadline = Instant::now() + ACT;
    loop {
        let mut held = [0; 3];
        for (t, tenant) in tenants.iter().enumerate() {
            held[t] = tenant.pods().await?.0.len();
        }
        if held.iter().sum::<usize>() == (NODES * GPUS) as usize {
            return Ok(held);
        }
        controller.check_alive()?;
        ensure!(
            Instant::now() < deadline,
            "the GPUs are not all held again: {held:?}\n{}",
            controller.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn fairshare_holds_weighted_shares_through_finish_and_replace_cycles() -> Result<()> {
    let _turn = exclusive().await;
    let started = Instant::now();
    let group = TestContext::new("ctl-fairshare").await?;
    install_crds(&group).await?;
    let mut tenants = Vec::new();
    for name in ["ctl-fair-a", "ctl-fair-b", "ctl-fair-c"] {
        let ctx = TestContext::new(name).await?;
        gpuresource(&ctx, "gpu", 1, Sharing::Exclusive, 0, Some("fairshare")).await?;
        tenants.push(Tenant { ctx, created: 0 });
    }
    let nodes: Vec<String> = (0..NODES)
        .map(|n| format!("{}-n{n}", group.namespace))
        .collect();
    for node in &nodes {
        gpu_node(&group, node, GPUS).await?;
    }
    let config = serde_json::json!({
        "tenants": tenants.iter().zip(WEIGHTS).map(|(t, weight)| serde_json::json!({
            "name": t.ctx.namespace, "weight": weight,
        })).collect::<Vec<_>>(),
    })
    .to_string();
    let observed = put_policy(
        &group,
        "fairshare",
        "policy.wasm",
        policy_bytes("fairshare"),
        None,
        Some(&config),
    )
    .await?;
    // Every tenant's pods exist before the first round, so no tenant gets
    // the empty cluster to itself (nothing is ever taken back).
    for tenant in &mut tenants {
        tenant.top_up(&group).await?;
    }
    let mut controller = Controller::start(&group).await?;
    let status = wait_observed(&group, "fairshare", &observed).await?;
    ensure!(
        status.last_error.is_none() && status.active_digest.is_some(),
        "fairshare did not load: {status:?}"
    );

    let mut rng = [
        0x9e37_79b9_7f4a_7c15_u64,
        0xd1b5_4a32_d192_ed03,
        0x2545_f491_4f6c_dd1d,
    ];
    println!("cycle  finished (a/b/c)  holds: a b c");
    for cycle in 0..=CYCLES {
        let mut finished = [0; 3];
        if cycle > 0 {
            // Some running pods of each namespace finish, a different
            // pseudo-random subset each, then the pending pods are topped up.
            for (t, tenant) in tenants.iter().enumerate() {
                let (running, _) = tenant.pods().await?;
                let done: Vec<String> = running
                    .into_iter()
                    .filter(|_| {
                        let r = &mut rng[t];
                        *r ^= *r << 13;
                        *r ^= *r >> 7;
                        *r ^= *r << 17;
                        *r % 100 < 25
                    })
                    .collect();
                finished[t] = done.len();
                let api = tenant.ctx.api::<Pod>();
                futures::stream::iter(done)
                    .map(|name| {
                        let api = api.clone();
                        async move {
                            set_pod_phase(&api, &name, PodPhase::Running).await?;
                            set_pod_phase(&api, &name, PodPhase::Succeeded).await
                        }
                    })
                    .buffer_unordered(8)
                    .try_collect::<Vec<_>>()
                    .await?;
            }
            for tenant in &mut tenants {
                tenant.top_up(&group).await?;
            }
        }
        let held = quiet_point(&tenants, &mut controller).await?;
        println!(
            "{cycle:5}  {:>17}  {held:?}",
            format!("{}/{}/{}", finished[0], finished[1], finished[2])
        );
        ensure!(
            held.iter().zip(FAIR).all(|(&h, f)| h.abs_diff(f) <= 1),
            "cycle {cycle}: the namespaces hold {held:?}, not {FAIR:?} ± 1\n{}",
            controller.log_tail()
        );
    }
    // Every binding was decided by fairshare.
    for tenant in &tenants {
        for pod in tenant
            .ctx
            .api::<Pod>()
            .list(&ListParams::default())
            .await?
            .items
        {
            if bound(Some(&pod)) {
                let entry = allocation(&pod).expect("an allocation");
                ensure!(entry.policy.name == "fairshare", "{:?}", entry.policy);
            }
        }
    }
    println!("took {:?}", started.elapsed());

    drop(controller);
    for tenant in &tenants {
        tenant
            .ctx
            .api::<Pod>()
            .delete_collection(
                &DeleteParams::default().grace_period(0),
                &ListParams::default(),
            )
            .await?;
    }
    remove_nodes(&group, &nodes).await
}
