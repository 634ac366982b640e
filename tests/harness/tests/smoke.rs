//! The control plane is the real thing: nodes, pods, the binding and status
//! subresources, watches, conflicts and RBAC behave as in a cluster, and so
//! do ownerReferences and namespace deletion (kube-controller-manager's
//! garbage collector and namespace controller run in process).

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{
    Binding, ConfigMap, Container, Namespace, Node, ObjectReference, Pod, PodSpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use wasmgpu_test_harness::{
    DEFAULT_WAIT, FakeNode, PodPhase, TestContext, set_pod_phase, wait_for,
};

/// The minor version of the Kubernetes API that k8s-openapi was built for.
// Exactly one of the macros below expands, so `minor` is set once.
#[allow(clippy::needless_late_init)]
fn openapi_minor() -> &'static str {
    let minor: &'static str;
    k8s_openapi::k8s_if_1_33! { minor = "33"; }
    k8s_openapi::k8s_if_1_34! { minor = "34"; }
    k8s_openapi::k8s_if_1_35! { minor = "35"; }
    k8s_openapi::k8s_if_1_36! { minor = "36"; }
    k8s_openapi::k8s_if_1_37! { minor = "37"; }
    minor
}

#[tokio::test]
async fn server_version_matches_the_rust_api_types() -> Result<()> {
    let ctx = TestContext::new("version").await?;
    let info = ctx.client.apiserver_version().await?;
    assert_eq!(info.major, "1");
    assert_eq!(
        info.minor,
        openapi_minor(),
        "k8s-openapi's feature must match the server: {info:?}"
    );
    assert!(
        info.git_version.starts_with(&format!("v1.{}.", info.minor)),
        "{info:?}"
    );
    Ok(())
}

fn pod(name: &str, scheduler: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            scheduler_name: Some(scheduler.to_owned()),
            restart_policy: Some("Never".to_owned()),
            containers: vec![Container {
                name: "main".to_owned(),
                image: Some("registry.k8s.io/pause:3.10".to_owned()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// Forwards the objects a watch sees into a channel.
fn watch<K>(api: Api<K>, config: watcher::Config) -> mpsc::UnboundedReceiver<K>
where
    K: Resource
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = watcher(api, config).applied_objects().boxed();
        while let Ok(Some(object)) = stream.try_next().await {
            if tx.send(object).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (bounded) for the watch to deliver an object matching `pred`.
async fn next_matching<K>(
    rx: &mut mpsc::UnboundedReceiver<K>,
    what: &str,
    pred: impl Fn(&K) -> bool,
) -> Result<K> {
    let found = tokio::time::timeout(DEFAULT_WAIT, async {
        while let Some(object) = rx.recv().await {
            if pred(&object) {
                return Some(object);
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(object)) => Ok(object),
        Ok(None) => bail!("the watch ended before it saw {what}"),
        Err(_) => bail!("the watch did not see {what} within {DEFAULT_WAIT:?}"),
    }
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

#[tokio::test]
async fn a_pod_is_bound_to_a_fake_node_and_completes() -> Result<()> {
    let ctx = TestContext::new("binding").await?;
    let nodes: Api<Node> = ctx.cluster_api();
    let pods: Api<Pod> = ctx.api();
    let node_name_ = format!("{}-gpu-0", ctx.namespace);

    let mut node_events = watch(
        nodes.clone(),
        watcher::Config::default().fields(&format!("metadata.name={node_name_}")),
    );
    let mut pod_events = watch(pods.clone(), watcher::Config::default());

    // A node, as a kubelet would register it.
    let node = FakeNode::new(&node_name_)
        .label("wasmgpu.io/gpu", "true")
        .taint("nvidia.com/gpu", Some("present"), "NoSchedule")
        .capacity("nvidia.com/gpu", "8")
        .create(&ctx.client)
        .await?;
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    assert_eq!(ready.map(|c| c.status.as_str()), Some("True"), "{node:?}");
    let seen = next_matching(&mut node_events, "the node", |n: &Node| {
        n.metadata.name.as_deref() == Some(&node_name_)
    })
    .await?;
    assert_eq!(
        seen.labels().get("wasmgpu.io/gpu").map(String::as_str),
        Some("true")
    );

    // A pod for a scheduler that does not run: nobody binds it.
    let created = pods
        .create(&PostParams::default(), &pod("trainer-0", "wasmgpu"))
        .await?;
    assert_eq!(node_name(&created), None);
    assert_eq!(phase(&created), Some("Pending"));
    next_matching(&mut pod_events, "the pending pod", |p: &Pod| {
        p.metadata.name.as_deref() == Some("trainer-0")
    })
    .await?;

    // Bind it, as the wasmgpu controller will.
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some("trainer-0".to_owned()),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Node".to_owned()),
            name: Some(node_name_.clone()),
            ..ObjectReference::default()
        },
    };
    let _: Value = pods
        .create_subresource("binding", "trainer-0", &PostParams::default(), &binding)
        .await?;
    let bound = next_matching(&mut pod_events, "the pod bound", |p: &Pod| {
        node_name(p) == Some(node_name_.as_str())
    })
    .await?;
    let scheduled = bound
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    assert_eq!(
        scheduled.map(|c| c.status.as_str()),
        Some("True"),
        "{bound:?}"
    );

    // A second binding is refused: the pod is already assigned.
    match pods
        .create_subresource::<_, Value>("binding", "trainer-0", &PostParams::default(), &binding)
        .await
    {
        Err(kube::Error::Api(status)) if status.is_conflict() => {}
        other => bail!("binding twice: expected a conflict, got {other:?}"),
    }

    // The kubelet's part: running, then done.
    set_pod_phase(&pods, "trainer-0", PodPhase::Running).await?;
    next_matching(&mut pod_events, "the pod running", |p: &Pod| {
        phase(p) == Some("Running")
    })
    .await?;
    let done = set_pod_phase(&pods, "trainer-0", PodPhase::Succeeded).await?;
    assert_eq!(phase(&done), Some("Succeeded"));
    next_matching(&mut pod_events, "the pod succeeded", |p: &Pod| {
        phase(p) == Some("Succeeded")
    })
    .await?;
    // What terminated in a pod that never restarts cannot run again.
    let refused = set_pod_phase(&pods, "trainer-0", PodPhase::Running).await;
    let code = refused
        .as_ref()
        .err()
        .and_then(|e| match e.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        });
    ensure!(
        code == Some(422),
        "running again after success must be invalid, got {refused:?}"
    );

    // The status patch is visible to a plain get and to wait_for too.
    wait_for(
        &pods,
        "trainer-0",
        DEFAULT_WAIT,
        "succeeded",
        |p: Option<&Pod>| p.and_then(phase) == Some("Succeeded"),
    )
    .await?;

    // Node updates arrive on the watch.
    nodes
        .patch(
            &node_name_,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "unschedulable": true } })),
        )
        .await?;
    next_matching(&mut node_events, "the node cordoned", |n: &Node| {
        n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_stale_update_is_a_conflict() -> Result<()> {
    let ctx = TestContext::new("conflict").await?;
    let pods: Api<Pod> = ctx.api();
    let stale = pods
        .create(&PostParams::default(), &pod("p", "wasmgpu"))
        .await?;
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { "a": "1" } } })),
    )
    .await?;
    match pods.replace("p", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(status)) if status.is_conflict() => Ok(()),
        other => bail!("expected a conflict, got {other:?}"),
    }
}

/// Retries `f` until it returns true, for a bounded time: for state the
/// server applies asynchronously and offers no watch for (RBAC's cache).
async fn eventually<F, Fut>(what: &str, mut f: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEFAULT_WAIT;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    while tokio::time::Instant::now() < deadline {
        tick.tick().await;
        if f().await {
            return Ok(());
        }
    }
    bail!("not {what} after {DEFAULT_WAIT:?}")
}

fn is_forbidden<T: std::fmt::Debug>(result: kube::Result<T>) -> bool {
    matches!(result, Err(kube::Error::Api(status)) if status.is_forbidden())
}

#[tokio::test]
async fn a_service_account_gets_only_what_its_role_grants() -> Result<()> {
    let ctx = TestContext::new("rbac").await?;
    let reader = ctx.service_account("pod-reader").await?;
    let client: Client = reader.client().await?;

    // Who the server thinks it is.
    let review: SelfSubjectReview = Api::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .context("SelfSubjectReview")?;
    let user = review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username);
    assert_eq!(user, Some(reader.username()));

    let own_pods: Api<Pod> = Api::namespaced(client.clone(), &ctx.namespace);
    assert!(
        is_forbidden(own_pods.list(&ListParams::default()).await),
        "no role yet"
    );

    // Grant read access to pods in the test's namespace only.
    let role = Role {
        metadata: ObjectMeta {
            name: Some("pod-reader".into()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["pods".into()]),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            ..PolicyRule::default()
        }]),
    };
    ctx.api::<Role>()
        .create(&PostParams::default(), &role)
        .await?;
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("pod-reader".into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "pod-reader".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: reader.name.clone(),
            namespace: Some(reader.namespace.clone()),
            ..Subject::default()
        }]),
    };
    ctx.api::<RoleBinding>()
        .create(&PostParams::default(), &binding)
        .await?;
    eventually("allowed to list pods", || async {
        own_pods.list(&ListParams::default()).await.is_ok()
    })
    .await?;

    // Allowed: what the role says. Refused: everything else.
    ctx.api::<Pod>()
        .create(&PostParams::default(), &pod("p", "wasmgpu"))
        .await?;
    own_pods.get("p").await?;
    assert!(
        is_forbidden(
            own_pods
                .create(&PostParams::default(), &pod("q", "wasmgpu"))
                .await
        ),
        "create"
    );
    assert!(
        is_forbidden(
            own_pods
                .patch_status(
                    "p",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"phase": "Failed"}}))
                )
                .await
        ),
        "status"
    );
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some("p".into()),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some("n".into()),
            ..ObjectReference::default()
        },
    };
    assert!(
        is_forbidden(
            own_pods
                .create_subresource::<_, Value>("binding", "p", &PostParams::default(), &binding)
                .await
        ),
        "binding"
    );
    assert!(
        is_forbidden(
            Api::<Pod>::namespaced(client.clone(), "default")
                .list(&ListParams::default())
                .await
        ),
        "other namespace"
    );
    assert!(
        is_forbidden(Api::<Node>::all(client).list(&ListParams::default()).await),
        "nodes"
    );
    Ok(())
}

/// Runs kubectl with the admin kubeconfig, bounded in time.
async fn kubectl(ctx: &TestContext, args: &[&str]) -> Result<String> {
    ctx.cluster()
        .run_kubectl(std::path::Path::new(env!("CARGO_MANIFEST_DIR")), args)
        .await
}

#[tokio::test]
async fn kubectl_applies_kustomizations_and_dry_runs_on_the_server() -> Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let ctx = TestContext::new("kubectl").await?;

    let version: Value = serde_json::from_str(&kubectl(&ctx, &["version", "-o", "json"]).await?)?;
    assert_eq!(version["serverVersion"]["minor"], openapi_minor());
    assert_eq!(
        version["clientVersion"]["gitVersion"],
        version["serverVersion"]["gitVersion"]
    );

    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "namespace: {}\nresources: [config.yaml]\nlabels: [{{pairs: {{app: wasmgpu}}}}]\n",
            ctx.namespace
        ),
    )?;
    std::fs::write(
        dir.path().join("config.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-kustomize}\ndata: {a: '1'}\n",
    )?;
    let dir_arg = dir.path().to_str().context("temporary path is not UTF-8")?;
    kubectl(&ctx, &["apply", "-k", dir_arg]).await?;
    let configs: Api<ConfigMap> = ctx.api();
    let applied = configs.get("from-kustomize").await?;
    assert_eq!(
        applied.labels().get("app").map(String::as_str),
        Some("wasmgpu")
    );

    // A server-side dry run is validated by the server and stores nothing.
    let other = dir.path().join("other.yaml");
    std::fs::write(
        &other,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dry}\ndata: {b: '2'}\n",
    )?;
    let other_arg = other.to_str().context("temporary path is not UTF-8")?;
    kubectl(
        &ctx,
        &[
            "apply",
            "--dry-run=server",
            "-n",
            &ctx.namespace,
            "-f",
            other_arg,
        ],
    )
    .await?;
    assert!(configs.get_opt("dry").await?.is_none());
    std::fs::write(
        &other,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Not_Valid}\n",
    )?;
    ensure!(
        kubectl(
            &ctx,
            &[
                "apply",
                "--dry-run=server",
                "-n",
                &ctx.namespace,
                "-f",
                other_arg
            ]
        )
        .await
        .is_err(),
        "the server must refuse an invalid name"
    );
    Ok(())
}

/// ConfigMap `name`, owned by `owner` when given (blocking its foreground
/// deletion, as a controller's dependents do).
fn config_map(name: &str, owner: Option<&ConfigMap>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            owner_references: owner.map(|owner| {
                vec![OwnerReference {
                    api_version: "v1".to_owned(),
                    kind: "ConfigMap".to_owned(),
                    name: owner.name_any(),
                    uid: owner.uid().expect("a stored object has a uid"),
                    block_owner_deletion: Some(true),
                    controller: Some(true),
                }]
            }),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

#[tokio::test]
async fn owner_references_cascade_and_a_deleted_namespace_is_emptied() -> Result<()> {
    let ctx = TestContext::new("cascade").await?;
    let maps: Api<ConfigMap> = ctx.api();
    let post = PostParams::default();
    for name in ["background", "foreground", "orphan"] {
        let owner = maps.create(&post, &config_map(name, None)).await?;
        maps.create(&post, &config_map(&format!("{name}-dep"), Some(&owner)))
            .await?;
    }

    // Background (the default): the owner goes at once, then its dependent.
    maps.delete("background", &DeleteParams::background())
        .await?;
    wait_for(&maps, "background-dep", DEFAULT_WAIT, "collected", |c| {
        c.is_none()
    })
    .await?;

    // Foreground: the owner stays, with the foregroundDeletion finalizer,
    // until its dependent is gone.
    let deleting = maps
        .delete("foreground", &DeleteParams::foreground())
        .await?
        .left()
        .context("the owner is kept while its dependent exists")?;
    ensure!(
        deleting.finalizers() == ["foregroundDeletion"],
        "{:?}",
        deleting.finalizers()
    );
    wait_for(&maps, "foreground", DEFAULT_WAIT, "deleted", |c| {
        c.is_none()
    })
    .await?;
    ensure!(
        maps.get_opt("foreground-dep").await?.is_none(),
        "the dependent goes first"
    );

    // Orphan: the dependent stays, its reference taken off.
    maps.delete("orphan", &DeleteParams::orphan()).await?;
    wait_for(&maps, "orphan", DEFAULT_WAIT, "deleted", |c| c.is_none()).await?;
    wait_for(&maps, "orphan-dep", DEFAULT_WAIT, "orphaned", |c| {
        c.is_some_and(|c| c.owner_references().is_empty())
    })
    .await?;

    // A namespace deleted is emptied, then removed.
    let doomed = TestContext::new("cascade-doomed").await?;
    doomed
        .api::<ConfigMap>()
        .create(&post, &config_map("left", None))
        .await?;
    doomed
        .api::<Pod>()
        .create(&post, &pod("waiting", "wasmgpu"))
        .await?;
    let namespaces: Api<Namespace> = ctx.cluster_api();
    namespaces
        .delete(&doomed.namespace, &DeleteParams::default())
        .await?;
    wait_for(
        &namespaces,
        &doomed.namespace,
        DEFAULT_WAIT,
        "deleted",
        |c| c.is_none(),
    )
    .await?;
    Ok(())
}
