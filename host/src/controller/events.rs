//! Kubernetes Events, published off the round's path: rounds queue them,
//! one task writes them (`events.k8s.io/v1`, aggregated by kube's
//! recorder).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

use crate::api::{GROUP, VERSION};
use crate::index::ObjectKey;

/// Events no queue should hold more of: past this, new ones are dropped
/// (and counted in the log), rounds never wait on Events.
const QUEUE: usize = 4096;

/// One Event to publish.
#[derive(Debug)]
struct Queued {
    reference: ObjectReference,
    warning: bool,
    reason: &'static str,
    action: &'static str,
    note: String,
}

/// Where rounds send Events. Cheap to clone.
#[derive(Clone)]
pub struct EventSink {
    sender: mpsc::Sender<Queued>,
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
    /// A sink and the task that publishes what it receives as `reporter`.
    pub fn start(client: Client, reporter: Reporter) -> (Self, tokio::task::JoinHandle<()>) {
        let (sender, receiver) = mpsc::channel(QUEUE);
        let task = tokio::spawn(publish(Recorder::new(client, reporter), receiver));
        (Self { sender }, task)
    }

    /// Queues a Normal event.
    pub fn normal(
        &self,
        reference: ObjectReference,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        self.queue(reference, false, reason, action, note);
    }

    /// Queues a Warning event.
    pub fn warning(
        &self,
        reference: ObjectReference,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        self.queue(reference, true, reason, action, note);
    }

    fn queue(
        &self,
        reference: ObjectReference,
        warning: bool,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        let queued = Queued {
            reference,
            warning,
            reason,
            action,
            note,
        };
        if let Err(error) = self.sender.try_send(queued) {
            tracing::warn!(%error, "Event queue full; dropping an Event");
        }
    }
}

async fn publish(recorder: Recorder, mut receiver: mpsc::Receiver<Queued>) {
    while let Some(queued) = receiver.recv().await {
        let event = Event {
            type_: if queued.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: queued.reason.into(),
            // Event notes are at most 1 kB.
            note: Some(truncate(queued.note, 1000)),
            action: queued.action.into(),
            secondary: None,
        };
        if let Err(error) = recorder.publish(&event, &queued.reference).await {
            tracing::warn!(
                %error,
                reason = queued.reason,
                object = ?queued.reference.name,
                "Cannot publish Event"
            );
        }
    }
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
