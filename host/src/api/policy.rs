//! Policy ConfigMaps: the names the controller and `wasmgpu policy
//! list/publish` agree on, and the status the controller writes back.
//!
//! ```text
//!  ConfigMap <policy name>            (label wasmgpu.io/policy=true)
//!    binaryData: policy.wasm | policy.wasm.gz   the component, or instead
//!    data:       component.ref                  oci://registry/repo@sha256:<manifest>
//!                config.json                    snapshot.config (optional)
//!    annotations:
//!      wasmgpu.io/sha256        sha256:<hex> of the component (optional pin)
//!      wasmgpu.io/pull-secret   Secret (kubernetes.io/dockerconfigjson, optional
//!                               ca.crt) for component.ref's registry (optional)
//!      wasmgpu.io/status   PolicyStatus as JSON (written by the controller)
//! ```

use serde::{Deserialize, Serialize};

/// Label that marks a ConfigMap as a policy.
pub const POLICY_LABEL: &str = "wasmgpu.io/policy";
/// `POLICY_LABEL=true`, as a label selector.
pub const POLICY_SELECTOR: &str = "wasmgpu.io/policy=true";
/// Key of the component in `binaryData`.
pub const POLICY_KEY: &str = "policy.wasm";
/// Key of the gzip-compressed component in `binaryData`.
pub const POLICY_GZ_KEY: &str = "policy.wasm.gz";
/// Key in `data` naming the component in an OCI registry, pinned by its
/// manifest digest (`oci://registry/repository@sha256:<hex>`), instead of
/// carrying it in `binaryData`.
pub const COMPONENT_REF_KEY: &str = "component.ref";
/// Annotation naming the Secret (same namespace, type
/// `kubernetes.io/dockerconfigjson`) with the credentials for the registry of
/// [`COMPONENT_REF_KEY`]; its optional `ca.crt` key is a PEM bundle of CAs to
/// trust for that registry.
pub const PULL_SECRET_ANNOTATION: &str = "wasmgpu.io/pull-secret";
/// Key of a pull Secret holding a PEM bundle of CAs to trust.
pub const PULL_SECRET_CA_KEY: &str = "ca.crt";
/// Key of the policy's parameters in `data`.
pub const CONFIG_KEY: &str = "config.json";
/// Annotation pinning the component's digest (`sha256:<hex>`).
pub const DIGEST_ANNOTATION: &str = "wasmgpu.io/sha256";
/// Annotation the controller writes: [`PolicyStatus`] as JSON.
pub const STATUS_ANNOTATION: &str = "wasmgpu.io/status";

/// What the controller last did with a policy ConfigMap.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// Which inputs this status is about: the sha256 of the ConfigMap's
    /// component, config.json and pin, as the controller computes it
    /// (`wasmgpu::controller::fingerprint`); a publisher compares it to
    /// know the controller has acted on its latest change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<String>,
    /// Digest of the version that decides now (none: nothing loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_digest: Option<String>,
    /// `describe()` name and version of the active version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_version: Option<String>,
    /// When the active version was loaded (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_at: Option<String>,
    /// Digest of the last version tried (active or rejected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_digest: Option<String>,
    /// Why the last version tried was rejected (none: it was loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the last version was rejected (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_at: Option<String>,
}
