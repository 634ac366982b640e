//! The admission policy of `deploy/admission/`, on a real API server: only
//! the controller records what a pod holds.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::{Value, json};
use wasmgpu_test_harness::{TestContext, client_from};

const DEPLOYED_CONTROLLER: &str = "system:serviceaccount:wasmgpu-system:wasmgpu-controller";

/// The policy and its binding from `deploy/admission/allocation-guard.yaml`,
/// made to apply to the test's namespace only and to trust the test's
/// controller identity instead of the deployed one.
fn guard(
    ctx: &TestContext,
) -> Result<(ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding)> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/admission/allocation-guard.yaml");
    let text = std::fs::read_to_string(&path)?.replace(
        DEPLOYED_CONTROLLER,
        &format!("system:serviceaccount:{}:wasmgpu-controller", ctx.namespace),
    );
    let mut documents = Vec::new();
    for document in serde_norway::Deserializer::from_str(&text) {
        documents.push(Value::deserialize(document)?);
    }
    let name = format!("{}-guard", ctx.namespace);
    let mut policy: ValidatingAdmissionPolicy = serde_json::from_value(
        documents
            .iter()
            .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
            .context("no policy")?
            .clone(),
    )?;
    policy.metadata.name = Some(name.clone());
    let mut binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(
        documents
            .iter()
            .find(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
            .context("no binding")?
            .clone(),
    )?;
    binding.metadata.name = Some(name.clone());
    let spec = &mut binding.spec;
    spec.policy_name = name;
    spec.match_resources = Some(serde_json::from_value(json!({
        "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": ctx.namespace } }
    }))?);
    Ok((policy, binding))
}

fn pod(name: &str, annotations: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            scheduler_name: Some("wasmgpu".into()),
            containers: vec![Container {
                name: "main".into(),
                image: Some("cuda:latest".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

/// The API server's refusal message, or `None` when the write went through.
async fn refusal<T>(write: impl Future<Output = kube::Result<T>>) -> Result<Option<String>> {
    match write.await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(status)) if status.code == 422 || status.code == 403 => {
            Ok(Some(status.message))
        }
        Err(error) => Err(error.into()),
    }
}

fn annotate(key: &str, value: Option<&str>) -> Patch<Value> {
    Patch::Merge(json!({ "metadata": { "annotations": { key: value } } }))
}

#[tokio::test]
async fn only_the_controller_records_what_a_pod_holds() -> Result<()> {
    let ctx = TestContext::new("admission").await?;
    let (policy, binding) = guard(&ctx)?;
    Api::<ValidatingAdmissionPolicy>::all(ctx.client.clone())
        .create(&PostParams::default(), &policy)
        .await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(ctx.client.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    let pods: Api<Pod> = ctx.api();
    let forged = pod("forged", &[("wasmgpu.io/devices", "GPU-0")]);

    // The policy takes effect once the API server has loaded it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let message = loop {
        if let Some(message) = refusal(pods.create(&PostParams::default(), &forged)).await? {
            break message;
        }
        let _ = pods.delete("forged", &Default::default()).await;
        if Instant::now() > deadline {
            bail!("the admission policy never took effect");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        message.contains("wasmgpu.io/devices") && message.contains("written only by it"),
        "{message}"
    );

    // A plain pod is created; nobody but the controller may set, change or
    // remove its allocation, and everything else about it stays editable.
    pods.create(&PostParams::default(), &pod("plain", &[]))
        .await?;
    let params = PatchParams::default();
    let message = refusal(pods.patch(
        "plain",
        &params,
        &annotate("wasmgpu.io/allocation", Some("{}")),
    ))
    .await?
    .context("an allocation set by an admin")?;
    assert!(
        message.contains("cannot be set, changed or removed"),
        "{message}"
    );
    assert_eq!(
        refusal(pods.patch("plain", &params, &annotate("team", Some("ml")))).await?,
        None
    );

    // The controller's identity may (it moves an earlier version's ledger
    // entry onto the pod this way); then nobody else may remove it.
    let kubeconfig = common::rbac::identity(
        &ctx,
        "controller.yaml",
        "wasmgpu-controller",
        Path::new(env!("CARGO_TARGET_TMPDIR")),
    )
    .await?;
    let controller: Client = client_from(kube::config::Kubeconfig::read_from(&kubeconfig)?).await?;
    let as_controller: Api<Pod> = Api::namespaced(controller, &ctx.namespace);
    as_controller
        .patch(
            "plain",
            &params,
            &annotate("wasmgpu.io/devices", Some("GPU-1")),
        )
        .await?;
    let message = refusal(pods.patch("plain", &params, &annotate("wasmgpu.io/devices", None)))
        .await?
        .context("an allocation removed by an admin")?;
    assert!(message.contains("wasmgpu.io/devices"), "{message}");
    assert_eq!(
        refusal(pods.patch(
            "plain",
            &params,
            &annotate("wasmgpu.io/devices", Some("GPU-1"))
        ))
        .await?,
        None,
        "writing the same value changes nothing"
    );

    Api::<ValidatingAdmissionPolicyBinding>::all(ctx.client.clone())
        .delete(
            binding.metadata.name.as_deref().unwrap_or_default(),
            &Default::default(),
        )
        .await?;
    Api::<ValidatingAdmissionPolicy>::all(ctx.client.clone())
        .delete(
            policy.metadata.name.as_deref().unwrap_or_default(),
            &Default::default(),
        )
        .await?;
    Ok(())
}
