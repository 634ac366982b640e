//! Where a pod may run at all: node selector, required node affinity, taints.
//!
//! The same rules as the Kubernetes scheduler's `NodeAffinity` and
//! `TaintToleration` filters, for the fields wasmgpu honours. Readiness and
//! cordoning are the node's own business (`NodeFacts::schedulable`).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};

use crate::facts::node::NodeFacts;
use crate::facts::pod::PodFacts;

/// Why a pod may not run on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ineligible {
    /// The pod's `nodeSelector` wants `key=value`.
    NodeSelector {
        /// The label key.
        key: String,
        /// The value wanted.
        value: String,
    },
    /// No term of the pod's required node affinity matches.
    Affinity,
    /// A `NoSchedule`/`NoExecute` taint the pod does not tolerate.
    Taint {
        /// The taint as `key=value:Effect`.
        taint: String,
    },
}

impl fmt::Display for Ineligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NodeSelector { key, value } => write!(f, "nodeSelector wants {key}={value}"),
            Self::Affinity => f.write_str("required node affinity does not match"),
            Self::Taint { taint } => write!(f, "taint {taint} not tolerated"),
        }
    }
}

/// Checks the pod's own constraints against a node: `nodeSelector`, required
/// node affinity, and `NoSchedule`/`NoExecute` taints.
pub(crate) fn check(pod: &PodFacts, node_name: &str, node: &NodeFacts) -> Result<(), Ineligible> {
    if let Some((key, value)) = pod
        .node_selector
        .iter()
        .find(|(key, value)| node.labels.get(*key) != Some(*value))
    {
        return Err(Ineligible::NodeSelector {
            key: key.clone(),
            value: value.clone(),
        });
    }
    if let Some(terms) = &pod.required_terms
        && !terms
            .iter()
            .any(|term| term_matches(term, node_name, &node.labels))
    {
        return Err(Ineligible::Affinity);
    }
    if let Some(taint) = node
        .taints
        .iter()
        .filter(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .find(|t| !pod.tolerations.iter().any(|tol| tolerates(tol, t)))
    {
        let value = taint.value.as_deref().unwrap_or_default();
        return Err(Ineligible::Taint {
            taint: format!("{}={value}:{}", taint.key, taint.effect),
        });
    }
    Ok(())
}

/// A node selector term: all its expressions and fields match. A term with
/// neither matches nothing.
pub(crate) fn term_matches(
    term: &NodeSelectorTerm,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let node_fields = BTreeMap::from([("metadata.name".to_string(), node_name.to_string())]);
    expressions.iter().all(|r| requirement_matches(r, labels))
        && fields.iter().all(|r| requirement_matches(r, &node_fields))
}

/// One requirement: `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`.
/// An unknown operator matches nothing.
fn requirement_matches(req: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&req.key);
    let values = req.values.as_deref().unwrap_or_default();
    let compare = |ordering: std::cmp::Ordering| {
        let (Some(value), [bound]) = (value, values) else {
            return false;
        };
        match (value.parse::<i64>(), bound.parse::<i64>()) {
            (Ok(value), Ok(bound)) => value.cmp(&bound) == ordering,
            _ => false,
        }
    };
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => compare(std::cmp::Ordering::Greater),
        "Lt" => compare(std::cmp::Ordering::Less),
        _ => false,
    }
}

/// Whether a toleration tolerates a taint: the effect is empty or equal; the
/// key is empty (with `Exists`: every taint) or equal; and `Exists` matches
/// any value, `Equal` (the default) the same value, `Gt`/`Lt` a taint value
/// greater/less than the toleration's, as integers.
fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    if key.is_empty() {
        return operator == "Exists";
    }
    if key != taint.key {
        return false;
    }
    let wanted = toleration.value.as_deref().unwrap_or_default();
    let actual = taint.value.as_deref().unwrap_or_default();
    let numbers = || Some((actual.parse::<i64>().ok()?, wanted.parse::<i64>().ok()?));
    match operator {
        "Exists" => true,
        "Equal" => wanted == actual,
        "Gt" => numbers().is_some_and(|(actual, wanted)| actual > wanted),
        "Lt" => numbers().is_some_and(|(actual, wanted)| actual < wanted),
        _ => false,
    }
}
