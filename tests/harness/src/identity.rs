//! Restricted identities: ServiceAccounts with tokens from the TokenRequest API.

use std::path::Path;

use anyhow::{Context, Result};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{ObjectMeta, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client};
use serde_json::json;

use crate::Cluster;

/// How long minted tokens live: longer than any test run.
const TOKEN_SECONDS: i64 = 6 * 3600;

/// A ServiceAccount and a token for it.
#[derive(Clone)]
pub struct ServiceAccountIdentity {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount's name.
    pub name: String,
    token: String,
    kubeconfig: Kubeconfig,
}

impl std::fmt::Debug for ServiceAccountIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountIdentity")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ServiceAccountIdentity {
    pub(crate) async fn create(
        cluster: &Cluster,
        admin: &Client,
        namespace: &str,
        name: &str,
    ) -> Result<Self> {
        let accounts = Api::<ServiceAccount>::namespaced(admin.clone(), namespace);
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        match accounts.create(&PostParams::default(), &account).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("creating ServiceAccount {namespace}/{name}"));
            }
        }
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(TOKEN_SECONDS),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let token = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .with_context(|| format!("requesting a token for ServiceAccount {namespace}/{name}"))?
            .status
            .and_then(|status| status.token)
            .context("the TokenRequest came back without a token")?;
        let kubeconfig =
            token_kubeconfig(cluster.kubeconfig(), &format!("{namespace}-{name}"), &token)?;
        Ok(Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            token,
            kubeconfig,
        })
    }

    /// `system:serviceaccount:<namespace>:<name>`, as RBAC and audit see it.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// The bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A client acting as this ServiceAccount.
    pub async fn client(&self) -> Result<Client> {
        crate::client_from(self.kubeconfig.clone()).await
    }

    /// A kubeconfig acting as this ServiceAccount, for a subprocess.
    pub fn kubeconfig(&self) -> &Kubeconfig {
        &self.kubeconfig
    }

    /// Writes [`Self::kubeconfig`] to `path` (JSON, which is YAML too).
    pub fn write_kubeconfig(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_vec_pretty(&self.kubeconfig)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

/// The admin kubeconfig's cluster with a user that presents `token`.
fn token_kubeconfig(admin: &Kubeconfig, user: &str, token: &str) -> Result<Kubeconfig> {
    let cluster = admin
        .clusters
        .first()
        .context("the admin kubeconfig has no cluster")?;
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{ "name": user, "user": { "token": token } }],
        "contexts": [{ "name": user, "context": { "cluster": cluster.name, "user": user } }],
        "current-context": user,
    });
    serde_json::from_value(kubeconfig).context("building a kubeconfig")
}
