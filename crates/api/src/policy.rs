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
//!      wasmgpu.io/shadow-of     <primary policy>: run beside it, compared,
//!                               never applied (optional)
//!      wasmgpu.io/status        PolicyStatus as JSON (written by the controller)
//!      wasmgpu.io/shadow-status ShadowStatus as JSON (written by the controller,
//!                               on shadows only)
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

/// Annotation making a policy a shadow of the policy it names: called on
/// the same snapshot after that policy in every round it decides, its
/// decisions validated and compared, never applied.
pub const SHADOW_OF_ANNOTATION: &str = "wasmgpu.io/shadow-of";
/// Annotation asking the controller to keep the snapshots of the policy's
/// last N rounds (at most 20) in memory, for `wasmgpu policy snapshot
/// --recorded` (served at `/debug/rounds/…`).
pub const RECORD_ROUNDS_ANNOTATION: &str = "wasmgpu.io/record-rounds";
/// Annotation the controller writes on a shadow: [`ShadowStatus`] as JSON.
pub const SHADOW_STATUS_ANNOTATION: &str = "wasmgpu.io/shadow-status";
/// Rounds kept in [`ShadowStatus::recent`].
pub const SHADOW_ROUNDS_KEPT: usize = 10;
/// Differing pods kept per round in [`ShadowRound::differences`].
pub const SHADOW_DIFFERENCES_KEPT: usize = 5;

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
    /// sha256 of the active version's `config.json` (none: it has none), so
    /// that a change of parameters alone shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_config_digest: Option<String>,
    /// The policy the active version shadows (none: it decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_of: Option<String>,
}

/// How a shadow's decisions compared with its primary's, since this
/// version of the shadow (component and config) was first compared.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShadowStatus {
    /// The policy it shadows.
    pub primary: String,
    /// Digest of the shadow's version these counts are about.
    pub digest: String,
    /// sha256 of its `config.json` (none: it has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_digest: Option<String>,
    /// When counting started (RFC 3339).
    pub since: String,
    /// Rounds whose decisions were compared.
    pub rounds_compared: u64,
    /// Rounds whose shadow call failed (trap, fuel, deadline, bad output).
    pub rounds_failed: u64,
    /// Rounds skipped because the shadow's previous call was still running.
    pub rounds_skipped: u64,
    /// Pods by outcome, over all compared rounds.
    pub totals: ShadowCounts,
    /// The last round compared or failed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_round_at: Option<String>,
    /// Why the last failed call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When it failed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_at: Option<String>,
    /// The last rounds, oldest first (at most [`SHADOW_ROUNDS_KEPT`]).
    #[serde(default)]
    pub recent: Vec<ShadowRound>,
}

/// Pods by how the shadow's decision compared with the primary's.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShadowCounts {
    /// Placed by both on the same node and the same GPUs.
    pub same: u64,
    /// Placed by both on the same node, on other GPUs.
    pub same_node_other_gpus: u64,
    /// Placed by both, on different nodes.
    pub other_node: u64,
    /// Placed by the primary only (the shadow left it waiting, rejected
    /// it, or made a decision the host refused).
    pub primary_only: u64,
    /// Placed by the shadow only.
    pub shadow_only: u64,
    /// Decisions of the shadow the host refused (invalid).
    pub refused: u64,
}

/// One round of a shadow.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShadowRound {
    /// The controller's round number.
    pub round: u64,
    /// When it was compared (RFC 3339).
    pub at: String,
    /// Digest of the primary's version that decided.
    pub primary_digest: String,
    /// Pods pending in the round.
    pub pending: u64,
    /// The shadow call's time, in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_micros: Option<u64>,
    /// Pods by outcome (zero when the call failed).
    pub counts: ShadowCounts,
    /// Why the call failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Pods decided differently, by pod name (at most
    /// [`SHADOW_DIFFERENCES_KEPT`]).
    #[serde(default)]
    pub differences: Vec<ShadowDifference>,
    /// Differences beyond those kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_differences: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A pod the shadow decided differently.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShadowDifference {
    /// `namespace/name`.
    pub pod: String,
    /// `same-node-other-gpus`, `other-node`, `primary-only`, `shadow-only`,
    /// `refused`.
    pub outcome: String,
    /// Where the primary placed it (none: it did not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<PlacedOn>,
    /// Where the shadow placed it (none: it did not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<PlacedOn>,
    /// For `refused`: why the host refused the shadow's decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A node and GPUs a policy chose.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PlacedOn {
    /// The node.
    pub node: String,
    /// UUIDs of the GPUs, sorted.
    pub gpus: Vec<String>,
}
