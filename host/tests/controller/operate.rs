//! Operating the controller: two replicas with leader election (the leader
//! killed, the standby takes over), and the metrics and health endpoints.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasmgpu::api::Sharing;
use wasmgpu_test_harness::{TestContext, wait_for};

use crate::support::*;

fn lease_flags(ctx: &TestContext, identity: &str) -> Vec<String> {
    [
        "--leader-elect",
        "--lease-namespace",
        &ctx.namespace,
        "--lease-duration",
        "3s",
        "--identity",
        identity,
    ]
    .map(String::from)
    .to_vec()
}

async fn holder(ctx: &TestContext) -> Result<Option<String>> {
    Ok(ctx
        .api::<Lease>()
        .get_opt("wasmgpu-controller")
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity))
}

async fn wait_holder(ctx: &TestContext, identity: &str) -> Result<()> {
    let deadline = Instant::now() + ACT;
    while holder(ctx).await?.as_deref() != Some(identity) {
        if Instant::now() > deadline {
            bail!(
                "{identity} does not hold the Lease: {:?}",
                holder(ctx).await?
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

async fn bound_devices(ctx: &TestContext, names: &[String]) -> Result<Vec<String>> {
    let mut devices = Vec::new();
    for name in names {
        let pod = wait_for(&ctx.api::<Pod>(), name, ACT, "bound", |p| {
            p.and_then(|p| p.spec.as_ref())
                .and_then(|s| s.node_name.as_ref())
                .is_some()
        })
        .await?
        .expect("exists");
        devices.push(
            pod.annotations()
                .get("wasmgpu.io/devices")
                .cloned()
                .with_context(|| format!("{name} has no devices annotation"))?,
        );
    }
    Ok(devices)
}

#[tokio::test]
async fn a_standby_takes_over_when_the_leader_dies_and_nothing_is_bound_twice() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-failover").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;

    let leader = Controller::start_with(&ctx, &lease_flags(&ctx, "ctl-a")).await?;
    wait_holder(&ctx, "ctl-a").await?;
    let mut standby = Controller::start_with(&ctx, &lease_flags(&ctx, "ctl-b")).await?;

    let first: Vec<String> = (0..4).map(|i| format!("before-{i}")).collect();
    for name in &first {
        create_pod(&ctx, name, "one").await?;
    }
    let mut devices = bound_devices(&ctx, &first).await?;
    // The standby has its index warm and waits for the lead.
    let deadline = Instant::now() + ACT;
    while !standby.log_tail().contains("Not the leader") {
        standby.check_alive()?;
        if Instant::now() > deadline {
            bail!(
                "the standby does not wait for the lead:\n{}",
                standby.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let killed_at = Instant::now();
    leader.kill().await?;
    let second: Vec<String> = (0..4).map(|i| format!("after-{i}")).collect();
    for name in &second {
        create_pod(&ctx, name, "one").await?;
    }
    devices.extend(bound_devices(&ctx, &second).await?);
    eprintln!(
        "the standby bound the next pods {:?} after the leader died",
        killed_at.elapsed()
    );
    standby.check_alive()?;
    assert_eq!(holder(&ctx).await?.as_deref(), Some("ctl-b"));

    // Eight pods, eight GPUs: each pod its own, in its devices annotation
    // and its recorded allocation alike.
    let distinct: HashSet<&String> = devices.iter().collect();
    assert_eq!(distinct.len(), 8, "{devices:?}");
    let pods = ctx.api::<k8s_openapi::api::core::v1::Pod>();
    let mut recorded = HashSet::new();
    for pod in pods.list(&Default::default()).await?.items {
        let held = allocation(&pod).expect("every bound pod carries its allocation");
        assert_eq!(held.devices.len(), 1);
        recorded.insert(held.devices[0].uuid.clone());
    }
    assert_eq!(recorded.len(), 8);
    drop(standby);
    remove_nodes(&ctx, &[node]).await
}

#[tokio::test]
async fn sigterm_releases_the_lease_at_once_and_the_standby_binds_the_next_pod() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-sigterm").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    // A lease long enough that waiting for it to expire would show.
    let flags = |identity: &str| {
        let mut flags = lease_flags(&ctx, identity);
        let duration = flags.iter().position(|f| f == "--lease-duration").unwrap() + 1;
        flags[duration] = "15s".into();
        flags
    };

    let mut leader = Controller::start_with(&ctx, &flags("ctl-a")).await?;
    wait_holder(&ctx, "ctl-a").await?;
    let mut standby = Controller::start_with(&ctx, &flags("ctl-b")).await?;
    create_pod(&ctx, "before", "one").await?;
    bound_devices(&ctx, &["before".to_string()]).await?;
    let deadline = Instant::now() + ACT;
    while !standby.log_tail().contains("Not the leader") {
        standby.check_alive()?;
        if Instant::now() > deadline {
            bail!(
                "the standby does not wait for the lead:\n{}",
                standby.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let pid = leader.pid().context("the leader has exited")?;
    let terminated_at = Instant::now();
    let status = tokio::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await?;
    assert!(status.success());
    // The leader exits, and the Lease no longer names it, within 2 s.
    let exited = loop {
        if leader.check_alive().is_err() {
            break terminated_at.elapsed();
        }
        if terminated_at.elapsed() > Duration::from_secs(10) {
            bail!(
                "the leader still runs 10 s after SIGTERM:\n{}",
                leader.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let log = leader.log_tail();
    assert!(log.contains("Released the lease"), "{log}");
    assert_ne!(holder(&ctx).await?.as_deref(), Some("ctl-a"));
    create_pod(&ctx, "after", "one").await?;
    bound_devices(&ctx, &["after".to_string()]).await?;
    let bound = terminated_at.elapsed();
    eprintln!(
        "SIGTERM: the leader exited after {exited:.2?}; the standby bound the next pod {bound:.2?} after the signal (lease 15 s)"
    );
    assert!(
        exited < Duration::from_secs(2),
        "exit took {exited:?}:\n{log}"
    );
    assert!(
        bound < Duration::from_secs(3),
        "the standby bound the next pod {bound:?} after SIGTERM:\n{}",
        standby.log_tail()
    );
    standby.check_alive()?;
    assert_eq!(holder(&ctx).await?.as_deref(), Some("ctl-b"));
    drop(standby);
    remove_nodes(&ctx, &[node]).await
}

/// A plain HTTP/1.0 GET: status code and body.
pub(super) async fn get(port: u16, path: &str) -> Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response.split_once("\r\n\r\n").context("no header end")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no status")?;
    Ok((status, body.to_string()))
}

pub(super) fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[tokio::test]
async fn metrics_and_health_endpoints_report_what_happened() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-metrics").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 4).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    let port = free_port()?;
    let controller = Controller::start_with(
        &ctx,
        &["--http-address".into(), format!("127.0.0.1:{port}")],
    )
    .await?;
    for name in ["m-0", "m-1"] {
        create_pod(&ctx, name, "one").await?;
    }
    bound_devices(&ctx, &["m-0".into(), "m-1".into()]).await?;

    let allocated =
        format!("wasmgpu_gpus{{node=\"{node}\",model=\"{H100}\",state=\"allocated\"}} 2");
    let free = format!("wasmgpu_gpus{{node=\"{node}\",model=\"{H100}\",state=\"free\"}} 2");
    // The gauges follow the index (a binding in flight already holds its
    // GPU); the counter follows the binding's answer, which the controller
    // may read a moment after the pod shows bound: wait for both.
    let bound = "wasmgpu_pods_bound_total 2";
    let deadline = Instant::now() + ACT;
    let metrics = loop {
        let (status, body) = get(port, "/metrics").await?;
        assert_eq!(status, 200);
        if body.contains(&allocated) && body.contains(bound) {
            break body;
        }
        if Instant::now() > deadline {
            bail!(
                "no {allocated} and {bound} in:\n{body}\n{}",
                controller.log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for expected in [
        free.as_str(),
        "wasmgpu_decisions_total{policy=\"binpack\",outcome=\"accepted\"} 2",
        "wasmgpu_policy_call_seconds_count{policy=\"binpack\"}",
        "wasmgpu_leader 1",
    ] {
        assert!(
            metrics.contains(expected),
            "{expected} missing from:\n{metrics}"
        );
    }
    assert!(metrics.contains("wasmgpu_rounds_total "), "{metrics}");
    assert_eq!(get(port, "/healthz").await?.0, 200);
    assert_eq!(get(port, "/readyz").await?.0, 200);
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}
