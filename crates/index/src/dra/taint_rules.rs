//! DeviceTaintRules: taints put on devices from outside their slices (an
//! operator draining a GPU, a health controller), by driver, pool and
//! device name. A device's taints are its slice's and those of every rule
//! that selects it; claims that do not tolerate a `NoSchedule` or
//! `NoExecute` one do not get the device.
//!
//! ```text
//!   DeviceTaintRule ──▶ (selector, taint) ──▶ taints_of(device)
//!   spec.deviceSelector {driver?, pool?, device?}: every field set must
//!   match; an empty selector selects every device, none selects none
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{DeviceTaint, DeviceTaintRule, DeviceTaintSelector};

use super::pools::DeviceId;

/// The DeviceTaintRules that select some device, by name.
#[derive(Debug, Default)]
pub(crate) struct TaintRules {
    name_to_rule: BTreeMap<String, (DeviceTaintSelector, DeviceTaint)>,
}

impl TaintRules {
    /// Records a rule (added or changed). A rule without a selector selects
    /// no device and is not kept.
    pub fn apply(&mut self, rule: &DeviceTaintRule) {
        let Some(name) = rule.metadata.name.clone() else {
            return;
        };
        match &rule.spec.device_selector {
            Some(selector) => {
                self.name_to_rule
                    .insert(name, (selector.clone(), rule.spec.taint.clone()));
            }
            None => {
                self.name_to_rule.remove(&name);
            }
        }
    }

    /// Forgets a rule.
    pub fn delete(&mut self, name: &str) {
        self.name_to_rule.remove(name);
    }

    /// Replaces every rule (after a relist).
    pub fn reset(&mut self, rules: &[DeviceTaintRule]) {
        self.name_to_rule.clear();
        rules.iter().for_each(|r| self.apply(r));
    }

    /// The taints the rules put on `device`, with the name of each rule.
    pub fn taints_of<'a>(
        &'a self,
        device: &'a DeviceId,
    ) -> impl Iterator<Item = (&'a str, &'a DeviceTaint)> + 'a {
        self.name_to_rule
            .iter()
            .filter(move |(_, (selector, _))| selects(selector, device))
            .map(|(name, (_, taint))| (name.as_str(), taint))
    }
}

/// Whether every field the selector sets matches the device.
fn selects(selector: &DeviceTaintSelector, device: &DeviceId) -> bool {
    let matches = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    matches(&selector.driver, &device.driver)
        && matches(&selector.pool, &device.pool)
        && matches(&selector.device, &device.device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::resource::v1::DeviceTaintRuleSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn rule(name: &str, selector: Option<DeviceTaintSelector>) -> DeviceTaintRule {
        DeviceTaintRule {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: DeviceTaintRuleSpec {
                device_selector: selector,
                taint: DeviceTaint {
                    key: "example.com/drain".into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                },
            },
            status: None,
        }
    }

    fn device(driver: &str, pool: &str, name: &str) -> DeviceId {
        DeviceId {
            driver: driver.into(),
            pool: pool.into(),
            device: name.into(),
        }
    }

    fn names(rules: &TaintRules, id: &DeviceId) -> Vec<String> {
        rules.taints_of(id).map(|(n, _)| n.to_owned()).collect()
    }

    #[test]
    fn a_rule_selects_by_every_field_it_sets_and_an_empty_one_selects_all() {
        let mut rules = TaintRules::default();
        rules.apply(&rule(
            "gpu-3",
            Some(DeviceTaintSelector {
                driver: Some("gpu.nvidia.com".into()),
                pool: Some("node-a".into()),
                device: Some("gpu-3".into()),
            }),
        ));
        rules.apply(&rule(
            "pool-b",
            Some(DeviceTaintSelector {
                pool: Some("node-b".into()),
                ..Default::default()
            }),
        ));
        rules.apply(&rule("everything", Some(DeviceTaintSelector::default())));
        rules.apply(&rule("nothing", None));

        let a3 = device("gpu.nvidia.com", "node-a", "gpu-3");
        let a4 = device("gpu.nvidia.com", "node-a", "gpu-4");
        let b0 = device("gpu.nvidia.com", "node-b", "gpu-0");
        let other = device("other.example.com", "node-a", "gpu-3");
        assert_eq!(names(&rules, &a3), ["everything", "gpu-3"]);
        assert_eq!(names(&rules, &a4), ["everything"]);
        assert_eq!(names(&rules, &b0), ["everything", "pool-b"]);
        assert_eq!(names(&rules, &other), ["everything"]);

        rules.delete("everything");
        assert!(names(&rules, &a4).is_empty());
        // A rule changed to select nothing is forgotten.
        rules.apply(&rule("pool-b", None));
        assert!(names(&rules, &b0).is_empty());
        rules.reset(&[]);
        assert!(names(&rules, &a3).is_empty());
    }
}
