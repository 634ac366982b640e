//! The CRDs in `deploy/crds/` install on a real API server, which then
//! refuses objects that break the schema, with its own message.

use wasmgpu_test_support as common;

use anyhow::Result;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use wasmgpu::api::{GPUNode, GPUNodeSpec, GPUNodeStatus, GPUResource, GpuInfo, Sharing};
use wasmgpu_test_harness::TestContext;

/// Runs kubectl with the admin kubeconfig from the repository root.
async fn kubectl(ctx: &TestContext, args: &[&str]) -> Result<String> {
    ctx.cluster()
        .run_kubectl(
            std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")),
            args,
        )
        .await
}

/// Creates a GPUResource from raw JSON (so that values the Rust types cannot
/// hold, like a negative memory, reach the server); the server's message on
/// refusal.
async fn create(ctx: &TestContext, name: &str, spec: Value) -> Result<Result<(), String>> {
    let resource = ApiResource::erase::<GPUResource>(&());
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ctx.namespace, &resource);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "wasmgpu.io/v1alpha1",
        "kind": "GPUResource",
        "metadata": { "name": name },
        "spec": spec,
    }))?;
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(status)) => Ok(Err(status.message)),
        Err(e) => Err(e.into()),
    }
}

#[tokio::test]
async fn the_server_refuses_gpuresources_that_break_the_schema() -> Result<()> {
    let ctx = TestContext::new("crd-schema").await?;
    common::install_crds(&ctx).await?;

    let refused = [
        (
            "zero",
            json!({ "count": 0 }),
            "spec.count: Invalid value: 0: spec.count in body should be greater than or equal to 1",
        ),
        (
            "many",
            json!({ "count": 17 }),
            "spec.count in body should be less than or equal to 16",
        ),
        (
            "negative",
            json!({ "count": 1, "memoryMiB": -1 }),
            "spec.memoryMiB in body should be greater than or equal to 0",
        ),
        (
            "sometimes",
            json!({ "count": 1, "sharing": "Sometimes" }),
            "spec.sharing: Unsupported value: \"Sometimes\"",
        ),
        (
            "shared",
            json!({ "count": 1, "sharing": "Shared" }),
            "sharing: Shared needs memoryMiB > 0",
        ),
        (
            "empty-model",
            json!({ "count": 1, "model": "" }),
            "spec.model in body should be at least 1 chars long",
        ),
    ];
    for (name, spec, message) in refused {
        let outcome = create(&ctx, name, spec.clone()).await?;
        let Err(got) = outcome else {
            panic!("{name}: {spec} was accepted");
        };
        assert!(
            got.contains(message),
            "{name}: {spec}\n  want: {message}\n  got:  {got}"
        );
    }

    // A valid one is stored, with the schema's defaults.
    create(
        &ctx,
        "trainer",
        json!({ "count": 2, "model": "NVIDIA H100*" }),
    )
    .await?
    .map_err(anyhow::Error::msg)?;
    let stored = ctx.api::<GPUResource>().get("trainer").await?;
    assert_eq!(stored.spec.sharing, Sharing::Exclusive);
    assert_eq!(stored.spec.memory_mib, 0);
    let shown = kubectl(&ctx, &["get", "gpur", "-n", &ctx.namespace]).await?;
    let header: Vec<&str> = shown
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME", "PHASE", "PODS", "COUNT", "MODEL", "SHARING", "POLICY", "AGE"
        ]
    );
    Ok(())
}

#[tokio::test]
async fn gpunode_status_is_a_subresource_with_printer_columns() -> Result<()> {
    let ctx = TestContext::new("crd-gpunode").await?;
    common::install_crds(&ctx).await?;
    let api: Api<GPUNode> = ctx.cluster_api();
    let name = format!("{}-node", ctx.namespace);
    api.create(&PostParams::default(), &GPUNode::new(&name, GPUNodeSpec {}))
        .await?;
    let status = GPUNodeStatus {
        driver_version: Some("570.124.06".into()),
        gpus: vec![GpuInfo {
            uuid: "GPU-0".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
            memory_total_mib: 81559,
            healthy: true,
            ..Default::default()
        }],
        gpus_total: 1,
        gpus_healthy: 1,
        model: Some("NVIDIA H100 80GB HBM3".into()),
        ..Default::default()
    };
    let patch = json!({ "apiVersion": "wasmgpu.io/v1alpha1", "kind": "GPUNode", "status": status });
    api.patch_status(
        &name,
        &PatchParams::apply("wasmgpu-test").force(),
        &Patch::Apply(patch),
    )
    .await?;
    let stored = api.get(&name).await?;
    assert_eq!(stored.status.as_ref().map(|s| s.gpus.len()), Some(1));
    let shown = kubectl(&ctx, &["get", "gpun", &name]).await?;
    let lines: Vec<Vec<&str>> = shown
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["NAME", "GPUS", "HEALTHY", "MIG", "MODEL", "DRIVER", "AGE"]
    );
    assert_eq!(&lines[1][..4], [name.as_str(), "1", "1", "0"]);
    assert_eq!(stored.name_any(), name);
    Ok(())
}

#[tokio::test]
async fn the_samples_apply() -> Result<()> {
    let ctx = TestContext::new("crd-samples").await?;
    common::install_crds(&ctx).await?;
    kubectl(&ctx, &["apply", "-k", "deploy/samples"]).await?;
    let api: Api<GPUResource> = Api::namespaced(ctx.client.clone(), "wasmgpu-samples");
    let mut names: Vec<String> = api
        .list(&Default::default())
        .await?
        .iter()
        .map(|r| r.name_any())
        .collect();
    names.sort();
    assert_eq!(names, ["any-gpu", "notebook", "trainer"]);
    Ok(())
}
