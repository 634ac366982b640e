//! PodDisruptionBudgets: which running pods may be evicted now.
//!
//! A pod is evictable unless a budget of its namespace selects it and allows
//! no disruption now (`status.disruptionsAllowed` is 0, or the budget's
//! status is not yet worked out for its generation — the Eviction API
//! refuses then too). Policies read it as `running.evictable`, so they do
//! not name a victim the Eviction API would refuse.

use std::collections::BTreeMap;

use crate::facts::budget::BudgetFacts;
use crate::index::Index;
use crate::key::ObjectKey;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

impl Index {
    /// Records a PodDisruptionBudget (added or changed).
    pub fn apply_budget(&mut self, budget: &PodDisruptionBudget) {
        let meta = &budget.metadata;
        if let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) {
            self.key_to_budget
                .insert(ObjectKey::new(ns, name), BudgetFacts::of(budget));
        }
    }

    /// Forgets a PodDisruptionBudget.
    pub fn delete_budget(&mut self, namespace: &str, name: &str) {
        self.key_to_budget.remove(&ObjectKey::new(namespace, name));
    }

    /// Replaces every PodDisruptionBudget (after a relist).
    pub fn reset_budgets(&mut self, budgets: &[PodDisruptionBudget]) {
        self.key_to_budget.clear();
        budgets.iter().for_each(|b| self.apply_budget(b));
    }

    /// Whether the pod `key` (with `labels`) may be evicted now.
    pub(crate) fn evictable(&self, key: &ObjectKey, labels: &BTreeMap<String, String>) -> bool {
        if self.key_to_budget.is_empty() {
            return true;
        }
        let first = ObjectKey::new(&key.namespace, "");
        self.key_to_budget
            .range(first..)
            .take_while(|(k, _)| k.namespace == key.namespace)
            .all(|(_, b)| !b.protects(labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

    fn budget(name: &str, app: &str, allowed: i32) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ml".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some([("app".to_owned(), app.to_owned())].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(PodDisruptionBudgetStatus {
                disruptions_allowed: Some(allowed),
                observed_generation: Some(1),
                ..Default::default()
            }),
        }
    }

    fn labels(app: &str) -> BTreeMap<String, String> {
        [("app".to_owned(), app.to_owned())].into()
    }

    #[test]
    fn a_budget_that_allows_nothing_protects_the_pods_it_selects() {
        let mut index = Index::new("binpack");
        let pod = ObjectKey::new("ml", "p");
        assert!(index.evictable(&pod, &labels("train")));
        index.apply_budget(&budget("b", "train", 0));
        assert!(!index.evictable(&pod, &labels("train")));
        assert!(index.evictable(&pod, &labels("serve")), "not selected");
        assert!(
            index.evictable(&ObjectKey::new("other", "p"), &labels("train")),
            "another namespace"
        );
        index.apply_budget(&budget("b", "train", 1));
        assert!(index.evictable(&pod, &labels("train")));
        // A status not yet worked out for the budget's generation: refused.
        let mut stale = budget("b", "train", 1);
        stale.metadata.generation = Some(2);
        index.apply_budget(&stale);
        assert!(!index.evictable(&pod, &labels("train")));
        index.delete_budget("ml", "b");
        assert!(index.evictable(&pod, &labels("train")));
    }
}
