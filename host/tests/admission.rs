//! The admission policies of `deploy/admission/`, on a real API server: only
//! the controller records what a pod holds, on the pod or on a Binding; no
//! GPU pod arrives bound to a node; no pod picks GPUs past the device plugin;
//! pods naming a GPUResource get their scheduler and limit filled in.

use wasmgpu_test_support as common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{
    Binding, Container, ObjectReference, Pod, PodSpec, ResourceRequirements,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
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

/// Creates `pod` until the API server refuses it (an admission policy takes
/// effect once the server has loaded it); the refusal's message.
async fn until_refused(pods: &Api<Pod>, pod: &Pod, policy: &str) -> Result<String> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(message) = refusal(pods.create(&PostParams::default(), pod)).await? {
            return Ok(message);
        }
        // At once: a pod with spec.nodeName would wait for its kubelet.
        let _ = pods
            .delete(name, &DeleteParams::default().grace_period(0))
            .await;
        ensure_before(deadline, &format!("{policy} never took effect"))?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates the allocation guard of [`guard`] on the API server.
async fn install_guard(
    ctx: &TestContext,
) -> Result<(ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding)> {
    let (policy, binding) = guard(ctx)?;
    Api::<ValidatingAdmissionPolicy>::all(ctx.client.clone())
        .create(&PostParams::default(), &policy)
        .await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(ctx.client.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    Ok((policy, binding))
}

fn annotate(key: &str, value: Option<&str>) -> Patch<Value> {
    Patch::Merge(json!({ "metadata": { "annotations": { key: value } } }))
}

#[tokio::test]
async fn only_the_controller_records_what_a_pod_holds() -> Result<()> {
    let ctx = TestContext::new("admission").await?;
    let (policy, binding) = install_guard(&ctx).await?;
    let pods: Api<Pod> = ctx.api();
    let forged = pod("forged", &[("wasmgpu.io/devices", "GPU-0")]);

    let message = until_refused(&pods, &forged, "the allocation guard").await?;
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
    // Nor may anyone nominate GPUs for a pod (a preemption's nomination).
    let message = refusal(pods.patch(
        "plain",
        &params,
        &annotate("wasmgpu.io/nomination", Some("{}")),
    ))
    .await?
    .context("a nomination set by an admin")?;
    assert!(
        message.contains("wasmgpu.io/nomination")
            && message.contains("cannot be set, changed or removed"),
        "{message}"
    );
    assert_eq!(
        refusal(pods.patch("plain", &params, &annotate("team", Some("ml")))).await?,
        None
    );
    // pods/status keeps the pod's spec but not its annotations: it is held to
    // the same rule.
    let message =
        refusal(pods.patch_status("plain", &params, &annotate("wasmgpu.io/node", Some("n1"))))
            .await?
            .context("an allocation set through pods/status")?;
    assert!(
        message.contains("wasmgpu.io/node")
            && message.contains("cannot be set, changed or removed"),
        "{message}"
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
/// the test's namespace, its binding narrowed to that namespace, trusting the
/// test's controller identity instead of the deployed one.
fn scoped(ctx: &TestContext, file: &str) -> Result<Vec<Value>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/admission")
        .join(file);
    let text = std::fs::read_to_string(&path)?.replace(
        DEPLOYED_CONTROLLER,
        &format!("system:serviceaccount:{}:wasmgpu-controller", ctx.namespace),
    );
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

    let message = until_refused(&pods, &all, "the device guard").await?;
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
            mig_profile: None,
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

// === Bindings ===

/// A ServiceAccount of the test's namespace holding `rules` there (a Role
/// and RoleBinding named after it), and a client acting as it.
async fn account_with(ctx: &TestContext, name: &str, rules: Vec<PolicyRule>) -> Result<Client> {
    let identity = ctx.service_account(name).await?;
    let meta = ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ctx.namespace.clone()),
        ..Default::default()
    };
    let role = Role {
        metadata: meta.clone(),
        rules: Some(rules),
    };
    ctx.api::<Role>()
        .create(&PostParams::default(), &role)
        .await?;
    let binding = RoleBinding {
        metadata: meta,
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: name.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: name.into(),
            namespace: Some(ctx.namespace.clone()),
            ..Default::default()
        }]),
    };
    ctx.api::<RoleBinding>()
        .create(&PostParams::default(), &binding)
        .await?;
    identity.client().await
}

fn rule(resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    }
}

/// Binds the pod `name` to `node`, the Binding carrying `annotations`.
async fn bind(
    pods: &Api<Pod>,
    name: &str,
    node: &str,
    annotations: &[(&str, &str)],
) -> kube::Result<Value> {
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
    };
    pods.create_subresource("binding", name, &PostParams::default(), &binding)
        .await
}

#[tokio::test]
async fn only_the_controller_binds_with_an_allocation() -> Result<()> {
    let ctx = TestContext::new("admission-binding").await?;
    let (policy, binding) = install_guard(&ctx).await?;
    let pods: Api<Pod> = ctx.api();
    let forged = pod("forged", &[("wasmgpu.io/node", "n1")]);
    until_refused(&pods, &forged, "the allocation guard").await?;

    // Another scheduler: it may bind pods, as every scheduler may.
    let scheduler = account_with(
        &ctx,
        "other-scheduler",
        vec![
            rule(&["pods/binding"], &["create"]),
            rule(&["pods"], &["get"]),
        ],
    )
    .await?;
    let as_scheduler: Api<Pod> = Api::namespaced(scheduler, &ctx.namespace);
    for name in ["idle", "other", "placed"] {
        pods.create(&PostParams::default(), &pod(name, &[])).await?;
    }

    // Its Binding may not carry an allocation: the API server would copy it
    // onto the pod.
    let allocation = [("wasmgpu.io/devices", "GPU-0"), ("wasmgpu.io/node", "n1")];
    let message = refusal(bind(&as_scheduler, "idle", "n1", &allocation))
        .await?
        .context("a Binding with a forged allocation")?;
    assert!(
        message.contains("wasmgpu.io/devices, wasmgpu.io/node on a Binding")
            && message.contains("only the wasmgpu controller gives")
            && message.contains("remove them from the Binding"),
        "{message}"
    );
    let idle = pods.get("idle").await?;
    assert_eq!(idle.spec.as_ref().unwrap().node_name, None, "not bound");
    assert!(
        !idle
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("wasmgpu.io/devices")
    );

    // A Binding without them is its business.
    bind(&as_scheduler, "other", "n1", &[("team", "ml")]).await?;
    let other = pods.get("other").await?;
    assert_eq!(
        other.spec.as_ref().unwrap().node_name.as_deref(),
        Some("n1")
    );

    // The controller's Binding records the allocation on the pod.
    let kubeconfig = common::rbac::identity(
        &ctx,
        "controller.yaml",
        "wasmgpu-controller",
        Path::new(env!("CARGO_TARGET_TMPDIR")),
    )
    .await?;
    let controller: Client = client_from(kube::config::Kubeconfig::read_from(&kubeconfig)?).await?;
    let as_controller: Api<Pod> = Api::namespaced(controller, &ctx.namespace);
    bind(&as_controller, "placed", "n1", &allocation).await?;
    let placed = pods.get("placed").await?;
    assert_eq!(
        placed.spec.as_ref().unwrap().node_name.as_deref(),
        Some("n1")
    );
    let annotations = placed.metadata.annotations.unwrap_or_default();
    for (key, value) in allocation {
        assert_eq!(
            annotations.get(key).map(String::as_str),
            Some(value),
            "{annotations:?}"
        );
    }

    delete_all(
        &ctx,
        &[
            serde_json::to_value(&policy)?,
            serde_json::to_value(&binding)?,
        ],
    )
    .await;
    Ok(())
}

// === Pods arriving bound ===

fn on_node(mut pod: Pod, node: &str) -> Pod {
    pod.spec.as_mut().unwrap().node_name = Some(node.into());
    pod
}

/// `pod` with `wasmgpu.io/gpu: 1` in its first container's limits, or in
/// the requests of an init container `setup`.
fn asking_gpu(mut pod: Pod, init: bool) -> Pod {
    let gpu = BTreeMap::from([("wasmgpu.io/gpu".to_string(), Quantity("1".into()))]);
    let spec = pod.spec.as_mut().unwrap();
    if init {
        spec.init_containers = Some(vec![Container {
            name: "setup".into(),
            image: Some("cuda:latest".into()),
            resources: Some(ResourceRequirements {
                requests: Some(gpu.clone()),
                limits: Some(gpu),
                ..Default::default()
            }),
            ..Default::default()
        }]);
    } else {
        spec.containers[0].resources = Some(ResourceRequirements {
            limits: Some(gpu),
            ..Default::default()
        });
    }
    pod
}

#[tokio::test]
async fn no_gpu_pod_arrives_bound_to_a_node() -> Result<()> {
    let ctx = TestContext::new("placement-guard").await?;
    let documents = scoped(&ctx, "placement-guard.yaml")?;
    create_all(&ctx, &documents).await?;
    let pods: Api<Pod> = ctx.api();

    // Named a GPUResource, created by an admin.
    let named = on_node(
        pod("named", &[("wasmgpu.io/gpuresource", "pair")]),
        "gpu-node-0",
    );
    let message = until_refused(&pods, &named, "the placement guard").await?;
    assert!(
        message.contains("spec.nodeName: gpu-node-0 is set on a pod that asks wasmgpu for GPUs")
            && message.contains("annotation wasmgpu.io/gpuresource: pair")
            && message.contains("given by the wasmgpu controller when it binds the pod")
            && message.contains("refused its GPUs by the device plugin")
            && message.contains("remove spec.nodeName")
            && message.contains("kubernetes.io/hostname"),
        "{message}"
    );
    // A wasmgpu.io/gpu limit, or an init container's request, asks too.
    let limited = on_node(asking_gpu(pod("limited", &[]), false), "gpu-node-0");
    let message = refusal(pods.create(&PostParams::default(), &limited))
        .await?
        .context("a GPU limit with spec.nodeName")?;
    assert!(
        message.contains("spec.nodeName: gpu-node-0")
            && message.contains("wasmgpu.io/gpu in container(s) main"),
        "{message}"
    );
    let init = on_node(asking_gpu(pod("init", &[]), true), "gpu-node-0");
    let message = refusal(pods.create(&PostParams::default(), &init))
        .await?
        .context("an init container's GPU request with spec.nodeName")?;
    assert!(
        message.contains("spec.nodeName: gpu-node-0")
            && message.contains("wasmgpu.io/gpu in container(s) setup"),
        "{message}"
    );

    // The same pods without spec.nodeName go to the controller; a pod asking
    // no GPUs may name its node.
    for mut pod in [named, limited, init] {
        pod.spec.as_mut().unwrap().node_name = None;
        pods.create(&PostParams::default(), &pod).await?;
    }
    let plain = on_node(pod("plain", &[]), "gpu-node-0");
    assert_eq!(
        refusal(pods.create(&PostParams::default(), &plain)).await?,
        None
    );
    // The controller's own identity is trusted.
    let controller = account_with(
        &ctx,
        "wasmgpu-controller",
        vec![rule(&["pods"], &["create"])],
    )
    .await?;
    let as_controller: Api<Pod> = Api::namespaced(controller, &ctx.namespace);
    let trusted = on_node(
        pod("trusted", &[("wasmgpu.io/gpuresource", "pair")]),
        "gpu-node-0",
    );
    assert_eq!(
        refusal(as_controller.create(&PostParams::default(), &trusted)).await?,
        None
    );
    delete_all(&ctx, &documents).await;
    Ok(())
}
