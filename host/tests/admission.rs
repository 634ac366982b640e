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

/// The documents of a file under `deploy/admission/`, each renamed after
/// the test's namespace and its binding narrowed to that namespace.
fn scoped(ctx: &TestContext, file: &str) -> Result<Vec<Value>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/admission")
        .join(file);
    let text = std::fs::read_to_string(&path)?;
    let name = format!("{}-{}", ctx.namespace, file.trim_end_matches(".yaml"));
    let mut documents = Vec::new();
    for document in serde_norway::Deserializer::from_str(&text) {
        let mut document = Value::deserialize(document)?;
        document["metadata"]["name"] = json!(name);
        if document["kind"]
            .as_str()
            .is_some_and(|k| k.ends_with("Binding"))
        {
            document["spec"]["policyName"] = json!(name);
            let mut selector = document["spec"]["matchResources"]["namespaceSelector"].clone();
            if selector.is_null() {
                selector = json!({});
            }
            selector["matchLabels"] = json!({ "kubernetes.io/metadata.name": ctx.namespace });
            document["spec"]["matchResources"]["namespaceSelector"] = selector;
        }
        documents.push(document);
    }
    Ok(documents)
}

/// Creates the documents (cluster-scoped admission objects) as they are.
async fn create_all(
    ctx: &TestContext,
    documents: &[Value],
) -> Result<Vec<kube::api::DynamicObject>> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let mut created = Vec::new();
    for document in documents {
        let (group, version) = document["apiVersion"]
            .as_str()
            .context("apiVersion")?
            .split_once('/')
            .context("group/version")?;
        let kind = document["kind"].as_str().context("kind")?;
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
        let object: DynamicObject = serde_json::from_value(document.clone())?;
        created.push(api.create(&PostParams::default(), &object).await?);
    }
    Ok(created)
}

async fn delete_all(ctx: &TestContext, documents: &[Value]) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    for document in documents.iter().rev() {
        let Some((group, version)) = document["apiVersion"]
            .as_str()
            .and_then(|v| v.split_once('/'))
        else {
            continue;
        };
        let kind = document["kind"].as_str().unwrap_or_default();
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
        let name = document["metadata"]["name"].as_str().unwrap_or_default();
        let _ = api.delete(name, &Default::default()).await;
    }
}

fn with_env(mut pod: Pod, name: &str, value: &str) -> Pod {
    pod.spec.as_mut().unwrap().containers[0].env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }]);
    pod
}

#[tokio::test]
async fn no_pod_picks_gpus_past_the_device_plugin() -> Result<()> {
    let ctx = TestContext::new("device-guard").await?;
    let documents = scoped(&ctx, "device-guard.yaml")?;
    create_all(&ctx, &documents).await?;
    let pods: Api<Pod> = ctx.api();
    let all = with_env(pod("all", &[]), "NVIDIA_VISIBLE_DEVICES", "all");

    let deadline = Instant::now() + Duration::from_secs(30);
    let message = loop {
        if let Some(message) = refusal(pods.create(&PostParams::default(), &all)).await? {
            break message;
        }
        let _ = pods.delete("all", &Default::default()).await;
        ensure_before(deadline, "the device guard never took effect")?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        message.contains("container(s) main set NVIDIA_VISIBLE_DEVICES")
            && message.contains("wasmgpu device plugin"),
        "{message}"
    );
    let mig = with_env(pod("mig", &[]), "NVIDIA_MIG_CONFIG_DEVICES", "all");
    assert!(
        refusal(pods.create(&PostParams::default(), &mig))
            .await?
            .is_some()
    );
    let cdi = pod("cdi", &[("cdi.k8s.io/gpu", "nvidia.com/gpu=all")]);
    let message = refusal(pods.create(&PostParams::default(), &cdi))
        .await?
        .context("a CDI annotation")?;
    assert!(message.contains("cdi.k8s.io/gpu"), "{message}");
    // CUDA_VISIBLE_DEVICES is no boundary and is left alone; so are plain pods.
    let cuda = with_env(pod("cuda", &[]), "CUDA_VISIBLE_DEVICES", "0");
    assert_eq!(
        refusal(pods.create(&PostParams::default(), &cuda)).await?,
        None
    );
    delete_all(&ctx, &documents).await;
    Ok(())
}

#[tokio::test]
async fn a_pod_naming_a_gpuresource_gets_scheduler_and_limits_filled_in() -> Result<()> {
    use wasmgpu::api::{GPUResource, GPUResourceSpec, Sharing};
    let ctx = TestContext::new("gpu-pods").await?;
    common::install_crds(&ctx).await?;
    let resources: Api<GPUResource> = ctx.api();
    for (name, count) in [("pair", 2), ("single", 1)] {
        let spec = GPUResourceSpec {
            count,
            model: None,
            memory_mib: 0,
            sharing: Sharing::Exclusive,
            policy: None,
        };
        resources
            .create(&PostParams::default(), &GPUResource::new(name, spec))
            .await?;
    }
    let documents = scoped(&ctx, "gpu-pods.yaml")?;
    create_all(&ctx, &documents).await?;
    let pods: Api<Pod> = ctx.api();
    let mut asking = pod("trainer", &[("wasmgpu.io/gpuresource", "pair")]);
    asking.spec.as_mut().unwrap().scheduler_name = None;

    let deadline = Instant::now() + Duration::from_secs(30);
    let created = loop {
        let created = pods.create(&PostParams::default(), &asking).await?;
        if created.spec.as_ref().unwrap().scheduler_name.as_deref() == Some("wasmgpu") {
            break created;
        }
        pods.delete("trainer", &Default::default()).await?;
        ensure_before(deadline, "the mutating policy never took effect")?;
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let limits = created.spec.unwrap().containers[0]
        .resources
        .clone()
        .and_then(|r| r.limits)
        .unwrap_or_default();
    assert_eq!(
        limits.get("wasmgpu.io/gpu").map(|q| q.0.as_str()),
        Some("2"),
        "{limits:?}"
    );
    assert_eq!(limits.len(), 1, "only the GPU limit is added: {limits:?}");
    // A pod naming no GPUResource is left as it is.
    let mut plain = pod("plain", &[]);
    plain.spec.as_mut().unwrap().scheduler_name = None;
    let plain = pods.create(&PostParams::default(), &plain).await?;
    assert_eq!(
        plain.spec.as_ref().unwrap().scheduler_name.as_deref(),
        Some("default-scheduler")
    );
    delete_all(&ctx, &documents).await;
    Ok(())
}

fn ensure_before(deadline: Instant, what: &str) -> Result<()> {
    if Instant::now() > deadline {
        bail!("{what}");
    }
    Ok(())
}
