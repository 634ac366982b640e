//! What users see of each round: the GPUResource status (phase, pods,
//! conditions; written by the [`StatusWriter`]), the GPUTenant status and Events for problems
//! they can fix.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use tokio::time::Instant;

use super::apply::{StatusApi, TenantStatusApi};
use super::events::{EventSink, Reason, gpuresource_ref, pod_ref, resourceslice_ref};
use super::metrics::Metrics;
use super::round_plan::WaitingPlan;
use super::standing::Standing;
use super::status::StatusWriter;
use super::wanted_status::WantedStatus;
use super::wanted_tenant_status::WantedTenantStatus;
use super::watch::WatchedIndex;
use crate::clock::now_ms;
use wasmgpu_index::{
    GpuState, ObjectKey, OutdatedHoldings, PodCounts, Problem, ResourceView, RoundReport, Subject,
    TenantView, UnhealthyHolding,
};

/// Pods of one GPUResource told about a new policy error.
const POD_EVENTS_PER_ERROR: usize = 20;

/// What a round learnt about policies, per GPUResource.
#[derive(Debug, Default)]
pub struct RoundOutcome {
    /// GPUResources whose policy decided this round without error.
    pub decided: HashSet<ObjectKey>,
    /// GPUResources whose policy is missing, failed, or made a decision the
    /// host refused: `(reason, message)`.
    pub policy_errors: HashMap<ObjectKey, (Reason, String)>,
    /// Per policy that had pending pods: what is still pending, and why.
    pub waiting: Vec<(String, WaitingPlan)>,
}

impl RoundOutcome {
    /// `policy` decided nothing (not loaded, or its call failed) for
    /// `reason`: its GPUResources say so with `message`, and its pods wait
    /// (`waiting`).
    pub fn policy_error(
        &mut self,
        policy: &str,
        resources: impl IntoIterator<Item = ObjectKey>,
        reason: Reason,
        message: &str,
        waiting: WaitingPlan,
    ) {
        for resource in resources {
            self.policy_errors
                .insert(resource, (reason, message.to_owned()));
        }
        self.waiting.push((policy.to_owned(), waiting));
    }

    /// `policy` decided for `resources`, leaving `waiting` pending; the
    /// GPUResources of `refused` decisions say why instead of "decided".
    pub fn policy_decided(
        &mut self,
        policy: &str,
        resources: impl IntoIterator<Item = ObjectKey>,
        waiting: WaitingPlan,
        refused: Vec<(ObjectKey, String)>,
    ) {
        self.decided.extend(resources);
        self.waiting.push((policy.to_owned(), waiting));
        for (resource, message) in refused {
            self.decided.remove(&resource);
            self.policy_errors
                .insert(resource, (Reason::DecisionRefused, message));
        }
    }
}

/// Decides the status of each GPUResource and the Events of problems.
pub struct Reporter {
    shared: Arc<WatchedIndex>,
    events: EventSink,
    /// Writes the status each GPUResource should show, off the round's
    /// path.
    status: StatusWriter<StatusApi>,
    /// Writes the status each GPUTenant should show.
    tenant_status: StatusWriter<TenantStatusApi>,
    /// The GPU gauges are set from the same reading as the status.
    metrics: Metrics,
    /// The GPU states the gauges show: set again only when a round reads
    /// others (at 10,000 nodes, 20,000 series rebuilt every round).
    gpus_shown: Vec<GpuState>,
    key_to_policy_error: HashMap<ObjectKey, (Reason, String)>,
    /// Problems found, and since when: a problem gets an Event once it
    /// has stood for a moment (watches deliver objects made together in
    /// any order), and once, not every round.
    standing: Standing,
    /// `(pod UID, GPU)` of pods told last round that a GPU they hold is
    /// unhealthy.
    unhealthy_reported: HashSet<(String, String)>,
}

// === impl Reporter ===

impl Reporter {
    /// A reporter of what `shared` holds; status is written by `status`
    /// (GPUResources) and `tenant_status` (GPUTenants).
    pub fn new(
        shared: Arc<WatchedIndex>,
        events: EventSink,
        status: StatusWriter<StatusApi>,
        tenant_status: StatusWriter<TenantStatusApi>,
        metrics: Metrics,
    ) -> Self {
        Self {
            shared,
            events,
            status,
            tenant_status,
            metrics,
            key_to_policy_error: HashMap::new(),
            standing: Standing::default(),
            unhealthy_reported: HashSet::new(),
            gpus_shown: Vec::new(),
        }
    }

    /// Reports one round: Events for new problems and policy errors, the
    /// status every GPUResource should show, and the GPU gauges.
    pub fn report(&mut self, outcome: RoundOutcome) {
        for key in &outcome.decided {
            self.key_to_policy_error.remove(key);
        }
        self.metrics.waiting(
            outcome
                .waiting
                .iter()
                .map(|(policy, plan)| (policy.as_str(), plan.by_reason.as_slice(), plan.oldest_ms)),
        );
        let RoundReport {
            resources: views,
            counts: key_to_counts,
            problems,
            unhealthy,
            outdated,
            gpus,
            tenants,
        } = self.shared.index().round_report(now_ms());
        if gpus != self.gpus_shown {
            self.metrics.gpus(&gpus);
            self.gpus_shown = gpus;
        }
        self.report_tenants(&tenants);
        let counts: Vec<PodCounts> = views
            .iter()
            .map(|v| key_to_counts.get(&v.key).copied().unwrap_or_default())
            .collect();
        self.report_unhealthy(&unhealthy);
        self.report_policy_errors(&views, outcome.policy_errors);
        self.report_problems(&views, &problems);
        let keys: HashSet<&ObjectKey> = views.iter().map(|v| &v.key).collect();
        self.status.retain(&keys);
        self.key_to_policy_error.retain(|key, _| keys.contains(key));
        self.want_statuses(&views, counts, &problems, &unhealthy, &outdated);
    }

    /// Events for policy errors new since the last round, on the
    /// GPUResource and on a few of the pods that wait because of it.
    fn report_policy_errors(
        &mut self,
        views: &[ResourceView],
        policy_errors: HashMap<ObjectKey, (Reason, String)>,
    ) {
        for (key, error) in policy_errors {
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
    }

    /// The status each GPUResource (not being deleted) should show.
    fn want_statuses(
        &mut self,
        views: &[ResourceView],
        counts: Vec<PodCounts>,
        problems: &[Problem],
        unhealthy: &[UnhealthyHolding],
        outdated: &BTreeMap<ObjectKey, OutdatedHoldings>,
    ) {
        for (view, counts) in views.iter().zip(counts) {
            if view.deleting {
                continue;
            }
            let unhealthy: Vec<&UnhealthyHolding> = unhealthy
                .iter()
                .filter(|u| u.resource == view.key)
                .collect();
            let summary = WantedStatus::of(
                view,
                counts,
                problems,
                &unhealthy,
                outdated.get(&view.key),
                self.key_to_policy_error
                    .get(&view.key)
                    .map(|(reason, message)| (reason.as_str(), message.as_str())),
            );
            self.status.want(&view.key, summary);
        }
    }

    /// The status every GPUTenant should show, and the tenant gauges.
    fn report_tenants(&mut self, tenants: &[TenantView]) {
        let names: HashSet<&String> = tenants.iter().map(|t| &t.name).collect();
        self.tenant_status.retain(&names);
        self.metrics.tenants(tenants);
        for view in tenants {
            self.tenant_status
                .want(&view.name, WantedTenantStatus::of(view));
        }
    }

    fn report_problems(&mut self, views: &[ResourceView], problems: &[Problem]) {
        let messages: Vec<String> = problems.iter().map(Problem::to_string).collect();
        let to_tell = self
            .standing
            .sort(messages.iter().map(String::as_str), Instant::now());
        for at in to_tell {
            let (problem, message) = (&problems[at], &messages[at]);
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
                Subject::ResourceSlice(name) => resourceslice_ref(name),
            };
            tracing::info!(%message, "Problem");
            self.events
                .warning(reference, Reason::of(problem), "Allocate", message.clone());
        }
    }

    /// When a problem found will have stood long enough to be told: a
    /// round should run then, changes or not.
    pub fn next_due(&self) -> Option<Instant> {
        self.standing.next_due()
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
                    Reason::GpuUnhealthy,
                    "Allocate",
                    message,
                );
            }
            reported.insert(key);
        }
        self.unhealthy_reported = reported;
    }
}
