//! Kubernetes Events, published off the round's path: rounds queue them,
//! one task writes them (`events.k8s.io/v1`, aggregated by kube's
//! recorder, except [`EventSink::distinct`] ones).
//!
//! The one Event sent per pod bound (`Allocated`, [`EventSink::per_pod`]) is
//! rate-limited: an Event is a write like a binding, and under a burst of
//! thousands of pods one Event per pod would take as much of the API
//! server's write budget as the bindings themselves. Past the rate, the
//! pod's annotations (`wasmgpu.io/allocation`) still say what it got; the
//! Events not sent are counted in `wasmgpu_events_unsent_total`. Warnings
//! are never rate-limited.
//!
//! Every reason an Event carries is a [`Reason`]; docs/CONTROLLER.md lists
//! them all (`host/tests/docs.rs` fails when the two differ).

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::connection::error_chain;
use super::metrics::Metrics;
use wasmgpu_api::{GROUP, VERSION};
use wasmgpu_index::{ObjectKey, Problem};

/// Declares [`Reason`] and [`Reason::ALL`] from one list, so that no
/// reason can be missing from `ALL`.
macro_rules! reasons {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// The `reason` of an Event the controller publishes.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Reason {
            $($(#[$doc])* $variant,)*
        }

        impl Reason {
            /// Every reason.
            pub const ALL: &[Reason] = &[$(Reason::$variant,)*];

            /// The reason as the Event carries it (CamelCase).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $name,)*
                }
            }
        }
    };
}

reasons! {
    /// Pod: bound, with its node, GPUs and policy (rate-limited).
    Allocated = "Allocated",
    /// Pod, GPUResource: the host refused a decision of the policy.
    DecisionRefused = "DecisionRefused",
    /// Pod: the policy says it cannot be placed as requested. ConfigMap:
    /// a policy version was refused on load.
    PolicyRejected = "PolicyRejected",
    /// Pod: its gang is not placed yet (all or nothing), once per reason.
    GangWaiting = "GangWaiting",
    /// Pod: the policy left it waiting, with the policy's reason (e.g. no
    /// node has room now, its tenant is at its limit), once per reason.
    Waiting = "Waiting",
    /// Pod: a GPU it holds turned unhealthy.
    GpuUnhealthy = "GPUUnhealthy",
    /// GPUResource and its first waiting pods: no policy of that name is
    /// loaded.
    PolicyNotFound = "PolicyNotFound",
    /// GPUResource and its first waiting pods: the policy failed.
    PolicyFailed = "PolicyFailed",
    /// ConfigMap: a policy version was loaded.
    PolicyLoaded = "PolicyLoaded",
    /// ConfigMap: its `wasmgpu.io/record-rounds` annotation is unreadable.
    InvalidAnnotation = "InvalidAnnotation",
    /// Pod: [`Problem::NoResourceAnnotation`].
    NoGpuResourceAnnotation = "NoGPUResourceAnnotation",
    /// Pod: [`Problem::MissingResource`].
    GpuResourceNotFound = "GPUResourceNotFound",
    /// GPUResource: [`Problem::InvalidResource`].
    InvalidSpec = "InvalidSpec",
    /// Pod: [`Problem::MissingPodGroup`].
    PodGroupNotFound = "PodGroupNotFound",
    /// Pod: [`Problem::LimitMismatch`], [`Problem::UnreadableLimit`].
    GpuLimitMismatch = "GPULimitMismatch",
    /// Pod: [`Problem::GangTimedOut`].
    GangTimedOut = "GangTimedOut",
    /// Pod: [`Problem::Unsatisfiable`], [`Problem::UnsatisfiableClaim`].
    Unsatisfiable = "Unsatisfiable",
    /// ResourceSlice: [`Problem::UnusableResourcePool`].
    UnusableResourcePool = "UnusableResourcePool",
    /// Pod: [`Problem::UnusableClaim`].
    UnusableClaim = "UnusableClaim",
    /// Pod: GPUs are nominated for it and its victims are being evicted.
    Preempting = "Preempting",
    /// Pod: evicted so that a pod of higher priority can take its GPUs.
    Preempted = "Preempted",
    /// Pod: its preemption was dropped, an eviction being refused (a PDB).
    PreemptionBlocked = "PreemptionBlocked",
    /// Pod: the ResourceClaim for its extended resources was made (or
    /// found made) and recorded in its status.
    ExtendedResourceClaim = "ExtendedResourceClaim",
}

// === impl Reason ===

impl Reason {
    /// The reason of the Event that reports `problem`. A new kind of
    /// problem needs its reason here (and a row in docs/CONTROLLER.md).
    pub fn of(problem: &Problem) -> Self {
        match problem {
            Problem::NoResourceAnnotation { .. } => Self::NoGpuResourceAnnotation,
            Problem::MissingResource { .. } => Self::GpuResourceNotFound,
            Problem::InvalidResource { .. } => Self::InvalidSpec,
            Problem::MissingPodGroup { .. } => Self::PodGroupNotFound,
            Problem::LimitMismatch { .. } | Problem::UnreadableLimit { .. } => {
                Self::GpuLimitMismatch
            }
            Problem::GangTimedOut { .. } => Self::GangTimedOut,
            Problem::Unsatisfiable { .. } | Problem::UnsatisfiableClaim { .. } => {
                Self::Unsatisfiable
            }
            Problem::UnusableResourcePool { .. } => Self::UnusableResourcePool,
            Problem::UnusableClaim { .. } => Self::UnusableClaim,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Events no queue should hold more of: past this, new ones are dropped
/// (and counted in the log), rounds never wait on Events.
const QUEUE: usize = 4096;

/// One Event to publish.
#[derive(Debug)]
struct Queued {
    reference: ObjectReference,
    warning: bool,
    reason: Reason,
    action: &'static str,
    note: String,
    /// Its own Event, never folded into a series with an earlier one.
    distinct: bool,
}

/// Where rounds send Events. Cheap to clone.
#[derive(Clone)]
pub struct EventSink {
    sender: mpsc::Sender<Queued>,
    /// Shared by the clones: per-pod Events sent per second at most.
    per_pod: Arc<Mutex<TokenBucket>>,
    metrics: Metrics,
}

/// Allows `rate` per second on average and bursts of `rate`.
#[derive(Debug)]
struct TokenBucket {
    rate: f64,
    tokens: f64,
    refilled: Instant,
}

impl TokenBucket {
    fn new(rate: u32) -> Self {
        Self {
            rate: f64::from(rate),
            tokens: f64::from(rate),
            refilled: Instant::now(),
        }
    }

    /// Takes one token if there is one at `now`.
    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The object an Event is about.
pub fn pod_ref(pod: &ObjectKey, uid: Option<&str>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        uid: uid.map(Into::into),
        ..Default::default()
    }
}

/// The ResourceSlice (cluster-scoped) an Event is about.
pub fn resourceslice_ref(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("resource.k8s.io/v1".into()),
        kind: Some("ResourceSlice".into()),
        name: Some(name.into()),
        ..Default::default()
    }
}

/// The GPUResource an Event is about.
pub fn gpuresource_ref(resource: &ObjectKey, uid: Option<&str>) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{GROUP}/{VERSION}")),
        kind: Some("GPUResource".into()),
        namespace: Some(resource.namespace.clone()),
        name: Some(resource.name.clone()),
        uid: uid.map(Into::into),
        ..Default::default()
    }
}

// === impl EventSink ===

impl EventSink {
    /// A sink and the task that publishes what it receives as `reporter`;
    /// at most `per_pod_rate` [`EventSink::per_pod`] Events a second.
    pub fn start(
        client: Client,
        reporter: Reporter,
        metrics: Metrics,
        per_pod_rate: u32,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (sender, receiver) = mpsc::channel(QUEUE);
        let publishing = publish(client, reporter, metrics.clone(), receiver);
        let task = tokio::spawn(publishing.instrument(tracing::info_span!("event_writer")));
        let sink = Self {
            sender,
            per_pod: Arc::new(Mutex::new(TokenBucket::new(per_pod_rate))),
            metrics,
        };
        (sink, task)
    }

    /// Queues a Normal event sent for every pod of a kind (`Allocated`,
    /// `Waiting`), unless more than the rate were sent in the last second;
    /// false when it was not queued.
    pub fn per_pod(
        &self,
        reference: ObjectReference,
        reason: Reason,
        action: &'static str,
        note: String,
    ) -> bool {
        let allowed = wasmgpu_support::lock(&self.per_pod).take(Instant::now());
        if !allowed {
            self.metrics.event_unsent(reason.as_str(), "rate-limited");
            return false;
        }
        self.queue(reference, false, reason, action, note, false);
        true
    }

    /// Queues a Normal event.
    pub fn normal(
        &self,
        reference: ObjectReference,
        reason: Reason,
        action: &'static str,
        note: String,
    ) {
        self.queue(reference, false, reason, action, note, false);
    }

    /// Queues a Warning event.
    pub fn warning(
        &self,
        reference: ObjectReference,
        reason: Reason,
        action: &'static str,
        note: String,
    ) {
        self.queue(reference, true, reason, action, note, false);
    }

    /// Queues an Event that is never aggregated with earlier ones of the
    /// same reason (the recorder keeps a series' first note: a policy's
    /// successive loads each need their own).
    pub fn distinct(
        &self,
        reference: ObjectReference,
        warning: bool,
        reason: Reason,
        action: &'static str,
        note: String,
    ) {
        self.queue(reference, warning, reason, action, note, true);
    }

    fn queue(
        &self,
        reference: ObjectReference,
        warning: bool,
        reason: Reason,
        action: &'static str,
        note: String,
        distinct: bool,
    ) {
        self.send(Queued {
            reference,
            warning,
            reason,
            action,
            note,
            distinct,
        });
    }

    fn send(&self, queued: Queued) {
        let reason = queued.reason;
        if let Err(error) = self.sender.try_send(queued) {
            self.metrics.event_unsent(reason.as_str(), "queue-full");
            tracing::warn!(%error, %reason, "Event queue full; dropping an Event");
        }
    }
}

/// How long one Event write may take: Events never hold up anything else,
/// but a hung write must not hold up the Events behind it.
const EVENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs one Event write under [`EVENT_TIMEOUT`] and counts it in
/// `wasmgpu_api_writes_total{kind="event"}`.
async fn timed<T>(
    metrics: &Metrics,
    write: impl Future<Output = Result<T, kube::Error>>,
) -> Result<(), String> {
    let result = match tokio::time::timeout(EVENT_TIMEOUT, write).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(error),
        Err(_) => {
            metrics.write("event", "timeout");
            return Err(format!("no answer within {EVENT_TIMEOUT:?}"));
        }
    };
    metrics.write(
        "event",
        match &result {
            Ok(()) => "ok".to_string(),
            Err(kube::Error::Api(status)) => status.code.to_string(),
            Err(_) => "error".to_string(),
        },
    );
    result.map_err(|error| error_chain(&error))
}

async fn publish(
    client: Client,
    reporter: Reporter,
    metrics: Metrics,
    mut receiver: mpsc::Receiver<Queued>,
) {
    let recorder = Recorder::new(client.clone(), reporter.clone());
    // One line when Events start failing and one when they are published
    // again: during an outage every write fails, and the log must not grow
    // with the Events (the failures are counted in
    // `wasmgpu_api_writes_total{kind="event"}`).
    let mut failing = false;
    while let Some(queued) = receiver.recv().await {
        let (reason, kind, object) = (
            queued.reason.as_str(),
            queued.reference.kind.clone().unwrap_or_default(),
            queued.reference.name.clone(),
        );
        let result = if queued.distinct {
            publish_distinct(&client, &reporter, &metrics, queued).await
        } else {
            publish_one(&recorder, &metrics, queued).await
        };
        match result {
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(%error, reason, kind, ?object, "Cannot publish Events; the next ones that fail are not logged until one is published");
            }
            Err(error) => {
                tracing::debug!(%error, reason, kind, ?object, "Cannot publish Event");
            }
            Ok(()) if failing => {
                failing = false;
                tracing::info!("Events are published again");
            }
            Ok(()) => {}
        }
    }
}

/// Publishes `queued` through the recorder (a series per object and
/// reason).
async fn publish_one(recorder: &Recorder, metrics: &Metrics, queued: Queued) -> Result<(), String> {
    let event = Event {
        type_: if queued.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: queued.reason.as_str().into(),
        // Event notes are at most 1 kB.
        note: Some(truncate(queued.note, 1000)),
        action: queued.action.into(),
        secondary: None,
    };
    timed(metrics, recorder.publish(&event, &queued.reference)).await
}

/// Creates `queued` as an Event of its own.
async fn publish_distinct(
    client: &Client,
    reporter: &Reporter,
    metrics: &Metrics,
    queued: Queued,
) -> Result<(), String> {
    let namespace = queued
        .reference
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let now = Timestamp::now();
    let event = K8sEvent {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}.{:x}",
                queued
                    .reference
                    .name
                    .as_deref()
                    .unwrap_or(&reporter.controller),
                now.as_nanosecond()
            )),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        action: Some(queued.action.into()),
        reason: Some(queued.reason.as_str().into()),
        note: Some(truncate(queued.note, 1000)),
        event_time: Some(MicroTime(now)),
        regarding: Some(queued.reference.clone()),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(
            reporter
                .instance
                .clone()
                .unwrap_or_else(|| reporter.controller.clone()),
        ),
        type_: Some(if queued.warning { "Warning" } else { "Normal" }.into()),
        ..Default::default()
    };
    let api: Api<K8sEvent> = Api::namespaced(client.clone(), &namespace);
    timed(metrics, api.create(&PostParams::default(), &event)).await
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_bucket_allows_a_burst_of_the_rate_then_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket {
            rate: 10.0,
            tokens: 10.0,
            refilled: start,
        };
        let burst = (0..20).filter(|_| bucket.take(start)).count();
        assert_eq!(burst, 10);
        // A tenth of a second later: one more.
        let later = start + Duration::from_millis(100);
        assert!(bucket.take(later));
        assert!(!bucket.take(later));
        // Idle for a minute: still only a burst of the rate.
        let idle = later + Duration::from_secs(60);
        assert_eq!((0..20).filter(|_| bucket.take(idle)).count(), 10);
    }

    #[test]
    fn a_problem_event_carries_the_reason_of_its_kind() {
        let pod = ObjectKey::new("ml", "trainer-0");
        let resource = ObjectKey::new("ml", "trainer");
        let group = ObjectKey::new("ml", "gang");
        let problems = [
            Problem::NoResourceAnnotation { pod: pod.clone() },
            Problem::MissingResource {
                pod: pod.clone(),
                resource: resource.clone(),
            },
            Problem::InvalidResource {
                resource: resource.clone(),
                error: wasmgpu_api::InvalidSpec {
                    field: "count",
                    reason: "must be 1 to 16".into(),
                },
            },
            Problem::MissingPodGroup {
                pod: pod.clone(),
                resource: resource.clone(),
                group: group.clone(),
            },
            Problem::LimitMismatch {
                pod: pod.clone(),
                resource: resource.clone(),
                limit: 2,
                count: 1,
            },
            Problem::UnreadableLimit {
                pod: pod.clone(),
                error: wasmgpu_api::UnreadableGpuLimit {
                    container: "main".into(),
                    value: "1.5".into(),
                },
            },
            Problem::GangTimedOut {
                pod: pod.clone(),
                resource: resource.clone(),
                group,
                timeout_s: 60,
                min_member: 4,
                bound: 1,
                waiting: 2,
            },
            Problem::Unsatisfiable {
                pod: pod.clone(),
                resource,
                reason: "no node has 9 GPUs".into(),
            },
            Problem::UnusableClaim {
                pod,
                claim: "ml/train".into(),
                reason: "DeviceClass \"x\" does not exist".into(),
            },
        ];
        let reasons = [
            "NoGPUResourceAnnotation",
            "GPUResourceNotFound",
            "InvalidSpec",
            "PodGroupNotFound",
            "GPULimitMismatch",
            "GPULimitMismatch",
            "GangTimedOut",
            "Unsatisfiable",
            "UnusableClaim",
        ];
        for (problem, reason) in problems.iter().zip(reasons) {
            assert_eq!(Reason::of(problem).as_str(), reason, "{problem:?}");
        }
    }

    #[test]
    fn reasons_are_distinct_camel_case() {
        let mut seen = std::collections::HashSet::new();
        for reason in Reason::ALL {
            let name = reason.as_str();
            assert!(seen.insert(name), "{name} twice");
            assert!(
                name.starts_with(|c: char| c.is_ascii_uppercase())
                    && name.chars().all(|c| c.is_ascii_alphanumeric()),
                "{name} is not CamelCase"
            );
        }
    }

    #[test]
    fn a_zero_rate_sends_none() {
        let mut bucket = TokenBucket::new(0);
        assert!(!bucket.take(Instant::now() + Duration::from_secs(5)));
    }
}
