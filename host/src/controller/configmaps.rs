//! Policy ConfigMaps: watched in one namespace, checked, loaded, tried on a
//! canary round, and only then swapped in.
//!
//! ```text
//!  ConfigMap (wasmgpu.io/policy=true) ──▶ payload: size, gunzip, digest pin, config.json
//!      ──▶ compile + describe (blocking pool; the engine caches by digest)
//!      ──▶ canary allocate() on a small built-in snapshot, decisions validated
//!      ──▶ Policies::activate (atomic per name)  ──▶ Event PolicyLoaded, status annotation
//!  any failure: the previous version stays ──▶ Event PolicyRejected, status annotation
//!  ConfigMap deleted ──▶ Policies::unload
//! ```
//!
//! Loads run one at a time, in the order the watch delivers them, so an
//! older version never overrides a newer one.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_stream};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use super::events::EventSink;
use super::metrics::Metrics;
use super::policies::{ActivePolicy, Policies};
use super::watch::Shared;
use crate::api::policy::{
    CONFIG_KEY, DIGEST_ANNOTATION, POLICY_GZ_KEY, POLICY_KEY, POLICY_SELECTOR, PolicyStatus,
    STATUS_ANNOTATION,
};
use crate::engine::types::Snapshot;
use crate::engine::{Digest, Engine, LoadedPolicy, PolicyError};
use crate::validate::validate;

/// The largest component accepted, after decompression.
pub const MAX_POLICY_BYTES: usize = 8 << 20;

/// A policy ConfigMap's contents, checked and decoded.
#[derive(Clone, Debug)]
pub struct Payload {
    /// The policy's name (the ConfigMap's).
    pub name: String,
    /// The component.
    pub wasm: Vec<u8>,
    /// Its digest.
    pub digest: Digest,
    /// `config.json` (empty when absent).
    pub config: String,
}

/// Why a policy ConfigMap's version was not activated.
#[derive(Debug, thiserror::Error)]
pub enum RejectError {
    /// No component in the ConfigMap.
    #[error("binaryData has neither {POLICY_KEY:?} nor {POLICY_GZ_KEY:?}")]
    Missing,
    /// Two components in the ConfigMap.
    #[error("binaryData has both {POLICY_KEY:?} and {POLICY_GZ_KEY:?}; keep one")]
    Ambiguous,
    /// The component is over [`MAX_POLICY_BYTES`].
    #[error("the component is over the limit of {limit} bytes ({size} bytes or more)")]
    TooLarge {
        /// Its size (at least this much, for a compressed one).
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// `policy.wasm.gz` is not gzip.
    #[error("{POLICY_GZ_KEY} does not decompress: {0}")]
    Gunzip(String),
    /// The digest annotation does not match the component.
    #[error("digest mismatch: {DIGEST_ANNOTATION} pins {pinned}, the component is {actual}")]
    DigestMismatch {
        /// The annotation's value.
        pinned: String,
        /// The component's digest.
        actual: Digest,
    },
    /// `config.json` is not JSON.
    #[error("{CONFIG_KEY} is not JSON: {0}")]
    Config(String),
    /// The engine refused the component (not Wasm, a core module, another
    /// world, `describe()` failed, …).
    #[error("{0}")]
    Load(PolicyError),
    /// The canary round failed (trap, fuel, deadline, memory, output).
    #[error("the canary round failed: {0}")]
    Canary(PolicyError),
    /// The canary round's decisions are not valid.
    #[error("the canary round's decisions are invalid: {0}")]
    CanaryRefused(String),
}

// === impl RejectError ===

impl RejectError {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            RejectError::Missing => "missing",
            RejectError::Ambiguous => "ambiguous",
            RejectError::TooLarge { .. } => "too-large",
            RejectError::Gunzip(_) => "gunzip",
            RejectError::DigestMismatch { .. } => "digest-mismatch",
            RejectError::Config(_) => "config",
            RejectError::Load(e) => e.kind(),
            RejectError::Canary(_) => "canary",
            RejectError::CanaryRefused(_) => "canary-refused",
        }
    }
}

// === impl Payload ===

impl Payload {
    /// Reads, decompresses and checks a policy ConfigMap (no compiling).
    pub fn from_configmap(configmap: &ConfigMap) -> Result<Self, RejectError> {
        let binary = configmap.binary_data.as_ref();
        let raw = binary.and_then(|b| b.get(POLICY_KEY));
        let gz = binary.and_then(|b| b.get(POLICY_GZ_KEY));
        let wasm = match (raw, gz) {
            (Some(_), Some(_)) => return Err(RejectError::Ambiguous),
            (None, None) => return Err(RejectError::Missing),
            (Some(raw), None) => {
                if raw.0.len() > MAX_POLICY_BYTES {
                    return Err(RejectError::TooLarge {
                        size: raw.0.len(),
                        limit: MAX_POLICY_BYTES,
                    });
                }
                raw.0.clone()
            }
            (None, Some(gz)) => gunzip(&gz.0, MAX_POLICY_BYTES)?,
        };
        let digest = Digest::of(&wasm);
        if let Some(pinned) = configmap.annotations().get(DIGEST_ANNOTATION) {
            let pinned = pinned.trim();
            let matches = pinned == digest.as_str()
                || digest.as_str().strip_prefix("sha256:") == Some(pinned);
            if !matches {
                return Err(RejectError::DigestMismatch {
                    pinned: pinned.to_string(),
                    actual: digest,
                });
            }
        }
        let config = configmap
            .data
            .as_ref()
            .and_then(|d| d.get(CONFIG_KEY))
            .cloned()
            .unwrap_or_default();
        if !config.trim().is_empty() {
            serde_json::from_str::<serde_json::Value>(&config)
                .map_err(|e| RejectError::Config(e.to_string()))?;
        }
        Ok(Payload {
            name: configmap.name_any(),
            wasm,
            digest,
            config,
        })
    }

    /// Compiles (or takes from the engine's cache) and describes the
    /// component, then runs the canary round. Blocking: call it off the
    /// async runtime.
    pub fn load(self, engine: &Engine) -> Result<ActivePolicy, RejectError> {
        let loaded = engine.load(&self.wasm).map_err(RejectError::Load)?;
        canary(&loaded, &self.config)?;
        Ok(ActivePolicy {
            name: self.name,
            loaded,
            config: self.config,
        })
    }
}

/// Decompresses at most `limit` bytes.
fn gunzip(bytes: &[u8], limit: usize) -> Result<Vec<u8>, RejectError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| RejectError::Gunzip(e.to_string()))?;
    if out.len() > limit {
        return Err(RejectError::TooLarge {
            size: out.len(),
            limit,
        });
    }
    Ok(out)
}

/// The canary snapshot: two nodes of two GPUs, a one-GPU and a two-GPU pod.
pub fn canary_snapshot(config: &str) -> Snapshot {
    use wasmgpu_policy_sdk::Sharing;
    use wasmgpu_policy_sdk::testing::{node, request, snapshot, with_full_nvlink};
    const MODEL: &str = "NVIDIA H100 80GB HBM3";
    let mut sdk = snapshot(
        vec![
            with_full_nvlink(node("canary-0", 2, MODEL, 81559)),
            with_full_nvlink(node("canary-1", 2, MODEL, 81559)),
        ],
        vec![
            request("wasmgpu-canary/pod-0", 1, Sharing::Exclusive, 0),
            request("wasmgpu-canary/pod-1", 2, Sharing::Exclusive, 0),
        ],
    );
    sdk.config = config.to_string();
    // The SDK's and the host's types come from the same WIT: same serde form.
    let value = serde_json::to_value(&sdk).expect("a snapshot serializes");
    serde_json::from_value(value).expect("the SDK's snapshot is the host's")
}

/// Runs `policy` on the canary snapshot: the call must succeed and every
/// decision must be valid.
fn canary(policy: &LoadedPolicy, config: &str) -> Result<(), RejectError> {
    let snapshot = canary_snapshot(config);
    let round = policy.allocate(&snapshot).map_err(RejectError::Canary)?;
    let verdict = validate(&snapshot, &round.decisions);
    if let Some(refused) = verdict.refused.first() {
        return Err(RejectError::CanaryRefused(format!(
            "{} of {} refused, first: {:?}: {}",
            verdict.refused.len(),
            round.decisions.len(),
            refused.decision,
            refused.reason
        )));
    }
    Ok(())
}

/// The ConfigMap an Event is about.
fn configmap_ref(configmap: &ConfigMap) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        namespace: configmap.namespace(),
        name: Some(configmap.name_any()),
        uid: configmap.uid(),
        ..Default::default()
    }
}

/// What a ConfigMap asks for, hashed: the loader skips a ConfigMap whose
/// inputs it already tried (e.g. after its own status write), and records
/// it in the status as `observed`.
pub fn fingerprint(configmap: &ConfigMap) -> Digest {
    let inputs = json!({
        "binaryData": configmap.binary_data,
        "config": configmap.data.as_ref().and_then(|d| d.get(CONFIG_KEY)),
        "pin": configmap.annotations().get(DIGEST_ANNOTATION),
    });
    Digest::of(inputs.to_string().as_bytes())
}

/// Watches policy ConfigMaps and swaps the versions they carry in.
pub(super) struct Loader {
    pub(super) api: Api<ConfigMap>,
    pub(super) engine: Arc<Engine>,
    pub(super) policies: Arc<Policies>,
    pub(super) shared: Arc<Shared>,
    pub(super) events: EventSink,
    /// The inputs last tried per name.
    pub(super) name_to_tried: HashMap<String, Digest>,
    /// The status last written per name.
    pub(super) name_to_status: HashMap<String, PolicyStatus>,
    pub(super) metrics: Metrics,
    /// Every replica loads (a new leader decides at once); only the leader
    /// writes Events and the status annotation.
    pub(super) leader: watch::Receiver<bool>,
}

// === impl Loader ===

impl Loader {
    /// Feeds the ConfigMaps of the watch into the policies until the watch
    /// ends. Marks its kind listed once the first list is loaded.
    pub(super) async fn run(mut self) {
        let config = watcher::Config::default().labels(POLICY_SELECTOR);
        let mut stream = watch_stream(self.api.clone(), config)
            .default_backoff()
            .boxed();
        let mut buffer: Vec<ConfigMap> = Vec::new();
        let mut listed = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Init) => buffer.clear(),
                Ok(Event::InitApply(configmap)) => buffer.push(configmap),
                Ok(Event::InitDone) => {
                    let names: BTreeSet<String> = buffer.iter().map(|c| c.name_any()).collect();
                    for configmap in std::mem::take(&mut buffer) {
                        self.apply(&configmap).await;
                    }
                    for name in self.policies.configmap_names() {
                        if !names.contains(&name) {
                            self.remove(&name);
                        }
                    }
                    tracing::debug!(configmaps = names.len(), "Listed policy ConfigMaps");
                    if !listed {
                        listed = true;
                        self.shared.mark_listed();
                    }
                }
                Ok(Event::Apply(configmap)) => self.apply(&configmap).await,
                Ok(Event::Delete(configmap)) => self.remove(&configmap.name_any()),
                Err(error) => tracing::warn!(%error, "Policy ConfigMap watch failed; retrying"),
            }
        }
    }

    /// Loads the version `configmap` carries, unless already tried.
    async fn apply(&mut self, configmap: &ConfigMap) {
        let name = configmap.name_any();
        let fingerprint = fingerprint(configmap);
        if self.name_to_tried.get(&name) == Some(&fingerprint) {
            return;
        }
        self.name_to_tried.insert(name.clone(), fingerprint.clone());
        let started = Instant::now();
        let result = match Payload::from_configmap(configmap) {
            Ok(payload) => {
                let engine = Arc::clone(&self.engine);
                match tokio::task::spawn_blocking(move || payload.load(&engine)).await {
                    Ok(result) => result,
                    Err(error) => Err(RejectError::Load(PolicyError::Engine(format!(
                        "the load panicked: {error}"
                    )))),
                }
            }
            Err(error) => Err(error),
        };
        let elapsed = started.elapsed();
        let leading = *self.leader.borrow();
        let now = Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)
            .unwrap_or_else(|_| Timestamp::now())
            .to_string();
        let mut status = self.name_to_status.get(&name).cloned().unwrap_or_default();
        match result {
            Ok(policy) => {
                let digest = policy.loaded.digest().to_string();
                let info = policy.loaded.info();
                let version = format!("{} {}", info.name, info.version);
                self.policies.activate(policy);
                // A round decides what waited for this version.
                self.shared.changed.notify_one();
                tracing::info!(policy = %name, %digest, %version, ?elapsed, "Loaded policy from its ConfigMap");
                self.metrics.policy_load(&name, "loaded");
                self.event(
                    leading,
                    configmap,
                    false,
                    "PolicyLoaded",
                    format!("loaded {digest} ({version}) in {elapsed:.1?}; it decides from the next round"),
                );
                status = PolicyStatus {
                    observed: None,
                    active_digest: Some(digest.clone()),
                    active_version: Some(version),
                    loaded_at: Some(now),
                    last_digest: Some(digest),
                    last_error: None,
                    last_error_at: None,
                };
            }
            Err(error) => {
                let active = self.policies.get(&name);
                let still = match &active {
                    Some(active) => format!("{} stays active", active.loaded.digest()),
                    None => "no version of it is active; its pods wait".to_string(),
                };
                tracing::warn!(policy = %name, kind = error.kind(), %error, ?elapsed, "Rejected a policy version");
                self.policies.reject(&name, error.to_string());
                self.metrics.policy_load(&name, "rejected");
                self.event(
                    leading,
                    configmap,
                    true,
                    "PolicyRejected",
                    format!("rejected ({}): {error}; {still}", error.kind()),
                );
                if status.active_digest.is_none()
                    && let Some(active) = &active
                {
                    // A `--policy` file of the same name decides.
                    status.active_digest = Some(active.loaded.digest().to_string());
                    status.active_version = Some(format!(
                        "{} {}",
                        active.loaded.info().name,
                        active.loaded.info().version
                    ));
                }
                status.last_digest = Payload::from_configmap(configmap)
                    .ok()
                    .map(|p| p.digest.to_string());
                status.last_error = Some(error.to_string());
                status.last_error_at = Some(now);
            }
        }
        status.observed = Some(fingerprint.to_string());
        if leading {
            self.write_status(&name, &status).await;
        }
        self.name_to_status.insert(name, status);
    }

    /// Queues a load Event, when this replica leads.
    fn event(
        &self,
        leading: bool,
        configmap: &ConfigMap,
        warning: bool,
        reason: &'static str,
        note: String,
    ) {
        if leading {
            self.events
                .distinct(configmap_ref(configmap), warning, reason, "Load", note);
        }
    }

    /// Unloads the version of a deleted ConfigMap.
    fn remove(&mut self, name: &str) {
        self.name_to_tried.remove(name);
        self.name_to_status.remove(name);
        if self.policies.unload(name) {
            let fallback = self
                .policies
                .get(name)
                .map(|p| p.loaded.digest().to_string());
            tracing::info!(policy = %name, ?fallback, "Unloaded policy: its ConfigMap is gone");
            self.shared.changed.notify_one();
        }
    }

    /// Writes `status` to the ConfigMap's status annotation.
    async fn write_status(&self, name: &str, status: &PolicyStatus) {
        let value = serde_json::to_string(status).expect("a status serializes");
        let patch = json!({ "metadata": { "annotations": { STATUS_ANNOTATION: value } } });
        if let Err(error) = self
            .api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(policy = %name, %error, "Cannot write the policy status annotation");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Write;

    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    use super::*;

    fn configmap(binary: &[(&str, Vec<u8>)], pin: Option<&str>, config: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("p".into()),
                annotations: pin.map(|p| BTreeMap::from([(DIGEST_ANNOTATION.into(), p.into())])),
                ..Default::default()
            },
            binary_data: Some(
                binary
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.clone())))
                    .collect(),
            ),
            data: config.map(|c| BTreeMap::from([(CONFIG_KEY.into(), c.into())])),
            ..Default::default()
        }
    }

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn payload_plain_and_gzip_give_the_same_digest() {
        let wasm = b"\0asm\x0d\0\x01\0".to_vec();
        let plain =
            Payload::from_configmap(&configmap(&[(POLICY_KEY, wasm.clone())], None, None)).unwrap();
        let packed =
            Payload::from_configmap(&configmap(&[(POLICY_GZ_KEY, gz(&wasm))], None, None)).unwrap();
        assert_eq!(plain.wasm, wasm);
        assert_eq!(packed.wasm, wasm);
        assert_eq!(plain.digest, Digest::of(&wasm));
        assert_eq!(packed.digest, plain.digest);
    }

    #[test]
    fn payload_checks_the_pin_with_or_without_prefix() {
        let wasm = b"\0asm\x0d\0\x01\0".to_vec();
        let digest = Digest::of(&wasm).to_string();
        let bare = digest.strip_prefix("sha256:").unwrap();
        for pin in [digest.as_str(), bare] {
            Payload::from_configmap(&configmap(&[(POLICY_KEY, wasm.clone())], Some(pin), None))
                .unwrap();
        }
        let wrong = Digest::of(b"other").to_string();
        let error = Payload::from_configmap(&configmap(&[(POLICY_KEY, wasm)], Some(&wrong), None))
            .unwrap_err();
        assert!(
            matches!(error, RejectError::DigestMismatch { .. }),
            "{error}"
        );
    }

    #[test]
    fn payload_refuses_bombs_missing_and_bad_config() {
        let bomb = gz(&vec![0u8; MAX_POLICY_BYTES + 1]);
        assert!(bomb.len() < 64 << 10);
        let error =
            Payload::from_configmap(&configmap(&[(POLICY_GZ_KEY, bomb)], None, None)).unwrap_err();
        assert!(matches!(error, RejectError::TooLarge { .. }), "{error}");
        let error =
            Payload::from_configmap(&configmap(&[(POLICY_GZ_KEY, b"nope".to_vec())], None, None))
                .unwrap_err();
        assert!(matches!(error, RejectError::Gunzip(_)), "{error}");
        let error = Payload::from_configmap(&configmap(&[], None, None)).unwrap_err();
        assert!(matches!(error, RejectError::Missing), "{error}");
        let error = Payload::from_configmap(&configmap(
            &[(POLICY_KEY, vec![0]), (POLICY_GZ_KEY, vec![0])],
            None,
            None,
        ))
        .unwrap_err();
        assert!(matches!(error, RejectError::Ambiguous), "{error}");
        let error = Payload::from_configmap(&configmap(&[(POLICY_KEY, vec![0])], None, Some("{")))
            .unwrap_err();
        assert!(matches!(error, RejectError::Config(_)), "{error}");
    }

    #[test]
    fn canary_snapshot_is_well_formed_and_carries_the_config() {
        let snapshot = canary_snapshot("{\"x\":1}");
        assert_eq!(snapshot.nodes.len(), 2);
        assert_eq!(snapshot.pending.len(), 2);
        assert_eq!(snapshot.config, "{\"x\":1}");
        // An empty decision list is valid: the canary accepts a policy that waits.
        assert!(validate(&snapshot, &[]).refused.is_empty());
    }
}
