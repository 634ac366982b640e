//! `deploy/` is accepted by a real API server, as `kubectl apply -k deploy/`
//! would send it; the policy components it ships decide as their sources do.

mod common;

use std::path::Path;

use anyhow::Result;
use wasmgpu_test_harness::TestContext;

#[tokio::test]
async fn the_api_server_accepts_the_whole_install() -> Result<()> {
    let ctx = TestContext::new("deploy").await?;
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let cluster = ctx.cluster();
    // A server-side dry run cannot create the namespace the other objects
    // go into: create it for real first, as the first apply would.
    cluster
        .run_kubectl(
            root,
            &["apply", "--server-side", "-f", "deploy/namespace.yaml"],
        )
        .await?;
    let output = cluster
        .run_kubectl(
            root,
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "-k",
                "deploy/",
            ],
        )
        .await?;
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/gpuresources.wasmgpu.io",
        "customresourcedefinition.apiextensions.k8s.io/gpunodes.wasmgpu.io",
        "serviceaccount/wasmgpu-controller",
        "serviceaccount/wasmgpu-agent",
        "clusterrole.rbac.authorization.k8s.io/wasmgpu-controller",
        "clusterrole.rbac.authorization.k8s.io/wasmgpu-agent",
        "role.rbac.authorization.k8s.io/wasmgpu-controller",
        "deployment.apps/wasmgpu-controller",
        "daemonset.apps/wasmgpu-agent",
        "service/wasmgpu-controller-metrics",
        "configmap/binpack",
        "configmap/spread",
    ] {
        assert!(
            output.contains(&format!("{object} serverside-applied (server dry run)")),
            "{object} not accepted:\n{output}"
        );
    }
    Ok(())
}

#[test]
fn the_shipped_policy_components_decide_as_their_sources_do() {
    let engine = wasmgpu::engine::Engine::new(Default::default()).expect("engine");
    let snapshot = wasmgpu_policy_sdk::testing::large(60, 120);
    let host_snapshot: wasmgpu::engine::types::Snapshot = common::convert(&snapshot);
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/policies"));
    for (file, native) in [
        (
            "binpack.wasm",
            wasmgpu_binpack::allocate
                as fn(&wasmgpu_policy_sdk::Snapshot) -> Vec<wasmgpu_policy_sdk::Decision>,
        ),
        ("spread.wasm", wasmgpu_spread::allocate),
    ] {
        let bytes = std::fs::read(root.join(file)).expect("deploy/policies component");
        let shipped = engine
            .load(&bytes)
            .expect("a policy component")
            .allocate(&host_snapshot)
            .expect("decides")
            .decisions;
        let source: Vec<wasmgpu::engine::types::Decision> = common::convert(&native(&snapshot));
        assert_eq!(
            shipped, source,
            "deploy/policies/{file} is stale: run `make deploy-policies`"
        );
    }
}
