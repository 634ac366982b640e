//! Identities with exactly the permissions `deploy/rbac/` grants, for tests
//! that run the controller or the agent as they are deployed.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject,
};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde::Deserialize;
use wasmgpu_test_harness::TestContext;

/// The object of `kind` in `deploy/rbac/<file>`, if there is one.
fn find<K: serde::de::DeserializeOwned>(file: &str, kind: &str) -> Result<Option<K>> {
    let path = crate::repo().join("deploy/rbac").join(file);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    for document in serde_norway::Deserializer::from_str(&text) {
        let value = serde_json::Value::deserialize(document)?;
        if value["kind"] == kind {
            return Ok(Some(serde_json::from_value(value)?));
        }
    }
    Ok(None)
}

/// The ClusterRole in `deploy/rbac/<file>`.
pub fn cluster_role(file: &str) -> Result<ClusterRole> {
    find(file, "ClusterRole")?.with_context(|| format!("no ClusterRole in deploy/rbac/{file}"))
}

/// A ServiceAccount `account` in the test's namespace bound to a copy of
/// the ClusterRole in `deploy/rbac/<file>` (named after the namespace, so
/// tests do not share it) and to the file's Role, if any, in the test's
/// namespace; its kubeconfig is written into `dir`. Calling it
/// again for the same account reuses the role and binding.
pub async fn identity(ctx: &TestContext, file: &str, account: &str, dir: &Path) -> Result<PathBuf> {
    let identity = ctx.service_account(account).await?;
    let mut role = cluster_role(file)?;
    let name = format!("{}-{account}", ctx.namespace);
    role.metadata = ObjectMeta {
        name: Some(name.clone()),
        ..Default::default()
    };
    ignore_exists(
        Api::<ClusterRole>::all(ctx.client.clone())
            .create(&PostParams::default(), &role)
            .await,
    )
    .with_context(|| format!("creating ClusterRole {name}"))?;
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        role_ref: role_ref("ClusterRole", &name),
        subjects: Some(subjects(ctx, account)),
    };
    ignore_exists(
        Api::<ClusterRoleBinding>::all(ctx.client.clone())
            .create(&PostParams::default(), &binding)
            .await,
    )
    .with_context(|| format!("creating ClusterRoleBinding {name}"))?;
    // The namespaced part (Lease, policy ConfigMaps), in the test's namespace.
    if let Some(mut role) = find::<Role>(file, "Role")? {
        role.metadata = ObjectMeta {
            name: Some(account.into()),
            namespace: Some(ctx.namespace.clone()),
            ..Default::default()
        };
        ignore_exists(
            Api::<Role>::namespaced(ctx.client.clone(), &ctx.namespace)
                .create(&PostParams::default(), &role)
                .await,
        )
        .with_context(|| format!("creating Role {account}"))?;
        let binding = RoleBinding {
            metadata: ObjectMeta {
                name: Some(account.into()),
                namespace: Some(ctx.namespace.clone()),
                ..Default::default()
            },
            role_ref: role_ref("Role", account),
            subjects: Some(subjects(ctx, account)),
        };
        ignore_exists(
            Api::<RoleBinding>::namespaced(ctx.client.clone(), &ctx.namespace)
                .create(&PostParams::default(), &binding)
                .await,
        )
        .with_context(|| format!("creating RoleBinding {account}"))?;
    }
    let path = dir.join(format!("{account}.kubeconfig"));
    identity.write_kubeconfig(&path)?;
    Ok(path)
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: name.into(),
    }
}

/// The ServiceAccount `account` of the test's namespace.
fn subjects(ctx: &TestContext, account: &str) -> Vec<Subject> {
    vec![Subject {
        kind: "ServiceAccount".into(),
        name: account.into(),
        namespace: Some(ctx.namespace.clone()),
        ..Default::default()
    }]
}

/// Creating what already exists (a second call) is fine.
fn ignore_exists<T>(result: kube::Result<T>) -> kube::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
        Err(error) => Err(error),
    }
}
