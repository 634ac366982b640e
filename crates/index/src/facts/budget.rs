//! What the index keeps of a `PodDisruptionBudget`: whom it selects, and
//! whether it allows a disruption now.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use wasmgpu_api::selects;

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
