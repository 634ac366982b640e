//! The status a GPUTenant should show, decided from what the index counts
//! of it (pure: unit-tested below); written by the status writer.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition as ApiCondition;
use wasmgpu_api::conditions;
use wasmgpu_index::TenantView;

use super::wanted_status::{Condition, Conditions};

/// The status a GPUTenant should show.
#[derive(Clone, Debug, PartialEq)]
pub struct WantedTenantStatus {
    view: TenantView,
    conditions: Vec<Condition>,
}

impl Conditions for WantedTenantStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    fn observed_generation(&self) -> Option<i64> {
        self.view.generation
    }
}

impl WantedTenantStatus {
    /// The counts of `view`, `Invalid` when its spec is unusable, and
    /// `OverLimit` / `OverQuota` from what it holds.
    pub fn of(view: &TenantView) -> WantedTenantStatus {
        let mut wanted = Vec::new();
        if let Some(error) = &view.error {
            wanted.push((
                conditions::INVALID,
                true,
                "InvalidSpec".to_string(),
                format!("{error}; until it is fixed the tenant matches no namespace"),
            ));
        }
        let (holding, quota) = (view.holding, view.quota);
        wanted.push(match view.limit {
            Some(limit) if holding > limit => (
                conditions::OVER_LIMIT,
                true,
                "HoldsMoreThanLimit".into(),
                format!(
                    "holds {holding} GPU(s), more than its limit of {limit}; its pods keep them, \
                     new pods wait until it is under the limit"
                ),
            ),
            Some(limit) => (
                conditions::OVER_LIMIT,
                false,
                "WithinLimit".into(),
                format!("holds {holding} of at most {limit} GPU(s)"),
            ),
            None => (
                conditions::OVER_LIMIT,
                false,
                "NoLimit".into(),
                format!("holds {holding} GPU(s); no limit is set"),
            ),
        });
        wanted.push(if holding > quota {
            (
                conditions::OVER_QUOTA,
                true,
                "HoldsMoreThanQuota".into(),
                format!(
                    "holds {holding} GPU(s), {} beyond its quota of {quota}: tenants under \
                     their quota may reclaim those",
                    holding - quota
                ),
            )
        } else {
            (
                conditions::OVER_QUOTA,
                false,
                "WithinQuota".into(),
                format!("holds {holding} of its {quota} guaranteed GPU(s)"),
            )
        });
        WantedTenantStatus {
            view: view.clone(),
            conditions: wanted,
        }
    }

    /// The merge patch that writes it, with `conditions` as written.
    pub fn patch(&self, conditions: &[ApiCondition]) -> serde_json::Value {
        let v = &self.view;
        serde_json::json!({
            "status": {
                "holding": v.holding,
                "waiting": v.waiting,
                "podsHolding": v.pods_holding,
                "podsWaiting": v.pods_waiting,
                "namespacesSeen": v.namespaces_seen,
                "observedGeneration": v.generation,
                "conditions": conditions,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(holding: u32, quota: u32, limit: Option<u32>) -> TenantView {
        TenantView {
            name: "a".into(),
            holding,
            quota,
            limit,
            ..TenantView::default()
        }
    }

    fn state(wanted: &WantedTenantStatus, type_: &str) -> Option<(bool, String)> {
        wanted
            .conditions
            .iter()
            .find(|c| c.0 == type_)
            .map(|c| (c.1, c.2.clone()))
    }

    #[test]
    fn over_limit_and_over_quota_follow_what_it_holds() {
        let within = WantedTenantStatus::of(&view(4, 4, Some(8)));
        assert_eq!(
            state(&within, "OverLimit"),
            Some((false, "WithinLimit".into()))
        );
        assert_eq!(
            state(&within, "OverQuota"),
            Some((false, "WithinQuota".into()))
        );
        let over = WantedTenantStatus::of(&view(9, 4, Some(8)));
        assert_eq!(
            state(&over, "OverLimit"),
            Some((true, "HoldsMoreThanLimit".into()))
        );
        assert_eq!(
            state(&over, "OverQuota"),
            Some((true, "HoldsMoreThanQuota".into()))
        );
        assert!(
            over.conditions[1].3.contains("5 beyond its quota of 4"),
            "{:?}",
            over.conditions
        );
        let unlimited = WantedTenantStatus::of(&view(1, 0, None));
        assert_eq!(
            state(&unlimited, "OverLimit"),
            Some((false, "NoLimit".into()))
        );
        assert_eq!(state(&unlimited, "Invalid"), None);
    }

    #[test]
    fn an_invalid_spec_says_so_and_the_patch_carries_the_counts() {
        let mut invalid = view(0, 9, Some(4));
        invalid.error = Some("spec.quota: 9 is above limit 4".into());
        invalid.waiting = 3;
        let wanted = WantedTenantStatus::of(&invalid);
        let (status, reason) = state(&wanted, "Invalid").unwrap();
        assert!(status);
        assert_eq!(reason, "InvalidSpec");
        let patch = wanted.patch(&[]);
        assert_eq!(patch["status"]["waiting"], 3);
        assert_eq!(patch["status"]["holding"], 0);
    }
}
