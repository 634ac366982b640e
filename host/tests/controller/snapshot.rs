//! `wasmgpu policy snapshot`: the controller's next round for a policy,
//! exported from the live cluster and run offline.

use std::process::Command;

use anyhow::Result;
use serde_json::Value;
use wasmgpu::api::Sharing;
use wasmgpu_test_harness::TestContext;

use super::operate::free_port;
use super::support::*;
use super::{devices, wait_bound};

fn wasmgpu(ctx: &TestContext, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(args)
        .env("KUBECONFIG", ctx.cluster().kubeconfig_path())
        .output()
        .expect("run wasmgpu")
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Publishes the shipped binpack as policy ConfigMap `binpack` in the
/// test's namespace, with `extra` arguments; returns the component's path.
fn publish_binpack(ctx: &TestContext, extra: &[&str]) -> String {
    let binpack = crate::common::policy_dir().join("wasmgpu_binpack.wasm");
    let binpack = binpack.to_str().unwrap().to_string();
    let args = [
        &[
            "policy",
            "publish",
            &binpack,
            "--name",
            "binpack",
            "-n",
            &ctx.namespace,
        ][..],
        extra,
    ]
    .concat();
    let out = wasmgpu(ctx, &args);
    assert!(out.status.success(), "{}", text(&out));
    binpack
}

#[tokio::test]
async fn the_live_snapshot_holds_the_next_round_and_runs_offline() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("live-snapshot").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 4).await?;
    gpuresource(&ctx, "pair", 2, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "spread-one", 1, Sharing::Exclusive, 0, Some("spread")).await?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("config.json");
    std::fs::write(&config, r#"{"preferNvlink": true}"#)?;
    let binpack = publish_binpack(&ctx, &["--config", config.to_str().unwrap()]);
    let binpack = binpack.as_str();

    // One pod placed by the controller, which then stops: the next round
    // has two pods of binpack waiting and two GPUs held.
    let controller = Controller::start(&ctx).await?;
    create_pod(&ctx, "first", "pair").await?;
    let first = wait_bound(&ctx, "first").await?;
    controller.kill().await?;
    create_pod(&ctx, "second", "pair").await?;
    create_pod(&ctx, "third", "pair").await?;
    create_pod(&ctx, "elsewhere", "spread-one").await?;

    let file = dir.path().join("live.json");
    let file = file.to_str().unwrap();
    let out = wasmgpu(
        &ctx,
        &[
            "policy",
            "snapshot",
            "--policy",
            "binpack",
            "-n",
            &ctx.namespace,
            "-o",
            file,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("wrote"), "{}", text(&out));
    let json: Value = serde_json::from_str(&std::fs::read_to_string(file)?)?;
    assert!(
        json["contract"]
            .as_str()
            .is_some_and(|c| c.starts_with("wasmgpu:policy@")),
        "{json}"
    );
    let host = wasmgpu_contract::snapshot_file::read(&json.to_string())?.snapshot;
    let snapshot = &host.snapshot;
    let ours = |pod: &str| format!("{}/{pod}", ctx.namespace);
    let mut pending: Vec<&str> = snapshot
        .pending
        .iter()
        .filter(|r| snapshot.namespace(r.namespace) == ctx.namespace)
        .map(|r| r.pod.as_str())
        .collect();
    pending.sort();
    assert_eq!(
        pending,
        [ours("second"), ours("third")],
        "spread's pod is not binpack's"
    );
    assert_eq!(snapshot.config, r#"{"preferNvlink": true}"#);
    let exported = snapshot
        .nodes
        .iter()
        .find(|n| n.name == node)
        .expect("the test's node");
    assert_eq!(exported.gpus.len(), 4);
    let held = exported
        .gpus
        .iter()
        .filter(|g| g.allocated_mib == g.memory_mib)
        .count();
    assert_eq!(held, 2, "first's GPUs: {:?}", devices(&first));

    // The file runs offline, as the controller's round would.
    let out = wasmgpu(
        &ctx,
        &[
            "policy",
            "run",
            binpack,
            "--snapshot",
            file,
            "--output",
            "json",
            "--fail-on-refused",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let run: Value = serde_json::from_slice(&out.stdout)?;
    let kind_of = |pod: String| {
        run["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["pod"] == pod.as_str())
            .map(|d| d["kind"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(
        kind_of(ours("second")).as_deref(),
        Some("assign"),
        "{run:#}"
    );
    assert_eq!(kind_of(ours("third")).as_deref(), Some("wait"), "{run:#}");

    // A policy nobody waits for: an empty round, and a note saying so.
    let out = wasmgpu(
        &ctx,
        &[
            "policy",
            "snapshot",
            "--policy",
            "topology",
            "-n",
            &ctx.namespace,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("no pod waits for policy topology"),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("no policy ConfigMap"), "{}", text(&out));

    remove_nodes(&ctx, &[node]).await?;
    Ok(())
}

#[tokio::test]
async fn a_policy_asking_for_it_has_its_last_rounds_recorded_and_readable() -> Result<()> {
    let _turn = exclusive().await;
    let ctx = TestContext::new("recorded").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    let binpack = publish_binpack(&ctx, &[]);
    let binpack = binpack.as_str();
    // Keep the last two rounds of binpack.
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = ctx.api();
    let annotate = |value: &str| serde_json::json!({"metadata": {"annotations": {"wasmgpu.io/record-rounds": value}}});
    configmaps
        .patch(
            "binpack",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(annotate("2")),
        )
        .await?;
    let port = free_port()?;
    let url = format!("http://127.0.0.1:{port}");
    let _controller = Controller::start_with(
        &ctx,
        &["--http-address".into(), format!("127.0.0.1:{port}")],
    )
    .await?;
    // Three rounds, one pod each.
    for name in ["r1", "r2", "r3"] {
        create_pod(&ctx, name, "one").await?;
        wait_bound(&ctx, name).await?;
    }
    let listed = wasmgpu(
        &ctx,
        &[
            "policy",
            "snapshot",
            "--policy",
            "binpack",
            "--recorded",
            &url,
            "--list",
        ],
    );
    assert!(listed.status.success(), "{}", text(&listed));
    let rows: Vec<&str> = std::str::from_utf8(&listed.stdout)?
        .lines()
        .skip(1)
        .collect();
    assert_eq!(rows.len(), 2, "two rounds kept:\n{}", text(&listed));
    println!("recorded rounds:\n{}", text(&listed));

    // The latest is the round that placed r3, exactly as binpack got it.
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("recorded.json");
    let file = file.to_str().unwrap();
    let out = wasmgpu(
        &ctx,
        &[
            "policy",
            "snapshot",
            "--policy",
            "binpack",
            "--recorded",
            &url,
            "-o",
            file,
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let host = wasmgpu_contract::snapshot_file::read(&std::fs::read_to_string(file)?)?.snapshot;
    let pending: Vec<&str> = host
        .snapshot
        .pending
        .iter()
        .map(|r| r.pod.as_str())
        .collect();
    assert_eq!(pending, [format!("{}/r3", ctx.namespace)]);
    let run = wasmgpu(
        &ctx,
        &[
            "policy",
            "run",
            binpack,
            "--snapshot",
            file,
            "--fail-on-refused",
        ],
    );
    assert!(run.status.success(), "{}", text(&run));

    // A wrong value is refused with the fix; recording stops.
    configmaps
        .patch(
            "binpack",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(annotate("all")),
        )
        .await?;
    let until = std::time::Instant::now() + ACT;
    loop {
        let out = wasmgpu(
            &ctx,
            &[
                "policy",
                "snapshot",
                "--policy",
                "binpack",
                "--recorded",
                &url,
                "--list",
            ],
        );
        if !out.status.success() {
            assert!(
                text(&out).contains("records no rounds of policy binpack"),
                "{}",
                text(&out)
            );
            break;
        }
        anyhow::ensure!(std::time::Instant::now() < until, "still recording");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    Ok(())
}
