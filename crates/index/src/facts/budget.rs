//! What the index keeps of a `PodDisruptionBudget`: whom it selects, and
//! whether it allows a disruption now.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// What the index keeps of a budget.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct BudgetFacts {
    /// `spec.selector`; none selects no pod.
    pub selector: Option<LabelSelector>,
    /// It allows at least one disruption now.
    pub allows: bool,
}

impl BudgetFacts {
    pub fn of(budget: &PodDisruptionBudget) -> BudgetFacts {
        let spec = budget.spec.as_ref();
        let status = budget.status.as_ref();
        let generation = budget.metadata.generation.unwrap_or(0);
        let current = status.is_some_and(|s| s.observed_generation.unwrap_or(0) >= generation);
        BudgetFacts {
            selector: spec.and_then(|s| s.selector.clone()),
            allows: current && status.is_some_and(|s| s.disruptions_allowed.unwrap_or(0) > 0),
        }
    }

    /// Whether it keeps the pod with `labels` from being evicted now: it
    /// selects the pod and allows no disruption.
    pub fn protects(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.allows && self.selector.as_ref().is_some_and(|s| selects(s, labels))
    }
}

/// Whether `selector` selects a pod with `labels` (an empty selector selects
/// every pod).
fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            // An operator the API server would not have accepted.
            _ => false,
        }
    });
    by_labels && by_expressions
}

// === impl Index ===

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(app: &str) -> BTreeMap<String, String> {
        [("app".to_owned(), app.to_owned())].into()
    }

    #[test]
    fn expressions_select_as_kubernetes_does() {
        let selector = LabelSelector {
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "app".into(),
                    operator: "In".into(),
                    values: Some(vec!["train".into(), "tune".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
            ..Default::default()
        };
        assert!(selects(&selector, &labels("tune")));
        assert!(!selects(&selector, &labels("serve")));
        let mut canary = labels("train");
        canary.insert("canary".into(), "yes".into());
        assert!(!selects(&selector, &canary));
        assert!(
            selects(&LabelSelector::default(), &labels("x")),
            "empty selects all"
        );
    }
}
