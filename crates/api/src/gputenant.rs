//! `GPUTenant`: namespaces that share a quota of GPUs (a queue).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use wasmgpu_contract::glob_match;

use crate::selector;

/// A tenant: the pods of its namespaces share `quota` guaranteed GPUs, may
/// never hold more than `limit`, and split what is beyond the quotas by
/// `weight`. Cluster-scoped.
///
/// The host enforces `limit` itself: a decision taking the tenant past it
/// is refused. `quota` lets a tenant under it reclaim GPUs from tenants over
/// theirs (a policy decides; the host checks). Its namespaces are those
/// one of `namespaces`' globs matches or whose labels `namespaceSelector`
/// selects; a namespace matched by several tenants belongs to the one whose
/// name sorts first.
// The printer columns repeat `type_` values, which clippy takes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "wasmgpu.io",
    version = "v1alpha1",
    kind = "GPUTenant",
    plural = "gputenants",
    shortname = "gput",
    category = "wasmgpu",
    status = "GPUTenantStatus",
    derive = "PartialEq",
    doc = "Namespaces that share a quota of GPUs: guaranteed (quota), at most (limit), and a weight for the rest.",
    printcolumn(name = "Quota", type_ = "integer", json_path = ".spec.quota"),
    printcolumn(name = "Limit", type_ = "integer", json_path = ".spec.limit"),
    printcolumn(
        name = "Holding",
        type_ = "integer",
        description = "GPUs its pods hold (a MIG instance or a share counts as one)",
        json_path = ".status.holding"
    ),
    printcolumn(
        name = "Waiting",
        type_ = "integer",
        description = "GPUs its pending pods ask for",
        json_path = ".status.waiting"
    ),
    printcolumn(
        name = "OverLimit",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"OverLimit\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new(
    "(has(self.namespaces) && size(self.namespaces) > 0) || has(self.namespaceSelector)"
).message("name the tenant's namespaces: globs in namespaces (e.g. [\"team-a-*\"]), a namespaceSelector, or both"))]
#[x_kube(validation = Rule::new(
    "!has(self.limit) || !has(self.quota) || self.quota <= self.limit"
).message("quota is above limit: a tenant cannot be guaranteed more GPUs than it may hold"))]
#[serde(rename_all = "camelCase")]
pub struct GPUTenantSpec {
    /// Namespace globs (`*`, `?`, case-sensitive), e.g. `team-a-*`. This,
    /// `namespaceSelector`, or both.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub namespaces: Vec<String>,

    /// Namespaces by their labels, e.g. `matchLabels: {team: a}`: a
    /// namespace it selects belongs to the tenant as if a glob matched it
    /// (`{}` selects every namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// GPUs guaranteed: while it holds fewer, it may reclaim GPUs from
    /// tenants holding more than their own quota. 0 when unset.
    #[serde(default)]
    #[schemars(range(max = 1_000_000))]
    pub quota: u32,

    /// The most GPUs its pods may hold at once; unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1_000_000))]
    pub limit: Option<u32>,

    /// Its share of the GPUs beyond the quotas, relative to the other
    /// tenants' weights; 1 when unset.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1000))]
    pub weight: u32,

    /// Seconds a pod of the tenant keeps its GPUs before it may be preempted
    /// or reclaimed, counted from its start (`status.startTime`, else its creation); unset: the controller's
    /// `--min-runtime` (0 by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 604_800))]
    pub min_runtime_seconds: Option<u32>,
}

fn one() -> u32 {
    1
}

/// What the controller saw of a tenant at its last round.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GPUTenantStatus {
    /// GPUs its pods hold (a MIG instance or a share counts as one),
    /// nominated preemptors and reserved gang members included.
    #[serde(default)]
    pub holding: u32,
    /// GPUs its pending pods ask for.
    #[serde(default)]
    pub waiting: u32,
    /// Its pods holding GPUs.
    #[serde(default)]
    pub pods_holding: u32,
    /// Its pods waiting for GPUs.
    #[serde(default)]
    pub pods_waiting: u32,
    /// The namespaces of pods seen that belong to it, sorted (at most 100).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces_seen: Vec<String>,
    /// The `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `OverLimit` (it holds more than `limit`: a limit lowered under it;
    /// its pods keep their GPUs, new ones wait) and `OverQuota` (it holds
    /// more than `quota`: GPUs beyond it may be reclaimed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

// === impl GPUTenantSpec ===

impl GPUTenantSpec {
    /// Whether `namespace`, labelled `labels` (none while the namespace is
    /// unknown), is the tenant's: a glob matches its name, or the selector
    /// its labels.
    pub fn matches(&self, namespace: &str, labels: Option<&BTreeMap<String, String>>) -> bool {
        self.namespaces
            .iter()
            .any(|glob| glob_match(glob, namespace))
            || self
                .namespace_selector
                .as_ref()
                .zip(labels)
                .is_some_and(|(selector, labels)| selector::selects(selector, labels))
    }

    /// Whether the tenant chooses namespaces by their labels.
    pub fn selects_by_labels(&self) -> bool {
        self.namespace_selector.is_some()
    }

    /// Checks what the controller relies on, whether or not the API server
    /// enforced the schema (an object stored before the CRD's rules were).
    pub fn check(&self) -> Result<(), crate::gpuresource::InvalidSpec> {
        if self.namespaces.is_empty() && self.namespace_selector.is_none() {
            return Err(crate::gpuresource::InvalidSpec {
                field: "namespaces",
                reason: "name the tenant's namespaces: globs (e.g. \"team-a-*\"), a namespaceSelector, or both".into(),
            });
        }
        if let Some(selector) = &self.namespace_selector {
            selector::check(selector).map_err(|reason| crate::gpuresource::InvalidSpec {
                field: "namespaceSelector",
                reason,
            })?;
        }
        if let Some(k) = self.namespaces.iter().position(|n| n.trim().is_empty()) {
            return Err(crate::gpuresource::InvalidSpec {
                field: "namespaces",
                reason: format!("namespaces[{k}] is empty; give a namespace or a glob"),
            });
        }
        if self.weight == 0 {
            return Err(crate::gpuresource::InvalidSpec {
                field: "weight",
                reason: "must be 1 or more".into(),
            });
        }
        if let Some(limit) = self.limit
            && self.quota > limit
        {
            return Err(crate::gpuresource::InvalidSpec {
                field: "quota",
                reason: format!(
                    "{} is above limit {limit}: a tenant cannot be guaranteed more GPUs than it may hold",
                    self.quota
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(namespaces: &[&str]) -> GPUTenantSpec {
        GPUTenantSpec {
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            namespace_selector: None,
            quota: 4,
            limit: Some(8),
            weight: 1,
            min_runtime_seconds: None,
        }
    }

    #[test]
    fn globs_match_namespaces() {
        let tenant = spec(&["research", "research-*"]);
        assert!(tenant.matches("research", None));
        assert!(tenant.matches("research-vision", None));
        assert!(!tenant.matches("researchers", None));
    }

    #[test]
    fn a_selector_matches_namespaces_by_their_labels() {
        let tenant = GPUTenantSpec {
            namespace_selector: Some(LabelSelector {
                match_labels: Some([("team".to_owned(), "a".to_owned())].into()),
                ..Default::default()
            }),
            ..spec(&["legacy-a"])
        };
        let team_a: BTreeMap<String, String> = [("team".to_owned(), "a".to_owned())].into();
        let team_b: BTreeMap<String, String> = [("team".to_owned(), "b".to_owned())].into();
        assert!(tenant.matches("vision", Some(&team_a)));
        assert!(!tenant.matches("vision", Some(&team_b)));
        assert!(
            !tenant.matches("vision", None),
            "an unknown namespace has no labels"
        );
        assert!(
            tenant.matches("legacy-a", Some(&team_b)),
            "globs still match"
        );
        let only_selector = GPUTenantSpec {
            namespaces: Vec::new(),
            ..tenant
        };
        assert_eq!(only_selector.check(), Ok(()));
    }

    #[test]
    fn check_names_the_bad_field() {
        assert_eq!(spec(&["a"]).check(), Ok(()));
        let error = spec(&[]).check().unwrap_err();
        assert_eq!(error.field, "namespaces");
        assert!(error.to_string().contains("namespaceSelector"), "{error}");
        assert_eq!(spec(&["a", " "]).check().unwrap_err().field, "namespaces");
        let over = GPUTenantSpec {
            quota: 9,
            ..spec(&["a"])
        };
        let error = over.check().unwrap_err();
        assert_eq!(error.field, "quota");
        assert!(error.to_string().contains("above limit 8"), "{error}");
    }

    #[test]
    fn defaults_follow_the_api() {
        let spec: GPUTenantSpec =
            serde_json::from_value(serde_json::json!({"namespaces": ["a"]})).unwrap();
        assert_eq!((spec.quota, spec.limit, spec.weight), (0, None, 1));
    }
}
