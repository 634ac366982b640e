//! Policy ConfigMaps: watched in one namespace, checked, loaded, tried on a
//! canary round, and only then swapped in.
//!
//! ```text
//!  ConfigMap (wasmgpu.io/policy=true) ──▶ payload.rs: size, gunzip, digest pin, config.json
//!      (data component.ref: registry.rs pulls it first, verified and cached by digest)
//!      ──▶ compile + describe (blocking pool; the engine caches by digest)
//!      ──▶ canary allocate() on a small built-in snapshot, decisions validated
//!      ──▶ Policies::activate (atomic per name)  ──▶ Event PolicyLoaded, status annotation
//!          (annotated wasmgpu.io/shadow-of: Policies::activate_shadow: compared, never applied)
//!  any failure: the previous version stays ──▶ Event PolicyRejected, status annotation
//!  ConfigMap deleted ──▶ Policies::unload
//! ```
//!
//! Loads run one at a time, in the order the watch delivers them, so an
//! older version never overrides a newer one.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use super::connection::{Link, error_chain};
use super::events::{EventSink, Reason};
use super::load_plan::{self, config_digest};
use super::metrics::Metrics;
use super::payload::{ComponentSource, Payload, RejectError, shadow_of};
use super::policies::{ActivePolicy, Policies};
use super::recorder::{Recorder, parse_keep};
use super::registry::Puller;
use super::shadows::Shadows;
use super::watch::{Sink, WatchedIndex, follow};
use wasmgpu_api::policy::{
    COMPONENT_REF_KEY, CONFIG_KEY, DIGEST_ANNOTATION, POLICY_SELECTOR, PULL_SECRET_ANNOTATION,
    PolicyStatus, RECORD_ROUNDS_ANNOTATION, SHADOW_OF_ANNOTATION, SHADOW_STATUS_ANNOTATION,
    STATUS_ANNOTATION, ShadowStatus,
};
use wasmgpu_engine::{Cause, Digest, Engine, PolicyError};

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
    let mut inputs = json!({
        "binaryData": configmap.binary_data,
        "config": configmap.data.as_ref().and_then(|d| d.get(CONFIG_KEY)),
        "pin": configmap.annotations().get(DIGEST_ANNOTATION),
    });
    // Only when present: the fingerprints of ConfigMaps that carry their
    // component stay what they were.
    if let Some(reference) = configmap
        .data
        .as_ref()
        .and_then(|d| d.get(COMPONENT_REF_KEY))
    {
        inputs["ref"] = reference.as_str().into();
    }
    if let Some(secret) = configmap.annotations().get(PULL_SECRET_ANNOTATION) {
        inputs["pullSecret"] = secret.as_str().into();
    }
    if let Some(primary) = configmap.annotations().get(SHADOW_OF_ANNOTATION) {
        inputs["shadowOf"] = primary.as_str().into();
    }
    Digest::of(inputs.to_string().as_bytes())
}

/// Watches policy ConfigMaps and swaps the versions they carry in.
pub(super) struct Loader {
    pub(super) api: Api<ConfigMap>,
    pub(super) engine: Arc<Engine>,
    pub(super) policies: Arc<Policies>,
    pub(super) shared: Arc<WatchedIndex>,
    pub(super) events: EventSink,
    /// The inputs last tried per name.
    pub(super) name_to_tried: HashMap<String, Digest>,
    /// The status last written per name.
    pub(super) name_to_status: HashMap<String, PolicyStatus>,
    pub(super) metrics: Metrics,
    /// Every replica loads (a new leader decides at once); only the leader
    /// writes Events and the status annotation.
    pub(super) leader: watch::Receiver<bool>,
    /// Pulls the components ConfigMaps name by OCI reference.
    pub(super) puller: Puller,
    /// Keeps recent rounds of the policies whose ConfigMap asks for it.
    pub(super) recorder: Arc<Recorder>,
    /// Shadows' counts, resumed from their ConfigMaps' status annotation.
    pub(super) shadows: Shadows,
}

// === impl Loader ===

impl Loader {
    /// Feeds the ConfigMaps of the watch into the policies until the watch
    /// ends; returns the kind. Marks its kind listed once the first list is
    /// loaded.
    pub(super) async fn run(self, link: Link) -> &'static str {
        let config = watcher::Config::default().labels(POLICY_SELECTOR);
        let (api, shared) = (self.api.clone(), Arc::clone(&self.shared));
        follow(api, config, shared, link, self).await
    }

    /// Loads the version `configmap` carries, unless already tried: fetch
    /// and compile it, activate it or keep the active one, then send the
    /// Event and write the status [`load_plan`] words.
    async fn load(&mut self, configmap: &ConfigMap) {
        let name = configmap.name_any();
        self.record_rounds(&name, configmap);
        let fingerprint = fingerprint(configmap);
        if self.name_to_tried.get(&name) == Some(&fingerprint) {
            return;
        }
        self.name_to_tried.insert(name.clone(), fingerprint.clone());
        let started = Instant::now();
        let (shadow_of, result, last_digest) = self.fetch_and_compile(&name, configmap).await;
        let elapsed = started.elapsed();
        let leading = *self.leader.borrow();
        let now = Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)
            .unwrap_or_else(|_| Timestamp::now())
            .to_string();
        let previous = self.name_to_status.get(&name).cloned().unwrap_or_default();
        let (event, mut status) = match result {
            Ok(policy) => self.activate(&name, configmap, policy, shadow_of, elapsed, &now),
            Err(error) => self.reject(&name, &error, last_digest, previous, elapsed, &now),
        };
        self.event(leading, configmap, event.warning, event.reason, event.note);
        status.observed = Some(fingerprint.to_string());
        if leading {
            // A policy that stopped shadowing keeps no comparison of it.
            let stale = status.shadow_of.is_none()
                && configmap
                    .annotations()
                    .contains_key(SHADOW_STATUS_ANNOTATION);
            self.write_status(&name, &status, stale).await;
        }
        self.name_to_status.insert(name, status);
    }

    /// Makes a compiled version the active one (or a shadow's), and words
    /// what the ConfigMap is told.
    fn activate(
        &mut self,
        name: &str,
        configmap: &ConfigMap,
        policy: ActivePolicy,
        shadow_of: Option<String>,
        elapsed: Duration,
        now: &str,
    ) -> (load_plan::LoadEvent, PolicyStatus) {
        let digest = policy.loaded.digest().to_string();
        let version = described(&policy.loaded);
        let config_digest = config_digest(&policy.config);
        match &shadow_of {
            Some(primary) => {
                // Counts written before a restart (or by another
                // replica) go on where they were, for this version.
                if let Some(written) = written_shadow_status(configmap) {
                    self.shadows.resume(name, written);
                }
                self.policies.activate_shadow(policy, primary)
            }
            None => self.policies.activate(policy),
        }
        // A round decides what waited for this version.
        self.shared.changed.notify_one();
        tracing::info!(policy = %name, %digest, %version, shadow_of = ?shadow_of, ?elapsed, "Loaded policy from its ConfigMap");
        self.metrics.policy_load(name, "loaded");
        load_plan::loaded(load_plan::Loaded {
            digest: &digest,
            version: &version,
            config_digest,
            shadow_of,
            elapsed,
            now,
        })
    }

    /// Keeps the active version (if any) over one that cannot be used, and
    /// words what the ConfigMap is told.
    fn reject(
        &mut self,
        name: &str,
        error: &RejectError,
        last_digest: Option<String>,
        previous: PolicyStatus,
        elapsed: Duration,
        now: &str,
    ) -> (load_plan::LoadEvent, PolicyStatus) {
        let message = error_chain(error);
        tracing::warn!(policy = %name, kind = error.kind(), error = %message, ?elapsed, "Rejected a policy version");
        self.policies.reject(name, message.clone());
        self.metrics.policy_load(name, "rejected");
        let active = self.policies.get(name);
        let shadow = self.policies.shadow(name);
        let still = match (&active, &shadow) {
            (_, Some((primary, shadow))) => load_plan::StillActive::Shadowing {
                digest: shadow.loaded.digest().as_str(),
                primary,
            },
            (Some(active), None) => load_plan::StillActive::Deciding {
                digest: active.loaded.digest().as_str(),
                version: described(&active.loaded),
            },
            (None, None) => load_plan::StillActive::Nothing,
        };
        let rejected = load_plan::Rejected {
            kind: error.kind(),
            message: &message,
            digest: last_digest,
            still,
            now,
        };
        load_plan::rejected(rejected, previous)
    }

    /// Reads the component `configmap` carries (inline, or pulled from its
    /// registry) and compiles it with its config, on the blocking pool:
    /// the policy it shadows, the policy or why not, and the digest of the
    /// component when it was read.
    async fn fetch_and_compile(
        &self,
        name: &str,
        configmap: &ConfigMap,
    ) -> (
        Option<String>,
        Result<ActivePolicy, RejectError>,
        Option<String>,
    ) {
        let (shadow_of, source) = match shadow_of(configmap) {
            Ok(primary) => (primary, ComponentSource::of(configmap)),
            Err(error) => (None, Err(error)),
        };
        let payload = match source {
            Ok(ComponentSource::Inline(wasm)) => Payload::with_component(configmap, wasm),
            Ok(ComponentSource::Registry {
                reference,
                pull_secret,
            }) => self
                .puller
                .fetch(name, &reference, pull_secret.as_deref())
                .await
                .and_then(|wasm| Payload::with_component(configmap, wasm)),
            Err(error) => Err(error),
        };
        let last_digest = payload.as_ref().ok().map(|p| p.digest.to_string());
        let result = match payload {
            Ok(payload) => {
                let engine = Arc::clone(&self.engine);
                match tokio::task::spawn_blocking(move || payload.load(&engine)).await {
                    Ok(result) => result,
                    Err(error) => Err(RejectError::Load(PolicyError::Engine(Cause::msg(format!(
                        "the load panicked: {error}"
                    ))))),
                }
            }
            Err(error) => Err(error),
        };
        (shadow_of, result, last_digest)
    }

    /// Queues a load Event, when this replica leads.
    fn event(
        &self,
        leading: bool,
        configmap: &ConfigMap,
        warning: bool,
        reason: Reason,
        note: String,
    ) {
        if leading {
            self.events
                .distinct(configmap_ref(configmap), warning, reason, "Load", note);
        }
    }

    /// Starts, changes or stops recording the policy's rounds as its
    /// `wasmgpu.io/record-rounds` annotation says (read on every change:
    /// it takes effect without a reload).
    fn record_rounds(&self, name: &str, configmap: &ConfigMap) {
        let asked = configmap
            .annotations()
            .get(RECORD_ROUNDS_ANNOTATION)
            .map(String::as_str);
        let was = self.recorder.wants(name);
        match parse_keep(asked) {
            Ok(keep) => {
                self.recorder.keep(name, keep);
                if keep > 0 && !was {
                    tracing::info!(policy = %name, rounds = keep, "Recording the policy's rounds");
                } else if keep == 0 && was {
                    tracing::info!(policy = %name, "Stopped recording the policy's rounds");
                }
            }
            Err(message) => {
                self.recorder.keep(name, 0);
                tracing::warn!(policy = %name, %message, "Not recording the policy's rounds");
                self.event(
                    *self.leader.borrow(),
                    configmap,
                    true,
                    Reason::InvalidAnnotation,
                    message,
                );
            }
        }
    }

    /// Unloads the version of a deleted ConfigMap.
    fn remove(&mut self, name: &str) {
        self.recorder.keep(name, 0);
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

    /// Writes `status` to the ConfigMap's status annotation; removes its
    /// shadow status when `drop_shadow_status`.
    async fn write_status(&self, name: &str, status: &PolicyStatus, drop_shadow_status: bool) {
        let value = serde_json::to_string(status).expect("a status serializes");
        let mut patch = json!({ "metadata": { "annotations": { STATUS_ANNOTATION: value } } });
        if drop_shadow_status {
            patch["metadata"]["annotations"][SHADOW_STATUS_ANNOTATION] = serde_json::Value::Null;
        }
        if let Err(error) = self
            .api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(kind = "ConfigMap", policy = %name, error = %error_chain(&error), "Cannot write the policy status annotation");
        }
    }
}

/// A list loads every ConfigMap in it and unloads the versions of those
/// gone while the watch was away.
impl Sink<ConfigMap> for Loader {
    async fn reset(&mut self, configmaps: Vec<ConfigMap>) {
        let names: BTreeSet<String> = configmaps.iter().map(|c| c.name_any()).collect();
        for configmap in configmaps {
            self.load(&configmap).await;
        }
        for name in self.policies.configmap_names() {
            if !names.contains(&name) {
                self.remove(&name);
            }
        }
        for name in self.recorder.list().into_keys() {
            if !names.contains(&name) {
                self.recorder.keep(&name, 0);
            }
        }
        tracing::debug!(configmaps = names.len(), "Listed policy ConfigMaps");
    }

    async fn apply(&mut self, configmap: ConfigMap) {
        self.load(&configmap).await;
    }

    async fn delete(&mut self, configmap: ConfigMap) {
        self.remove(&configmap.name_any());
    }
}

/// What a loaded policy says it is: `describe()`'s name and version.
/// The shadow counts written on `configmap` (annotation
/// `wasmgpu.io/shadow-status`), when there are any that parse; unreadable
/// ones are started afresh, as counts of an unknown version would be.
fn written_shadow_status(configmap: &ConfigMap) -> Option<ShadowStatus> {
    let text = configmap.annotations().get(SHADOW_STATUS_ANNOTATION)?;
    match serde_json::from_str(text) {
        Ok(status) => Some(status),
        Err(error) => {
            tracing::warn!(policy = %configmap.name_any(), %error, "Shadow status annotation unreadable; counting afresh");
            None
        }
    }
}

fn described(policy: &wasmgpu_engine::LoadedPolicy) -> String {
    let info = policy.info();
    format!("{} {}", info.name, info.version)
}
