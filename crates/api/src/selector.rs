//! Label selectors (`metav1.LabelSelector`) matched as Kubernetes matches
//! them: every `matchLabels` pair and every `matchExpressions` requirement
//! must hold; an empty selector selects everything.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `selector` selects an object with `labels`.
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
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

/// Why `selector` cannot be used, naming the requirement, when an object
/// was stored without the API server's checks.
pub fn check(selector: &LabelSelector) -> Result<(), String> {
    for (k, e) in selector.match_expressions.iter().flatten().enumerate() {
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(format!(
                    "matchExpressions[{k}]: operator {} needs at least one value",
                    e.operator
                ));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(format!(
                    "matchExpressions[{k}]: operator {} takes no values",
                    e.operator
                ));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                return Err(format!(
                    "matchExpressions[{k}]: unknown operator {other:?} (In, NotIn, Exists, DoesNotExist)"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(app: &str) -> BTreeMap<String, String> {
        [("app".to_owned(), app.to_owned())].into()
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn expressions_select_as_kubernetes_does() {
        let selector = LabelSelector {
            match_expressions: Some(vec![
                requirement("app", "In", &["train", "tune"]),
                requirement("canary", "DoesNotExist", &[]),
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
        let by_label = LabelSelector {
            match_labels: Some(labels("train")),
            ..Default::default()
        };
        assert!(selects(&by_label, &labels("train")));
        assert!(!selects(&by_label, &BTreeMap::new()));
    }

    #[test]
    fn check_names_the_requirement() {
        let bad = LabelSelector {
            match_expressions: Some(vec![
                requirement("app", "In", &["a"]),
                requirement("team", "Equals", &["x"]),
            ]),
            ..Default::default()
        };
        let error = check(&bad).unwrap_err();
        assert!(error.starts_with("matchExpressions[1]"), "{error}");
        assert!(error.contains("Equals"), "{error}");
        let empty_in = LabelSelector {
            match_expressions: Some(vec![requirement("app", "In", &[])]),
            ..Default::default()
        };
        assert!(check(&empty_in).unwrap_err().contains("at least one value"));
        assert_eq!(check(&LabelSelector::default()), Ok(()));
    }
}
