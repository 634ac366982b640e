//! A policy ConfigMap's contents: where its component is (inline, or an
//! OCI reference the loader pulls through `registry.rs`), checked (size,
//! gunzip, digest pin, `config.json`), then loaded (compile, `describe()`)
//! and tried on a canary round. Pure but for the compile; the loader
//! (`configmaps.rs`) does the watching, the pulling and the writing.

use std::io::Read;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

use super::policies::ActivePolicy;
use wasmgpu_api::policy::{
    COMPONENT_REF_KEY, CONFIG_KEY, DIGEST_ANNOTATION, POLICY_GZ_KEY, POLICY_KEY,
    PULL_SECRET_ANNOTATION, SHADOW_OF_ANNOTATION,
};
use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::validate::validate_host;
use wasmgpu_engine::{Digest, Engine, LoadedPolicy, PolicyError};
use wasmgpu_oci::{ComponentRef, OciError};

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

/// Where a policy ConfigMap's component is.
#[derive(Clone, Debug)]
pub enum ComponentSource {
    /// In the ConfigMap (decompressed, size-checked).
    Inline(Vec<u8>),
    /// In an OCI registry, pinned by digest.
    Registry {
        /// The reference (`data["component.ref"]`).
        reference: ComponentRef,
        /// The Secret with the registry's credentials (and CA), if named.
        pull_secret: Option<String>,
    },
}

/// Why a policy ConfigMap's version was not activated.
#[derive(Debug, thiserror::Error)]
pub enum RejectError {
    /// No component in the ConfigMap.
    #[error(
        "the ConfigMap has no component: put it in binaryData {POLICY_KEY:?} or {POLICY_GZ_KEY:?}, \
         or name it in data {COMPONENT_REF_KEY:?} (oci://REGISTRY/REPOSITORY@sha256:<hex>)"
    )]
    Missing,
    /// Two components in the ConfigMap.
    #[error("{0}; keep one")]
    Ambiguous(&'static str),
    /// `component.ref` is not a pinned `oci://` reference.
    #[error("data {COMPONENT_REF_KEY:?}: {0}")]
    Reference(OciError),
    /// The component could not be pulled from its registry.
    #[error("cannot pull the component: {0}")]
    Pull(#[source] OciError),
    /// The pull Secret cannot be used.
    #[error("annotation {PULL_SECRET_ANNOTATION}: {0}")]
    PullSecret(String),
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
    /// The shadow annotation names the policy itself.
    #[error(
        "annotation {SHADOW_OF_ANNOTATION} names the policy itself ({0:?}): name the policy \
         it should run beside, or remove the annotation to make it decide"
    )]
    ShadowOfItself(String),
}

// === impl RejectError ===

impl RejectError {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            RejectError::Missing => "missing",
            RejectError::Ambiguous(_) => "ambiguous",
            RejectError::Reference(e) => e.kind(),
            RejectError::Pull(e) => e.kind(),
            RejectError::PullSecret(_) => "pull-secret",
            RejectError::TooLarge { .. } => "too-large",
            RejectError::Gunzip(_) => "gunzip",
            RejectError::DigestMismatch { .. } => "digest-mismatch",
            RejectError::Config(_) => "config",
            RejectError::Load(e) => e.kind(),
            RejectError::Canary(_) => "canary",
            RejectError::CanaryRefused(_) => "canary-refused",
            RejectError::ShadowOfItself(_) => "shadow-of-itself",
        }
    }
}

/// The primary a policy ConfigMap shadows, from its `wasmgpu.io/shadow-of`
/// annotation (none: the policy decides); a shadow of itself is refused.
pub fn shadow_of(configmap: &ConfigMap) -> Result<Option<String>, RejectError> {
    let Some(primary) = configmap
        .annotations()
        .get(SHADOW_OF_ANNOTATION)
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
    else {
        return Ok(None);
    };
    if primary == configmap.name_any() {
        return Err(RejectError::ShadowOfItself(primary.to_string()));
    }
    Ok(Some(primary.to_string()))
}

// === impl ComponentSource ===

impl ComponentSource {
    /// Where `configmap`'s component is; an inline one is read, checked
    /// and decompressed.
    pub fn of(configmap: &ConfigMap) -> Result<Self, RejectError> {
        let binary = configmap.binary_data.as_ref();
        let raw = binary.and_then(|b| b.get(POLICY_KEY));
        let gz = binary.and_then(|b| b.get(POLICY_GZ_KEY));
        let named = configmap
            .data
            .as_ref()
            .and_then(|d| d.get(COMPONENT_REF_KEY))
            .filter(|r| !r.trim().is_empty());
        if let Some(named) = named {
            if raw.is_some() || gz.is_some() {
                return Err(RejectError::Ambiguous(
                    "the ConfigMap both carries a component in binaryData and names one in data \"component.ref\"",
                ));
            }
            let reference = ComponentRef::parse_pinned(named).map_err(RejectError::Reference)?;
            let pull_secret = configmap
                .annotations()
                .get(PULL_SECRET_ANNOTATION)
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty());
            return Ok(ComponentSource::Registry {
                reference,
                pull_secret,
            });
        }
        let wasm = match (raw, gz) {
            (Some(_), Some(_)) => {
                return Err(RejectError::Ambiguous(
                    "binaryData has both \"policy.wasm\" and \"policy.wasm.gz\"",
                ));
            }
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
        Ok(ComponentSource::Inline(wasm))
    }
}

// === impl Payload ===

impl Payload {
    /// Reads, decompresses and checks a policy ConfigMap that carries its
    /// component (no compiling); one that names it in a registry is
    /// [`RejectError::Missing`] here: pull it, then call [`Payload::with_component`].
    pub fn from_configmap(configmap: &ConfigMap) -> Result<Self, RejectError> {
        match ComponentSource::of(configmap)? {
            ComponentSource::Inline(wasm) => Self::with_component(configmap, wasm),
            ComponentSource::Registry { .. } => Err(RejectError::Missing),
        }
    }

    /// Checks `wasm` as `configmap`'s component (digest pin, config.json).
    pub fn with_component(configmap: &ConfigMap, wasm: Vec<u8>) -> Result<Self, RejectError> {
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

/// The canary snapshot: two nodes of two NVLinked H100s (labelled with
/// their hostname), a one-GPU and a two-GPU pod, both free to go on either
/// node.
pub fn canary_snapshot(config: &str) -> HostSnapshot {
    use wasmgpu_contract::types::{
        Ask, Gpu, GpuShape, Node, PreemptionPolicy, Publisher, Request, Sharing, Snapshot,
    };
    use wasmgpu_contract::{HostNode, bits};
    let node = |name: &str| Node {
        name: name.to_owned(),
        labels: Vec::new(),
        gpus: (0..2u32)
            .map(|index| Gpu {
                index,
                model: 0,
                memory_mib: 81559,
                allocated_mib: 0,
                held: false,
                shared_owners: 0,
                numa_node: Some(0),
                nvlink: bits::nvlink_of([1 - index]),
                healthy: true,
                mig: None,
                published_by: Publisher::Agent,
            })
            .collect(),
    };
    let host = |name: &str| HostNode {
        labels: std::sync::Arc::new(
            [("kubernetes.io/hostname".to_owned(), name.to_owned())].into(),
        ),
        uuids: (0..2).map(|i| format!("GPU-{name}-{i}")).collect(),
        counters: Default::default(),
    };
    let request = |name: &str, count: u32, created_ms: u64| Request {
        pod: format!("wasmgpu-canary/{name}"),
        namespace: 0,
        tenant: None,
        priority: 0,
        preemption: PreemptionPolicy::PreemptLowerPriority,
        created_ms,
        eligible_set: 0,
        gang: None,
        ask: Ask::Gpus(GpuShape {
            count,
            model: None,
            mig_profile: None,
            memory_mib: 0,
            sharing: Sharing::Exclusive,
        }),
    };
    HostSnapshot {
        snapshot: Snapshot {
            round: 0,
            models: vec!["NVIDIA H100 80GB HBM3".to_owned()],
            namespaces: vec!["wasmgpu-canary".to_owned()],
            nodes: vec![node("canary-0"), node("canary-1")],
            pending: vec![request("pod-0", 1, 0), request("pod-1", 2, 1)],
            eligible_sets: vec![bits::from_indices(2, [0, 1])],
            config: config.to_owned(),
            ..Snapshot::default()
        },
        nodes: vec![host("canary-0"), host("canary-1")],
        resources: vec![
            Some("wasmgpu-canary/pod-0".to_owned()),
            Some("wasmgpu-canary/pod-1".to_owned()),
        ],
    }
}

/// Runs `policy` on the canary snapshot: the call must succeed and every
/// decision must be valid.
fn canary(policy: &LoadedPolicy, config: &str) -> Result<(), RejectError> {
    let mut snapshot = canary_snapshot(config);
    let given = snapshot.for_policy(&policy.info().label_keys);
    let round = policy.allocate(given).map_err(RejectError::Canary)?;
    let verdict = validate_host(&snapshot, &round.decisions);
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
        assert!(matches!(error, RejectError::Ambiguous(_)), "{error}");
        let error = Payload::from_configmap(&configmap(&[(POLICY_KEY, vec![0])], None, Some("{")))
            .unwrap_err();
        assert!(matches!(error, RejectError::Config(_)), "{error}");
    }

    #[test]
    fn a_component_ref_is_a_pinned_registry_source() {
        let digest = Digest::of(b"manifest").to_string();
        let mut named = configmap(&[], None, None);
        named.data = Some(BTreeMap::from([(
            COMPONENT_REF_KEY.into(),
            format!("oci://registry.example:5000/policies/p@{digest}"),
        )]));
        named.metadata.annotations = Some(BTreeMap::from([(
            PULL_SECRET_ANNOTATION.into(),
            "creds".into(),
        )]));
        match ComponentSource::of(&named).unwrap() {
            ComponentSource::Registry {
                reference,
                pull_secret,
            } => {
                assert_eq!(reference.digest(), Some(digest.as_str()));
                assert_eq!(pull_secret.as_deref(), Some("creds"));
            }
            other => panic!("{other:?}"),
        }
        // Not inline: the caller pulls it first.
        assert!(matches!(
            Payload::from_configmap(&named),
            Err(RejectError::Missing)
        ));
        let mut both = named.clone();
        both.binary_data = configmap(&[(POLICY_KEY, vec![0])], None, None).binary_data;
        let error = ComponentSource::of(&both).unwrap_err();
        assert!(matches!(error, RejectError::Ambiguous(_)), "{error}");
        let mut tagged = named;
        tagged.data = Some(BTreeMap::from([(
            COMPONENT_REF_KEY.into(),
            "oci://registry.example/policies/p:v1".into(),
        )]));
        let error = ComponentSource::of(&tagged).unwrap_err();
        assert_eq!(error.kind(), "not-pinned");
        assert!(error.to_string().contains("component.ref"), "{error}");
    }

    #[test]
    fn canary_snapshot_is_well_formed_and_carries_the_config() {
        let snapshot = canary_snapshot("{\"x\":1}");
        assert_eq!(snapshot.snapshot.nodes.len(), 2);
        assert_eq!(snapshot.snapshot.pending.len(), 2);
        assert_eq!(snapshot.snapshot.config, "{\"x\":1}");
        // It obeys every rule a controller's snapshot obeys.
        assert_eq!(wasmgpu_contract::snapshot_check::check(&snapshot), Ok(()));
        // An empty decision list is valid: the canary accepts a policy that waits.
        assert!(validate_host(&snapshot, &[]).refused.is_empty());
    }
}
