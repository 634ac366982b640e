//! What users see of each round: the GPUResource status (phase, pods,
//! conditions) and Events for problems they can fix.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::apply::Applier;
use super::events::{EventSink, gpuresource_ref, pod_ref};
use super::watch::Shared;
use crate::api::{Phase, conditions};
use crate::index::{
    ObjectKey, OutdatedHoldings, PodCounts, Problem, ResourceView, RoundReport, Subject,
    UnhealthyHolding,
};
use std::collections::BTreeMap;

/// Pods of one GPUResource told about a new policy error.
const POD_EVENTS_PER_ERROR: usize = 20;

/// What a round learnt about policies, per GPUResource.
#[derive(Debug, Default)]
pub struct RoundOutcome {
    /// GPUResources whose policy decided this round without error.
    pub decided: HashSet<ObjectKey>,
    /// GPUResources whose policy is missing, failed, or made a decision the
    /// host refused: `(reason, message)`.
    pub policy_errors: HashMap<ObjectKey, (&'static str, String)>,
}

/// A GPUResource status as the controller last wrote it.
#[derive(Clone, Debug, PartialEq)]
struct Summary {
    phase: Phase,
    counts: PodCounts,
    observed_generation: Option<i64>,
    /// `(type, status, reason, message)`.
    conditions: Vec<(&'static str, bool, String, String)>,
}

/// Writes GPUResource status and problem Events when they change.
pub struct Reporter {
    shared: Arc<Shared>,
    events: EventSink,
    key_to_summary: HashMap<ObjectKey, (Summary, Vec<Condition>)>,
    key_to_policy_error: HashMap<ObjectKey, (&'static str, String)>,
    /// Problems reported last round: a problem gets an Event when it
    /// appears, not every round.
    reported: HashSet<String>,
    /// `(pod UID, GPU)` of pods told last round that a GPU they hold is
    /// unhealthy.
    unhealthy_reported: HashSet<(String, String)>,
}

// === impl Reporter ===

impl Reporter {
    /// A reporter of what `shared` holds; status goes through the applier.
    pub fn new(shared: Arc<Shared>, events: EventSink) -> Self {
        Self {
            shared,
            events,
            key_to_summary: HashMap::new(),
            key_to_policy_error: HashMap::new(),
            reported: HashSet::new(),
            unhealthy_reported: HashSet::new(),
        }
    }

    /// Reports one round: Events for new problems and policy errors, and
    /// the status of every GPUResource whose summary changed.
    pub async fn report(&mut self, applier: &Applier, outcome: RoundOutcome) {
        for key in &outcome.decided {
            self.key_to_policy_error.remove(key);
        }
        let RoundReport {
            resources: views,
            counts: key_to_counts,
            problems,
            unhealthy,
            outdated,
        } = self.shared.index().round_report(now_ms());
        let counts: Vec<PodCounts> = views
            .iter()
            .map(|v| key_to_counts.get(&v.key).copied().unwrap_or_default())
            .collect();
        self.report_unhealthy(&unhealthy);
        for (key, error) in outcome.policy_errors {
            if self.key_to_policy_error.get(&key) != Some(&error) {
                let uid = views
                    .iter()
                    .find(|v| v.key == key)
                    .and_then(|v| v.uid.clone());
                self.events.warning(
                    gpuresource_ref(&key, uid.as_deref()),
                    error.0,
                    "Allocate",
                    error.1.clone(),
                );
                // The pods that wait because of it hear it too (a few:
                // the GPUResource's condition tells the rest).
                let waiting = self.shared.index().unplaced_pods_of(&key);
                for (pod, uid) in waiting.into_iter().take(POD_EVENTS_PER_ERROR) {
                    self.events.warning(
                        pod_ref(&pod, Some(&uid)),
                        error.0,
                        "Allocate",
                        error.1.clone(),
                    );
                }
            }
            self.key_to_policy_error.insert(key, error);
        }
        self.report_problems(&views, &problems);
        let keys: HashSet<&ObjectKey> = views.iter().map(|v| &v.key).collect();
        self.key_to_summary.retain(|key, _| keys.contains(key));
        self.key_to_policy_error.retain(|key, _| keys.contains(key));
        let mut failed = Vec::new();
        for (view, counts) in views.iter().zip(counts) {
            if view.deleting {
                continue;
            }
            let unhealthy: Vec<&UnhealthyHolding> = unhealthy
                .iter()
                .filter(|u| u.resource == view.key)
                .collect();
            let summary =
                self.summarize(view, counts, &problems, &unhealthy, outdated.get(&view.key));
            if self.key_to_summary.get(&view.key).map(|(s, _)| s) == Some(&summary) {
                continue;
            }
            let previous = self
                .key_to_summary
                .get(&view.key)
                .map(|(_, c)| c.as_slice())
                .unwrap_or_default();
            let conditions = to_conditions(&summary, previous);
            match self.write(applier, view, &summary, &conditions).await {
                Ok(()) => {
                    self.key_to_summary
                        .insert(view.key.clone(), (summary, conditions));
                }
                Err(error) => failed.push((&view.key, error)),
            }
        }
        // One line per round however many failed: during an outage every
        // write fails, and the log must not grow with the GPUResources.
        if let Some((first, error)) = failed.first() {
            tracing::warn!(
                kind = "GPUResource",
                failed = failed.len(),
                first = %first,
                %error,
                "Cannot write the status of {} GPUResource(s); retrying next round",
                failed.len()
            );
        }
    }

    fn report_problems(&mut self, views: &[ResourceView], problems: &[Problem]) {
        let mut reported = HashSet::new();
        for problem in problems {
            let message = problem.to_string();
            if !self.reported.contains(&message) {
                let reference = match problem.subject() {
                    Subject::Pod(pod) => {
                        let uid = self.shared.index().pod_uid(pod).map(str::to_string);
                        pod_ref(pod, uid.as_deref())
                    }
                    Subject::GPUResource(key) => {
                        let uid = views
                            .iter()
                            .find(|v| &v.key == key)
                            .and_then(|v| v.uid.clone());
                        gpuresource_ref(key, uid.as_deref())
                    }
                };
                tracing::info!(%message, "Problem");
                self.events
                    .warning(reference, problem.reason(), "Allocate", message.clone());
            }
            reported.insert(message);
        }
        self.reported = reported;
    }

    /// A Warning on each pod whose GPU turned unhealthy, once.
    fn report_unhealthy(&mut self, unhealthy: &[UnhealthyHolding]) {
        let mut reported = HashSet::new();
        for held in unhealthy {
            let key = (held.uid.clone(), held.gpu.clone());
            if !self.unhealthy_reported.contains(&key) {
                let message = format!(
                    "GPU {} (index {}) on node {}, which this pod holds, is unhealthy: {}; \
                     the pod keeps it until it finishes (delete the pod to be placed again)",
                    held.gpu, held.index, held.node, held.reason
                );
                tracing::warn!(pod = %held.pod, gpu = %held.gpu, node = %held.node, reason = %held.reason, "A held GPU is unhealthy");
                self.events.warning(
                    pod_ref(&held.pod, Some(&held.uid)),
                    "GPUUnhealthy",
                    "Allocate",
                    message,
                );
            }
            reported.insert(key);
        }
        self.unhealthy_reported = reported;
    }

    fn summarize(
        &self,
        view: &ResourceView,
        counts: PodCounts,
        problems: &[Problem],
        unhealthy: &[&UnhealthyHolding],
        outdated: Option<&OutdatedHoldings>,
    ) -> Summary {
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
        if let Some((reason, message)) = self.key_to_policy_error.get(&view.key) {
            conditions.push((
                conditions::POLICY_ERROR,
                true,
                (*reason).to_string(),
                message.clone(),
            ));
        }
        Summary {
            phase,
            counts,
            observed_generation: view.generation,
            conditions,
        }
    }

    async fn write(
        &self,
        applier: &Applier,
        view: &ResourceView,
        summary: &Summary,
        conditions: &[Condition],
    ) -> Result<(), super::apply::ApplyError> {
        let patch = json!({
            "status": {
                "phase": summary.phase,
                "holding": summary.counts.holding,
                "asking": summary.counts.referencing,
                "pods": format!("{}/{}", summary.counts.holding, summary.counts.referencing),
                "observedGeneration": summary.observed_generation,
                "conditions": conditions,
            },
        });
        applier.write_status(&view.key, &patch).await
    }
}

/// The summary's conditions, keeping the transition time of those whose
/// status did not change.
fn to_conditions(summary: &Summary, previous: &[Condition]) -> Vec<Condition> {
    let now = Time(Timestamp::now());
    summary
        .conditions
        .iter()
        .map(|(type_, status, reason, message)| {
            let status = if *status { "True" } else { "False" };
            let last_transition_time = previous
                .iter()
                .find(|c| c.type_ == *type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: (*type_).into(),
                status: status.into(),
                reason: reason.clone(),
                message: message.clone(),
                observed_generation: summary.observed_generation,
                last_transition_time,
            }
        })
        .collect()
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

/// Milliseconds since the Unix epoch, by this machine's clock.
fn now_ms() -> u64 {
    u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0)
}
