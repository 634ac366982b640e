//! Components named by policy ConfigMaps (`data["component.ref"]`): the
//! pull Secret read and turned into registry access, the component pulled
//! (or taken from the cache), counted by result.
//!
//! ```text
//!  ConfigMap ── annotation wasmgpu.io/pull-secret ──▶ Secret (kubernetes.io/dockerconfigjson)
//!                                                      .dockerconfigjson: the registry's user
//!                                                      ca.crt (optional): CAs to trust
//!  component.ref ──▶ oci::pull (memory ─▶ disk ─▶ registry), cap --max-component-bytes
//! ```

use std::sync::Arc;
use std::time::Instant;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde::Deserialize;

use super::metrics::Metrics;
use super::payload::RejectError;
use wasmgpu_api::policy::PULL_SECRET_CA_KEY;
use wasmgpu_oci::{self as oci, Access, ComponentCache, ComponentRef};

/// The key of a `kubernetes.io/dockerconfigjson` Secret.
const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// How the controller reaches registries.
#[derive(Clone, Debug)]
pub struct RegistrySettings {
    /// Where pulled components are kept by digest (none: memory only).
    pub cache_dir: Option<std::path::PathBuf>,
    /// PEM bundles of CAs trusted for every registry (`--registry-ca`).
    pub ca_pem: Vec<Vec<u8>>,
    /// The largest component pulled.
    pub max_component_bytes: usize,
}

/// Pulls the components policy ConfigMaps name.
pub(super) struct Puller {
    secrets: Api<Secret>,
    namespace: String,
    cache: Arc<ComponentCache>,
    settings: RegistrySettings,
    metrics: Metrics,
}

// === impl Puller ===

impl Puller {
    pub(super) fn new(
        client: kube::Client,
        namespace: &str,
        settings: RegistrySettings,
        metrics: Metrics,
    ) -> Self {
        Self {
            secrets: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            cache: Arc::new(ComponentCache::new(settings.cache_dir.clone())),
            settings,
            metrics,
        }
    }

    /// The component of policy `policy`, pulled with the credentials of
    /// `pull_secret`.
    pub(super) async fn fetch(
        &self,
        policy: &str,
        reference: &ComponentRef,
        pull_secret: Option<&str>,
    ) -> Result<Vec<u8>, RejectError> {
        let access = match self.access(reference, pull_secret).await {
            Ok(access) => access,
            Err(error) => {
                self.metrics.component_pull(policy, error.kind());
                return Err(error);
            }
        };
        let started = Instant::now();
        match oci::pull(
            reference,
            &access,
            self.settings.max_component_bytes,
            &self.cache,
        )
        .await
        {
            Ok(pulled) => {
                let elapsed = started.elapsed();
                tracing::info!(%policy, %reference, from = pulled.from, bytes = pulled.wasm.len(), ?elapsed, "Pulled policy component");
                self.metrics.component_pull(policy, pulled.from);
                Ok(pulled.wasm.as_ref().clone())
            }
            Err(error) => {
                tracing::warn!(%policy, %reference, kind = error.kind(), %error, "Cannot pull policy component");
                self.metrics.component_pull(policy, error.kind());
                Err(RejectError::Pull(error))
            }
        }
    }

    /// Credentials and CAs for `reference`'s registry.
    async fn access(
        &self,
        reference: &ComponentRef,
        pull_secret: Option<&str>,
    ) -> Result<Access, RejectError> {
        let mut access = Access {
            ca_pem: self.settings.ca_pem.clone(),
            ..Default::default()
        };
        let Some(name) = pull_secret else {
            return Ok(access);
        };
        let namespace = &self.namespace;
        let secret = match self.secrets.get_opt(name).await {
            Ok(Some(secret)) => secret,
            Ok(None) => {
                return Err(RejectError::PullSecret(format!(
                    "Secret {name} not found in namespace {namespace}: create it \
                     (kubectl create secret docker-registry {name} --docker-server={} \
                     --docker-username=… --docker-password=…) or remove the annotation",
                    reference.registry()
                )));
            }
            Err(kube::Error::Api(status)) if status.is_forbidden() => {
                return Err(RejectError::PullSecret(format!(
                    "the controller may not read Secret {name} in namespace {namespace}: \
                     add {name} to the resourceNames of the secrets rule of the controller's \
                     Role (wasmgpu-controller, deploy/rbac/controller.yaml)"
                )));
            }
            Err(error) => {
                return Err(RejectError::PullSecret(format!(
                    "cannot read Secret {name} in namespace {namespace}: {}",
                    super::connection::error_chain(&error)
                )));
            }
        };
        let data = secret.data.unwrap_or_default();
        if let Some(ca) = data.get(PULL_SECRET_CA_KEY) {
            oci::check_pem(&ca.0, &format!("Secret {name} key {PULL_SECRET_CA_KEY}"))
                .map_err(|e| RejectError::PullSecret(e.to_string()))?;
            access.ca_pem.push(ca.0.clone());
        }
        if let Some(config) = data.get(DOCKER_CONFIG_KEY) {
            access.credentials = credentials_for(&config.0, reference.registry())
                .map_err(|e| RejectError::PullSecret(format!("Secret {name}: {e}")))?;
            if access.credentials.is_none() {
                tracing::info!(secret = %name, registry = %reference.registry(), "The pull Secret has no credentials for this registry; pulling anonymously");
            }
        } else if !data.contains_key(PULL_SECRET_CA_KEY) {
            return Err(RejectError::PullSecret(format!(
                "Secret {name} has neither {DOCKER_CONFIG_KEY} nor {PULL_SECRET_CA_KEY}: make it \
                 with kubectl create secret docker-registry"
            )));
        }
        Ok(access)
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize)]
struct DockerAuth {
    username: Option<String>,
    password: Option<String>,
    auth: Option<String>,
}

/// The user and password for `registry` in a `.dockerconfigjson`; `None`
/// when it names other registries only.
pub(super) fn credentials_for(
    config: &[u8],
    registry: &str,
) -> Result<Option<(String, String)>, String> {
    let config: DockerConfig = serde_json::from_slice(config)
        .map_err(|e| format!("{DOCKER_CONFIG_KEY} is not a Docker config: {e}"))?;
    let host = |key: &str| {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        key.split('/').next().unwrap_or_default().to_string()
    };
    let Some((key, entry)) = config.auths.iter().find(|(key, _)| host(key) == registry) else {
        return Ok(None);
    };
    if let (Some(user), Some(password)) = (&entry.username, &entry.password) {
        return Ok(Some((user.clone(), password.clone())));
    }
    let auth = entry
        .auth
        .as_deref()
        .ok_or_else(|| format!("the entry {key:?} has neither username/password nor auth"))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .map_err(|e| format!("the auth of {key:?} is not base64: {e}"))?;
    let text =
        String::from_utf8(decoded).map_err(|_| format!("the auth of {key:?} is not UTF-8"))?;
    let (user, password) = text
        .split_once(':')
        .ok_or_else(|| format!("the auth of {key:?} is not user:password"))?;
    Ok(Some((user.to_string(), password.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_from_either_form_and_match_the_host() {
        let auth = base64::engine::general_purpose::STANDARD.encode("u:p:w");
        let config = format!(
            r#"{{"auths":{{"https://reg.example:5000/v1/":{{"auth":"{auth}"}},
                "other.example":{{"username":"x","password":"y"}}}}}}"#
        );
        assert_eq!(
            credentials_for(config.as_bytes(), "reg.example:5000").unwrap(),
            Some(("u".into(), "p:w".into()))
        );
        assert_eq!(
            credentials_for(config.as_bytes(), "other.example").unwrap(),
            Some(("x".into(), "y".into()))
        );
        assert_eq!(
            credentials_for(config.as_bytes(), "third.example").unwrap(),
            None
        );
        let error = credentials_for(b"nope", "reg.example").unwrap_err();
        assert!(error.contains("not a Docker config"), "{error}");
        let error = credentials_for(br#"{"auths":{"reg.example":{"auth":"%%"}}}"#, "reg.example")
            .unwrap_err();
        assert!(error.contains("base64"), "{error}");
    }
}
