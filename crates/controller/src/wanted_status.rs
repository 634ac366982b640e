//! The status a GPUResource should show: decided here, from what the index
//! says of it (pure: unit-tested below), and written by the status writer
//! (`status.rs`) for the reporter (`report.rs`).

use std::collections::BTreeMap;

use wasmgpu_api::{Phase, conditions};
use wasmgpu_index::{OutdatedHoldings, PodCounts, Problem, ResourceView, UnhealthyHolding};

/// The status a GPUResource should show.
#[derive(Clone, Debug, PartialEq)]
pub struct WantedStatus {
    pub phase: Phase,
    pub counts: PodCounts,
    pub observed_generation: Option<i64>,
    /// `(type, status, reason, message)`.
    pub conditions: Vec<Condition>,
}

/// A condition to show: `(type, status, reason, message)`.
pub type Condition = (&'static str, bool, String, String);

/// A wanted status with conditions, as the status writer needs it.
pub trait Conditions {
    /// The conditions to show.
    fn conditions(&self) -> &[Condition];
    /// The generation they describe.
    fn observed_generation(&self) -> Option<i64>;
}

impl Conditions for WantedStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    fn observed_generation(&self) -> Option<i64> {
        self.observed_generation
    }
}

// === impl WantedStatus ===

impl WantedStatus {
    /// The merge patch that writes it, with `conditions` as written.
    pub fn patch(
        &self,
        conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    ) -> serde_json::Value {
        serde_json::json!({
            "status": {
                "phase": self.phase,
                "holding": self.counts.holding,
                "asking": self.counts.referencing,
                "pods": format!("{}/{}", self.counts.holding, self.counts.referencing),
                "observedGeneration": self.observed_generation,
                "conditions": conditions,
            },
        })
    }

    /// The status `view` should show: its phase and the `Ready` condition
    /// (the first rule that applies: invalid spec, unsatisfiable, GPU
    /// limit mismatch, gang timed out, no pods, all holding, waiting), then
    /// `Degraded`, `SpecChanged` and `PolicyError` when they apply.
    pub fn of(
        view: &ResourceView,
        counts: PodCounts,
        problems: &[Problem],
        unhealthy: &[&UnhealthyHolding],
        outdated: Option<&OutdatedHoldings>,
        policy_error: Option<(&str, &str)>,
    ) -> WantedStatus {
        let (phase, mut conditions) = ready(view, counts, problems);
        if !unhealthy.is_empty() {
            let pods: BTreeMap<&str, String> = unhealthy
                .iter()
                .map(|u| {
                    (
                        u.pod.name.as_str(),
                        format!("GPU {} on {}: {}", u.index, u.node, u.reason),
                    )
                })
                .collect();
            conditions.push((
                conditions::DEGRADED,
                true,
                "GPUUnhealthy".into(),
                format!(
                    "{} pod(s) hold an unhealthy GPU and keep it until they finish: {}",
                    pods.len(),
                    first_few(pods.iter().map(|(pod, gpu)| format!("{pod} ({gpu})")))
                ),
            ));
        }
        if let Some(outdated) = outdated {
            conditions.push((
                conditions::SPEC_CHANGED,
                true,
                "AllocatedForAnEarlierSpec".into(),
                format!(
                    "{} pod(s) hold GPUs allocated for an earlier spec and keep them until they \
                     finish; new pods get {}: {}",
                    outdated.pod_to_shape.len(),
                    outdated.now,
                    first_few(
                        outdated
                            .pod_to_shape
                            .iter()
                            .map(|(pod, shape)| format!("{pod} ({shape})"))
                    )
                ),
            ));
        }
        if let Some((reason, message)) = policy_error {
            conditions.push((
                conditions::POLICY_ERROR,
                true,
                reason.to_string(),
                message.to_string(),
            ));
        }
        WantedStatus {
            phase,
            counts,
            observed_generation: view.generation,
            conditions,
        }
    }
}

/// The phase and the `Ready` condition (and `Invalid` or `Unsatisfiable`
/// with it): the first rule that applies, in order.
fn ready(view: &ResourceView, counts: PodCounts, problems: &[Problem]) -> (Phase, Vec<Condition>) {
    let unsatisfiable = problems.iter().find_map(|p| match p {
        Problem::Unsatisfiable {
            resource, reason, ..
        } if resource == &view.key => Some(reason.clone()),
        _ => None,
    });
    let mismatch = problems.iter().find_map(|p| match p {
        Problem::LimitMismatch { resource, .. } if resource == &view.key => Some(p.to_string()),
        _ => None,
    });
    let gang_timeout = problems.iter().find_map(|p| match p {
        Problem::GangTimedOut { resource, .. } if resource == &view.key => Some(p.to_string()),
        _ => None,
    });
    let mut conditions = Vec::new();
    let phase = if let Some(error) = &view.spec_error {
        conditions.push((
            conditions::READY,
            false,
            "Invalid".into(),
            error.to_string(),
        ));
        conditions.push((
            conditions::INVALID,
            true,
            format!("Invalid{}", capitalize(error.field)),
            error.to_string(),
        ));
        Phase::Failed
    } else if let Some(reason) = unsatisfiable {
        conditions.push((
            conditions::READY,
            false,
            "Unsatisfiable".into(),
            reason.clone(),
        ));
        conditions.push((conditions::UNSATISFIABLE, true, "NoNodeFits".into(), reason));
        Phase::Failed
    } else if let Some(message) = mismatch {
        conditions.push((conditions::READY, false, "GPULimitMismatch".into(), message));
        Phase::Pending
    } else if let Some(message) = gang_timeout {
        conditions.push((conditions::READY, false, "GangTimedOut".into(), message));
        Phase::Pending
    } else if counts.referencing == 0 {
        conditions.push((
            conditions::READY,
            false,
            "NoPods".into(),
            "no pod uses this GPUResource yet".into(),
        ));
        Phase::Pending
    } else if counts.holding >= counts.referencing {
        conditions.push((
            conditions::READY,
            true,
            "Allocated".into(),
            format!("all {} pod(s) hold their GPUs", counts.holding),
        ));
        Phase::Allocated
    } else {
        conditions.push((
            conditions::READY,
            false,
            "Waiting".into(),
            format!(
                "{} of {} pod(s) hold GPUs; the others wait for GPUs to free up",
                counts.holding, counts.referencing
            ),
        ));
        Phase::Pending
    };
    (phase, conditions)
}

/// The first five items, comma-separated, and how many more.
fn first_few(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    let mut text = items.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > 5 {
        text.push_str(&format!(" and {} more", items.len() - 5));
    }
    text
}

/// `memoryMiB` → `MemoryMiB`.
fn capitalize(field: &str) -> String {
    let mut chars = field.chars();
    chars
        .next()
        .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use wasmgpu_api::InvalidSpec;
    use wasmgpu_index::ObjectKey;

    use super::*;

    fn view() -> ResourceView {
        ResourceView {
            key: ObjectKey::new("ml", "r"),
            uid: Some("uid-r".into()),
            generation: Some(3),
            resource_version: None,
            policy: "binpack".into(),
            spec_error: None,
            deleting: false,
            finalizers: Vec::new(),
            allocations: Vec::new(),
        }
    }

    fn counts(holding: usize, referencing: usize) -> PodCounts {
        PodCounts {
            holding,
            referencing,
        }
    }

    /// `(type, status, reason)` of each condition.
    fn shown(status: &WantedStatus) -> Vec<(&'static str, bool, &str)> {
        status
            .conditions
            .iter()
            .map(|(kind, on, reason, _)| (*kind, *on, reason.as_str()))
            .collect()
    }

    #[test]
    fn pods_holding_waiting_or_absent_set_the_phase_and_ready() {
        let of = |holding, referencing| {
            WantedStatus::of(&view(), counts(holding, referencing), &[], &[], None, None)
        };
        let all = of(2, 2);
        assert_eq!(all.phase, Phase::Allocated);
        assert_eq!(shown(&all), [(conditions::READY, true, "Allocated")]);
        assert_eq!(all.observed_generation, Some(3));
        let some = of(1, 3);
        assert_eq!(some.phase, Phase::Pending);
        assert_eq!(shown(&some), [(conditions::READY, false, "Waiting")]);
        assert!(some.conditions[0].3.starts_with("1 of 3 pod(s) hold GPUs"));
        let none = of(0, 0);
        assert_eq!(shown(&none), [(conditions::READY, false, "NoPods")]);
    }

    #[test]
    fn an_invalid_spec_comes_first_and_names_the_field() {
        let mut invalid = view();
        invalid.spec_error = Some(InvalidSpec {
            field: "memoryMiB",
            reason: "must be set for shared GPUs".into(),
        });
        let unsatisfiable = Problem::Unsatisfiable {
            pod: ObjectKey::new("ml", "p"),
            resource: ObjectKey::new("ml", "r"),
            reason: "no node has 16 GPUs".into(),
        };
        let status = WantedStatus::of(
            &invalid,
            counts(0, 1),
            std::slice::from_ref(&unsatisfiable),
            &[],
            None,
            None,
        );
        assert_eq!(status.phase, Phase::Failed);
        assert_eq!(
            shown(&status),
            [
                (conditions::READY, false, "Invalid"),
                (conditions::INVALID, true, "InvalidMemoryMiB")
            ]
        );
        // Valid: the unsatisfiable request fails it instead.
        let status = WantedStatus::of(&view(), counts(0, 1), &[unsatisfiable], &[], None, None);
        assert_eq!(status.phase, Phase::Failed);
        assert_eq!(
            shown(&status),
            [
                (conditions::READY, false, "Unsatisfiable"),
                (conditions::UNSATISFIABLE, true, "NoNodeFits")
            ]
        );
        // A problem of another GPUResource changes nothing here.
        let elsewhere = Problem::Unsatisfiable {
            pod: ObjectKey::new("ml", "q"),
            resource: ObjectKey::new("ml", "other"),
            reason: "no node has 16 GPUs".into(),
        };
        let status = WantedStatus::of(&view(), counts(1, 1), &[elsewhere], &[], None, None);
        assert_eq!(status.phase, Phase::Allocated);
    }

    #[test]
    fn unhealthy_gpus_earlier_specs_and_policy_errors_add_conditions() {
        let unhealthy = UnhealthyHolding {
            pod: ObjectKey::new("ml", "p"),
            uid: "uid-p".into(),
            resource: ObjectKey::new("ml", "r"),
            node: "n1".into(),
            gpu: "GPU-a".into(),
            index: 2,
            reason: "XID 79".into(),
        };
        let outdated = OutdatedHoldings {
            pod_to_shape: BTreeMap::from([("p".into(), "1 exclusive GPU".into())]),
            now: "2 exclusive GPUs".into(),
        };
        let status = WantedStatus::of(
            &view(),
            counts(1, 1),
            &[],
            &[&unhealthy],
            Some(&outdated),
            Some((
                "PolicyFailed",
                "policy binpack failed: out of fuel; its pods wait",
            )),
        );
        assert_eq!(
            shown(&status),
            [
                (conditions::READY, true, "Allocated"),
                (conditions::DEGRADED, true, "GPUUnhealthy"),
                (conditions::SPEC_CHANGED, true, "AllocatedForAnEarlierSpec"),
                (conditions::POLICY_ERROR, true, "PolicyFailed"),
            ]
        );
        assert!(
            status.conditions[1].3.contains("p (GPU 2 on n1: XID 79)"),
            "{:?}",
            status.conditions[1]
        );
        assert!(
            status.conditions[2]
                .3
                .contains("new pods get 2 exclusive GPUs: p (1 exclusive GPU)"),
            "{:?}",
            status.conditions[2]
        );
    }

    #[test]
    fn long_lists_show_five_and_count_the_rest() {
        let items = (0..7).map(|i| format!("p{i}"));
        assert_eq!(first_few(items), "p0, p1, p2, p3, p4 and 2 more");
        assert_eq!(capitalize("memoryMiB"), "MemoryMiB");
        assert_eq!(capitalize(""), "");
    }
}
