//! `deploy/` is accepted by a real API server, as `kubectl apply -k deploy/`
//! would send it.

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
    ] {
        assert!(
            output.contains(&format!("{object} serverside-applied (server dry run)")),
            "{object} not accepted:\n{output}"
        );
    }
    Ok(())
}
