//! `wasmgpu policy list` and `wasmgpu policy publish`: policy ConfigMaps in
//! a cluster (`policy_shadow.rs` shows a shadow's comparison).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::kube_client::{block_on, client};
use super::output_format::Output;
use super::table::Table;
use super::table::short;
use wasmgpu_api::policy::{
    COMPONENT_REF_KEY, CONFIG_KEY, DIGEST_ANNOTATION, POLICY_GZ_KEY, POLICY_KEY, POLICY_LABEL,
    POLICY_SELECTOR, PULL_SECRET_ANNOTATION, PolicyStatus, SHADOW_OF_ANNOTATION, STATUS_ANNOTATION,
};
use wasmgpu_controller::{ComponentSource, Payload};
use wasmgpu_engine::Digest;
use wasmgpu_oci::ComponentRef;

/// Field manager of `wasmgpu policy publish`.
pub(crate) const PUBLISH_MANAGER: &str = "wasmgpu-publish";
/// Components larger than this are stored gzip-compressed: a ConfigMap
/// holds at most 1 MiB in all.
pub(crate) const COMPRESS_ABOVE: usize = 900 << 10;

/// The namespace of the policy ConfigMaps: the flag, else $POD_NAMESPACE,
/// else `wasmgpu-system` (the controller's default).
pub(crate) fn namespace(flag: Option<String>) -> String {
    flag.or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "wasmgpu-system".into())
}

/// Which policy ConfigMap `publish` writes, and in which role.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// The policy's name (the ConfigMap's).
    pub(crate) name: String,
    /// The controller's policy namespace.
    pub(crate) namespace: String,
    /// The policy it shadows (none: it decides).
    pub(crate) shadow_of: Option<String>,
}

impl Target {
    /// Refuses a shadow of itself, as the controller would.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        if self.shadow_of.as_deref().map(str::trim) == Some(self.name.as_str()) {
            anyhow::bail!(
                "--shadow-of {0}: a policy cannot shadow itself; publish the candidate under \
                 another --name, e.g. --name {0}-next --shadow-of {0}",
                self.name
            );
        }
        if self
            .shadow_of
            .as_deref()
            .is_some_and(|p| p.trim().is_empty())
        {
            anyhow::bail!("--shadow-of: name the policy the shadow runs beside");
        }
        Ok(())
    }

    /// The annotations `publish` owns, besides the digest pin.
    fn annotations(&self) -> BTreeMap<String, String> {
        self.shadow_of
            .iter()
            .map(|p| (SHADOW_OF_ANNOTATION.to_string(), p.trim().to_string()))
            .collect()
    }

    /// ` as a shadow of PRIMARY`, or nothing.
    fn role(&self) -> String {
        self.shadow_of
            .as_deref()
            .map(|p| {
                format!(
                    " as a shadow of {p} (compared, never applied: `wasmgpu policy shadow {}`)",
                    self.name
                )
            })
            .unwrap_or_default()
    }
}

/// The ConfigMap `publish` applies.
pub(crate) fn policy_configmap(
    target: &Target,
    wasm: &[u8],
    config: Option<String>,
) -> anyhow::Result<ConfigMap> {
    let (name, namespace) = (target.name.as_str(), target.namespace.as_str());
    let digest = Digest::of(wasm);
    let (key, bytes) = if wasm.len() > COMPRESS_ABOVE {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(wasm)?;
        (POLICY_GZ_KEY, encoder.finish()?)
    } else {
        (POLICY_KEY, wasm.to_vec())
    };
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(POLICY_LABEL.into(), "true".into())])),
            annotations: Some(
                target
                    .annotations()
                    .into_iter()
                    .chain([(DIGEST_ANNOTATION.to_string(), digest.to_string())])
                    .collect(),
            ),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(key.into(), ByteString(bytes))])),
        data: config.map(|c| BTreeMap::from([(CONFIG_KEY.into(), c)])),
        ..Default::default()
    })
}

/// `wasmgpu policy publish`.
pub(crate) fn publish(
    file: &Path,
    config: Option<&Path>,
    target: &Target,
) -> anyhow::Result<ExitCode> {
    let (name, namespace) = (&target.name, &target.namespace);
    let wasm = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let config = read_config(config)?;
    let configmap = policy_configmap(target, &wasm, config)?;
    let digest = Digest::of(&wasm);
    let written = block_on(async {
        let api: Api<ConfigMap> = Api::namespaced(client().await?, namespace);
        write(&api, &configmap).await
    })?;
    // The controller's own check of what is now in the cluster: never report
    // a version it would refuse before even compiling it.
    match Payload::from_configmap(&written) {
        Ok(payload) if payload.digest == digest => {}
        Ok(payload) => anyhow::bail!(
            "ConfigMap {namespace}/{name} now holds {}, not {digest}: someone else wrote it at the same time; publish again",
            payload.digest
        ),
        Err(reason) => anyhow::bail!(
            "ConfigMap {namespace}/{name} was written, but the controller refuses it ({}): {reason}",
            reason.kind()
        ),
    }
    let compressed = configmap
        .binary_data
        .as_ref()
        .is_some_and(|b| b.contains_key(POLICY_GZ_KEY));
    super::stdout::println(&format!(
        "published {namespace}/{name}: {digest} ({} bytes{}){}",
        wasm.len(),
        if compressed { ", gzip-compressed" } else { "" },
        target.role()
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// `--config`, checked to be JSON.
fn read_config(config: Option<&Path>) -> anyhow::Result<Option<String>> {
    let Some(path) = config else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --config {}", path.display()))?;
    serde_json::from_str::<serde_json::Value>(&text)
        .with_context(|| format!("--config {} is not valid JSON", path.display()))?;
    Ok(Some(text))
}

/// The ConfigMap `publish --oci` applies.
pub(crate) fn policy_ref_configmap(
    target: &Target,
    reference: &ComponentRef,
    pull_secret: Option<&str>,
    config: Option<String>,
) -> ConfigMap {
    let (name, namespace) = (target.name.as_str(), target.namespace.as_str());
    let mut annotations = target.annotations();
    if let Some(secret) = pull_secret {
        annotations.insert(PULL_SECRET_ANNOTATION.to_string(), secret.to_string());
    }
    let mut data = BTreeMap::from([(COMPONENT_REF_KEY.to_string(), reference.to_string())]);
    if let Some(config) = config {
        data.insert(CONFIG_KEY.into(), config);
    }
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(POLICY_LABEL.into(), "true".into())])),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// `wasmgpu policy publish --oci REF`.
pub(crate) fn publish_ref(
    reference: &str,
    pull_secret: Option<&str>,
    config: Option<&Path>,
    target: &Target,
) -> anyhow::Result<ExitCode> {
    let (name, namespace) = (target.name.as_str(), target.namespace.as_str());
    let reference = ComponentRef::parse_pinned(reference).context("--oci")?;
    let config = read_config(config)?;
    let configmap = policy_ref_configmap(target, &reference, pull_secret, config);
    let written = block_on(async {
        let api: Api<ConfigMap> = Api::namespaced(client().await?, namespace);
        drop_inline_component(&api, name).await.with_context(|| {
            format!("removing the component ConfigMap {namespace}/{name} carries")
        })?;
        write(&api, &configmap).await
    })?;
    match ComponentSource::of(&written) {
        Ok(ComponentSource::Registry { reference: got, .. }) if got == reference => {}
        Ok(_) => anyhow::bail!(
            "ConfigMap {namespace}/{name} does not name {reference} after the write: someone else wrote it at the same time; publish again"
        ),
        Err(reason) => anyhow::bail!(
            "ConfigMap {namespace}/{name} was written, but the controller refuses it ({}): {reason}",
            reason.kind()
        ),
    }
    super::stdout::println(&format!(
        "published {namespace}/{name}: {reference}{} (the controller pulls it; `wasmgpu policy list` shows the result)",
        target.role()
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// Removes the component an existing ConfigMap carries in binaryData (and
/// its pin), in one write guarded by the `resourceVersion` read: an apply
/// cannot remove keys another field manager wrote, and the controller
/// refuses a ConfigMap that both carries and names a component.
async fn drop_inline_component(api: &Api<ConfigMap>, name: &str) -> Result<(), kube::Error> {
    let Some(existing) = api.get_opt(name).await? else {
        return Ok(());
    };
    if existing.binary_data.as_ref().is_none_or(|b| b.is_empty()) {
        return Ok(());
    }
    let mut ops = vec![
        json!({ "op": "test", "path": "/metadata/resourceVersion", "value": existing.resource_version() }),
        json!({ "op": "remove", "path": "/binaryData" }),
    ];
    if existing.annotations().contains_key(DIGEST_ANNOTATION) {
        let pointer = DIGEST_ANNOTATION.replace('~', "~0").replace('/', "~1");
        ops.push(json!({ "op": "remove", "path": format!("/metadata/annotations/{pointer}") }));
    }
    let patch = Patch::<()>::Json(
        serde_json::from_value(serde_json::Value::Array(ops)).map_err(kube::Error::SerdeError)?,
    );
    let params = PatchParams {
        field_manager: Some(PUBLISH_MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &patch).await?;
    Ok(())
}

/// How many times a payload key swap is tried when the ConfigMap changes
/// between reading and patching it.
const SWAP_ATTEMPTS: usize = 3;

/// Writes `configmap` by server-side apply; returns the object written.
///
/// An apply removes only the keys its own field manager set, and the
/// controller refuses a ConfigMap with both `policy.wasm` and
/// `policy.wasm.gz`. So when the existing ConfigMap holds the other payload
/// key (written by kubectl, or by an earlier publish of the other size), one
/// JSON patch first swaps it for the new component, with its pin, in a
/// single write guarded by the `resourceVersion` read: the controller never
/// sees both keys, nor neither.
async fn write(api: &Api<ConfigMap>, configmap: &ConfigMap) -> anyhow::Result<ConfigMap> {
    let name = configmap.name_any();
    let namespace = configmap.namespace().unwrap_or_default();
    for attempt in 1..=SWAP_ATTEMPTS {
        match swap_payload_key(api, configmap).await {
            Ok(()) => break,
            Err(kube::Error::Api(status))
                if (status.is_conflict() || status.code == 422) && attempt < SWAP_ATTEMPTS =>
            {
                continue;
            }
            Err(error) => {
                return Err(error).with_context(|| {
                    format!("replacing the other payload key of ConfigMap {namespace}/{name}")
                });
            }
        }
    }
    let mut value = serde_json::to_value(configmap)?;
    value["apiVersion"] = "v1".into();
    value["kind"] = "ConfigMap".into();
    api.patch(
        &name,
        &PatchParams::apply(PUBLISH_MANAGER).force(),
        &Patch::Apply(&value),
    )
    .await
    .map_err(|error| explain(error, &namespace))
    .with_context(|| format!("applying ConfigMap {namespace}/{name}"))
}

/// An API error in words a user can act on, when it is a common one.
fn explain(error: kube::Error, namespace: &str) -> anyhow::Error {
    match &error {
        kube::Error::Api(status)
            if status.is_not_found() && status.message.contains("namespaces") =>
        {
            anyhow::anyhow!(
                "namespace {namespace} does not exist: install the controller there \
                 (kubectl apply --server-side -k deploy/), or give the namespace it watches \
                 with --namespace (its --policy-namespace)"
            )
        }
        kube::Error::Api(status) if status.is_forbidden() => anyhow::anyhow!(
            "not allowed to write ConfigMaps in namespace {namespace} ({}): publishing needs \
             get, create and patch on configmaps there",
            status.message
        ),
        _ => anyhow::Error::new(error),
    }
}

/// When the existing ConfigMap holds the payload key `configmap` does not
/// use, replaces it by the new one (one guarded JSON patch).
async fn swap_payload_key(api: &Api<ConfigMap>, configmap: &ConfigMap) -> Result<(), kube::Error> {
    let name = configmap.name_any();
    let Some(existing) = api.get_opt(&name).await? else {
        return Ok(());
    };
    let Some(ops) = payload_swap(&existing, configmap) else {
        return Ok(());
    };
    // `Patch::Json` holds a `json_patch::Patch`, deserialised from the ops.
    let patch = Patch::<()>::Json(serde_json::from_value(ops).map_err(kube::Error::SerdeError)?);
    let params = PatchParams {
        field_manager: Some(PUBLISH_MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch(&name, &params, &patch).await?;
    tracing::info!(
        namespace = %configmap.namespace().unwrap_or_default(),
        %name,
        "Replaced the other payload key"
    );
    Ok(())
}

/// The JSON patch (RFC 6902) that turns `existing`, when it holds the other
/// payload key than `wanted`, into a ConfigMap with `wanted`'s component and
/// pin (and config, when `wanted` has one); `None` when there is nothing to
/// swap. It fails if the object changed since it was read.
pub(crate) fn payload_swap(existing: &ConfigMap, wanted: &ConfigMap) -> Option<serde_json::Value> {
    let wanted_binary = wanted.binary_data.as_ref()?;
    let (key, bytes) = wanted_binary.iter().next()?;
    let other = if key == POLICY_KEY {
        POLICY_GZ_KEY
    } else {
        POLICY_KEY
    };
    if !existing
        .binary_data
        .as_ref()
        .is_some_and(|b| b.contains_key(other))
    {
        return None;
    }
    let pointer = |segment: &str| segment.replace('~', "~0").replace('/', "~1");
    let mut ops = vec![
        json!({ "op": "test", "path": "/metadata/resourceVersion",
                "value": existing.resource_version() }),
        json!({ "op": "remove", "path": format!("/binaryData/{}", pointer(other)) }),
        json!({ "op": "add", "path": format!("/binaryData/{}", pointer(key)), "value": bytes }),
    ];
    let mut set = |map_path: &str, present: bool, entries: Option<&BTreeMap<String, String>>| {
        let Some(entries) = entries else { return };
        if present {
            for (k, v) in entries {
                ops.push(json!({ "op": "add", "path": format!("{map_path}/{}", pointer(k)), "value": v }));
            }
        } else {
            ops.push(json!({ "op": "add", "path": map_path, "value": entries }));
        }
    };
    set(
        "/metadata/annotations",
        existing.metadata.annotations.is_some(),
        wanted.metadata.annotations.as_ref(),
    );
    set("/data", existing.data.is_some(), wanted.data.as_ref());
    Some(serde_json::Value::Array(ops))
}

/// One row of `policy list`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    name: String,
    published_digest: Option<String>,
    /// The ConfigMap's `wasmgpu.io/shadow-of` (the status's `shadowOf` is
    /// what the controller has loaded).
    #[serde(rename = "shadowOfAnnotation", skip_serializing_if = "Option::is_none")]
    shadow_of: Option<String>,
    #[serde(flatten)]
    status: PolicyStatus,
}

/// `wasmgpu policy list`.
pub(crate) fn list(namespace: String, output: Output) -> anyhow::Result<ExitCode> {
    let configmaps = block_on(async {
        let api: Api<ConfigMap> = Api::namespaced(client().await?, &namespace);
        let list = api
            .list(&ListParams::default().labels(POLICY_SELECTOR))
            .await
            .with_context(|| format!("listing policy ConfigMaps in {namespace}"))?;
        anyhow::Ok(list.items)
    })?;
    let rows: Vec<Listed> = configmaps
        .iter()
        .map(|c| Listed {
            name: c.name_any(),
            published_digest: c.annotations().get(DIGEST_ANNOTATION).cloned(),
            shadow_of: c.annotations().get(SHADOW_OF_ANNOTATION).cloned(),
            status: c
                .annotations()
                .get(STATUS_ANNOTATION)
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or_default(),
        })
        .collect();
    match output {
        Output::Json => super::stdout::json(&rows)?,
        Output::Table => {
            let mut table = Table::new(&[
                "NAME",
                "SHADOW-OF",
                "ACTIVE",
                "VERSION",
                "CONFIG",
                "LOADED",
                "LAST ERROR",
            ]);
            let none = || "-".to_string();
            for row in rows {
                let shadow_of = shadow_of_cell(row.shadow_of.as_deref(), &row.status);
                if row.status == PolicyStatus::default() {
                    table.row(vec![
                        row.name,
                        shadow_of,
                        none(),
                        none(),
                        none(),
                        none(),
                        "not yet loaded by a controller (is one running, watching this namespace?)"
                            .into(),
                    ]);
                    continue;
                }
                table.row(vec![
                    row.name,
                    shadow_of,
                    row.status.active_digest.map_or_else(none, |d| short(&d)),
                    row.status.active_version.unwrap_or_else(none),
                    row.status
                        .active_config_digest
                        .map_or_else(none, |d| short(&d)),
                    row.status.loaded_at.unwrap_or_else(none),
                    row.status.last_error.unwrap_or_else(none),
                ]);
            }
            super::stdout::print(&table.render())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The SHADOW-OF cell: the primary the controller has the active version
/// shadow, and the annotation's when it asks for another role (the
/// controller has not acted on it yet, or rejected that version).
fn shadow_of_cell(annotation: Option<&str>, status: &PolicyStatus) -> String {
    let active = status.shadow_of.as_deref();
    if status.active_digest.is_none() || annotation == active {
        return annotation.unwrap_or("-").to_string();
    }
    format!(
        "{} (asks: {})",
        active.unwrap_or("-"),
        annotation.unwrap_or("decide")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_configmaps_load_back_compressed_or_not() {
        for size in [1000, COMPRESS_ABOVE + 1] {
            let wasm: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let target = Target {
                name: "p".into(),
                namespace: "ns".into(),
                shadow_of: None,
            };
            let configmap = policy_configmap(&target, &wasm, Some("{\"a\":1}".into())).unwrap();
            let key = if size > COMPRESS_ABOVE {
                POLICY_GZ_KEY
            } else {
                POLICY_KEY
            };
            assert!(configmap.binary_data.as_ref().unwrap().contains_key(key));
            let payload = Payload::from_configmap(&configmap).unwrap();
            assert_eq!(payload.wasm, wasm);
            assert_eq!(payload.digest, Digest::of(&wasm));
            assert_eq!(payload.config, "{\"a\":1}");
        }
    }

    #[test]
    fn published_shadows_carry_their_primary_and_never_themselves() {
        let target = Target {
            name: "spread-next".into(),
            namespace: "ns".into(),
            shadow_of: Some("binpack".into()),
        };
        target.check().unwrap();
        let configmap = policy_configmap(&target, b"\0asm", None).unwrap();
        let annotations = configmap.metadata.annotations.unwrap();
        assert_eq!(annotations[SHADOW_OF_ANNOTATION], "binpack");
        assert!(annotations.contains_key(DIGEST_ANNOTATION));
        let reference =
            ComponentRef::parse_pinned(&format!("oci://reg.example/p@sha256:{}", "a".repeat(64)))
                .unwrap();
        let named = policy_ref_configmap(&target, &reference, Some("creds"), None);
        let annotations = named.metadata.annotations.unwrap();
        assert_eq!(annotations[SHADOW_OF_ANNOTATION], "binpack");
        assert_eq!(annotations[PULL_SECRET_ANNOTATION], "creds");
        let itself = Target {
            shadow_of: Some("spread-next".into()),
            ..target
        };
        let error = itself.check().unwrap_err().to_string();
        assert!(error.contains("cannot shadow itself"), "{error}");
    }

    #[test]
    fn the_shadow_of_column_shows_a_role_change_not_yet_loaded() {
        let loaded = |shadow_of: Option<&str>| PolicyStatus {
            active_digest: Some("sha256:a".into()),
            shadow_of: shadow_of.map(Into::into),
            ..Default::default()
        };
        assert_eq!(
            shadow_of_cell(Some("binpack"), &loaded(Some("binpack"))),
            "binpack"
        );
        assert_eq!(shadow_of_cell(None, &loaded(None)), "-");
        assert_eq!(
            shadow_of_cell(None, &loaded(Some("binpack"))),
            "binpack (asks: decide)"
        );
        assert_eq!(
            shadow_of_cell(Some("binpack"), &PolicyStatus::default()),
            "binpack"
        );
    }
}
