//! What a policy's round implies, as plain data: the pure half of a round.
//!
//! ```text
//!  snapshot + verdict ──▶ plan_verdict ──▶ VerdictPlan { events, refused resources, unnamed }
//!  failure + retry    ──▶ failure_message                 │
//!                                                         ▼
//!                          Rounds (round.rs): sends the Events, marks the
//!                          GPUResources, starts the bindings (the effects)
//! ```
//!
//! No I/O, no clock, no lock: unit tests build a snapshot and a verdict and
//! read the plan.

use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::validate::Verdict;
use wasmgpu_index::ObjectKey;

use super::events::Reason;

/// Why pods are still pending after a policy's round, by class: the
/// `reason` label of `wasmgpu_pods_waiting` (a fixed set, so the gauge's
/// cardinality stays bounded whatever the policies write).
pub(crate) const WAITING_REASONS: &[&str] = &[
    "policy-wait",
    "gang",
    "rejected",
    "refused",
    "preempting",
    "unmentioned",
    "policy-failed",
    "no-policy",
];

/// The pods still pending after one policy's round, by class, and how long
/// the oldest of them has waited.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WaitingPlan {
    /// `(class, pods)` for each class of [`WAITING_REASONS`] with pods.
    pub by_reason: Vec<(&'static str, usize)>,
    /// Milliseconds the oldest still-pending pod has existed at `now_ms`.
    pub oldest_ms: Option<u64>,
}

/// What stays pending after `verdict` on `snapshot`: waits the policy chose
/// (`policy-wait`), gang members held back or waiting for their gang
/// (`gang`), rejections, refusals, preemptors waiting for their victims to
/// go (`preempting`), and pods the policy did not mention.
pub(crate) fn plan_waiting(snapshot: &HostSnapshot, verdict: &Verdict, now_ms: u64) -> WaitingPlan {
    let pending = &snapshot.snapshot.pending;
    let gang_waits = verdict.waiting.iter().filter(|w| w.gang.is_some()).count();
    let refused: std::collections::HashSet<&str> = verdict
        .refused
        .iter()
        .filter_map(|r| r.pod.as_deref())
        .collect();
    let decided = verdict.accepted.len()
        + verdict.preempting.len()
        + verdict.waiting.len()
        + verdict.rejected.len()
        + refused.len();
    let counts = [
        ("policy-wait", verdict.waiting.len() - gang_waits),
        ("gang", gang_waits),
        ("rejected", verdict.rejected.len()),
        ("refused", refused.len()),
        ("preempting", verdict.preempting.len()),
        ("unmentioned", pending.len().saturating_sub(decided)),
    ];
    let placed: std::collections::HashSet<usize> =
        verdict.accepted.iter().map(|a| a.request).collect();
    let oldest_ms = pending
        .iter()
        .enumerate()
        .filter(|(i, _)| !placed.contains(i))
        .map(|(_, r)| now_ms.saturating_sub(r.created_ms))
        .max();
    WaitingPlan {
        by_reason: counts.into_iter().filter(|(_, n)| *n > 0).collect(),
        oldest_ms,
    }
}

/// Every pod of `snapshot` waits for one reason (its policy failed, or none
/// is loaded).
pub(crate) fn plan_all_waiting(
    snapshot: &HostSnapshot,
    reason: &'static str,
    now_ms: u64,
) -> WaitingPlan {
    debug_assert!(
        WAITING_REASONS.contains(&reason),
        "{reason} is not a waiting reason"
    );
    let pending = &snapshot.snapshot.pending;
    WaitingPlan {
        by_reason: vec![(reason, pending.len())],
        oldest_ms: pending
            .iter()
            .map(|r| now_ms.saturating_sub(r.created_ms))
            .max(),
    }
}

/// An Event a round sends on a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodEvent {
    /// The pod.
    pub pod: ObjectKey,
    /// Warning (a decision refused or rejected) or Normal.
    pub warning: bool,
    /// The Event's reason.
    pub reason: Reason,
    /// The note.
    pub note: String,
    /// Sent only once per pod and note (a gang member told why it waits,
    /// round after round).
    pub once: bool,
}

/// What a verdict implies besides the bindings.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct VerdictPlan {
    /// Events on pods, in the order to send them.
    pub events: Vec<PodEvent>,
    /// GPUResources whose pod's decision was refused, and why: their status
    /// says so instead of "decided".
    pub refused_resources: Vec<(ObjectKey, String)>,
    /// Refused decisions that name no pod (only logged).
    pub unnamed_refusals: Vec<String>,
}

/// The Events and GPUResource marks of `policy`'s `verdict` on `snapshot`:
/// a Warning on each pod a refused decision names, a Normal `GangWaiting`
/// on each gang member left waiting or rejected (once per reason), a Normal
/// `Waiting` on every other pod left waiting (once per reason), and a
/// Warning `PolicyRejected` on each pod the policy rejects.
pub(crate) fn plan_verdict(
    policy: &str,
    snapshot: &HostSnapshot,
    verdict: &Verdict,
) -> VerdictPlan {
    let mut plan = VerdictPlan::default();
    for refused in &verdict.refused {
        let note = format!(
            "policy {policy} decided {}, refused: {}",
            refused.decision, refused.reason
        );
        let Some(pod) = refused.pod.as_deref().and_then(ObjectKey::parse) else {
            plan.unnamed_refusals.push(note);
            continue;
        };
        if let Some(resource) = resource_of(snapshot, &pod) {
            plan.refused_resources.push((resource, note.clone()));
        }
        plan.events.push(PodEvent {
            pod,
            warning: true,
            reason: Reason::DecisionRefused,
            note,
            once: false,
        });
    }
    let gang_waits = verdict
        .waiting
        .iter()
        .chain(&verdict.rejected)
        .filter(|w| w.gang.is_some());
    for wait in gang_waits {
        if let Some(pod) = ObjectKey::parse(&wait.pod) {
            plan.events.push(PodEvent {
                pod,
                warning: false,
                reason: Reason::GangWaiting,
                note: wait.reason.clone(),
                once: true,
            });
        }
    }
    for wait in verdict.waiting.iter().filter(|w| w.gang.is_none()) {
        if let Some(pod) = ObjectKey::parse(&wait.pod) {
            plan.events.push(PodEvent {
                pod,
                warning: false,
                reason: Reason::Waiting,
                note: format!("policy {policy}: {}", wait.reason),
                once: true,
            });
        }
    }
    for rejected in &verdict.rejected {
        if let Some(pod) = ObjectKey::parse(&rejected.pod) {
            plan.events.push(PodEvent {
                pod,
                warning: true,
                reason: Reason::PolicyRejected,
                note: format!(
                    "policy {policy} says the pod cannot be placed as requested: {}",
                    rejected.reason
                ),
                once: false,
            });
        }
    }
    plan
}

/// What the pods of a policy whose round failed are told: the failure, the
/// last good version's failure when it was retried too, and that they wait.
pub(crate) fn failure_message(
    policy: &str,
    digest: &str,
    error: &str,
    last_good: Option<(&str, &str)>,
) -> String {
    let mut message = format!("policy {policy} ({digest}) failed: {error}");
    if let Some((digest, again)) = last_good {
        message.push_str(&format!(
            "; the last good version ({digest}) failed too: {again}"
        ));
    }
    message.push_str("; its pods wait");
    message
}

/// The GPUResources the pending pods of `snapshot` reference.
pub(crate) fn resources_of(snapshot: &HostSnapshot) -> std::collections::HashSet<ObjectKey> {
    snapshot
        .resources
        .iter()
        .flatten()
        .filter_map(|r| ObjectKey::parse(r))
        .collect()
}

/// The GPUResource `pod` references, when it is pending in `snapshot`.
pub(crate) fn resource_of(snapshot: &HostSnapshot, pod: &ObjectKey) -> Option<ObjectKey> {
    let name = pod.to_string();
    let position = snapshot
        .snapshot
        .pending
        .iter()
        .position(|r| r.pod == name)?;
    ObjectKey::parse(snapshot.resource(position)?)
}

#[cfg(test)]
mod tests {
    use wasmgpu_contract::testing::{gang, node, request, snapshot};
    use wasmgpu_contract::validate::validate_host as validate;
    use wasmgpu_contract::{Sharing, assign, reject, wait};

    use super::*;

    fn key(text: &str) -> ObjectKey {
        ObjectKey::parse(text).unwrap()
    }

    /// One node of two GPUs; pods ns/a, ns/b, ns/c, ns/d; c and d a gang of 2.
    fn cluster() -> HostSnapshot {
        let mut snap = snapshot(
            vec![node("n", 2, "NVIDIA L4", 23034)],
            ["ns/a", "ns/b", "ns/c", "ns/d"]
                .iter()
                .map(|pod| request(pod, 1, Sharing::Exclusive, 0))
                .collect(),
        );
        gang(&mut snap, "ns/pair", 2, &[2, 3]);
        let mut host = HostSnapshot::from_snapshot(snap);
        host.resources = vec![Some("ns/gpus".into()); 4];
        host
    }

    #[test]
    fn pods_left_pending_are_counted_by_why() {
        let mut snap = cluster();
        for (i, r) in snap.snapshot.pending.iter_mut().enumerate() {
            r.created_ms = 1_000 * i as u64;
        }
        // a placed; b takes a's GPU (refused); c waits (its gang holds d
        // back too); nothing for nobody else.
        let verdict = validate(
            &snap,
            &[
                assign(0, 0, vec![0]),
                assign(1, 0, vec![0]),
                wait(2, "later"),
            ],
        );
        let plan = plan_waiting(&snap, &verdict, 10_000);
        let count = |reason: &str| {
            plan.by_reason
                .iter()
                .find(|(r, _)| *r == reason)
                .map_or(0, |(_, n)| *n)
        };
        assert_eq!(count("refused"), 1, "{plan:?}");
        assert_eq!(
            count("gang") + count("policy-wait") + count("unmentioned"),
            2,
            "{plan:?}"
        );
        assert_eq!(
            count("gang"),
            verdict.waiting.iter().filter(|w| w.gang.is_some()).count()
        );
        // The oldest still pending is b (created at 1 s; a was placed).
        assert_eq!(plan.oldest_ms, Some(9_000));
        for (reason, _) in &plan.by_reason {
            assert!(WAITING_REASONS.contains(reason));
        }
        let failed = plan_all_waiting(&snap, "policy-failed", 10_000);
        assert_eq!(failed.by_reason, [("policy-failed", 4)]);
        assert_eq!(failed.oldest_ms, Some(10_000));
    }

    #[test]
    fn a_refused_decision_warns_its_pod_and_marks_its_resource() {
        let snap = cluster();
        // b takes a's GPU: refused.
        let verdict = validate(&snap, &[assign(0, 0, vec![0]), assign(1, 0, vec![0])]);
        let plan = plan_verdict("binpack", &snap, &verdict);
        assert_eq!(plan.events.len(), 1);
        let event = &plan.events[0];
        assert_eq!(
            (event.pod.clone(), event.warning, event.reason, event.once),
            (key("ns/b"), true, Reason::DecisionRefused, false)
        );
        assert!(
            event.note.starts_with("policy binpack decided "),
            "{}",
            event.note
        );
        assert!(event.note.contains("refused:"), "{}", event.note);
        assert_eq!(
            plan.refused_resources,
            [(key("ns/gpus"), event.note.clone())]
        );
        assert!(plan.unnamed_refusals.is_empty());
    }

    #[test]
    fn a_decision_naming_no_pod_is_only_logged() {
        let snap = cluster();
        let verdict = validate(&snap, &[assign(9, 0, vec![0])]);
        let plan = plan_verdict("binpack", &snap, &verdict);
        assert!(plan.events.is_empty() && plan.refused_resources.is_empty());
        assert_eq!(plan.unnamed_refusals.len(), 1);
        assert!(plan.unnamed_refusals[0].contains("refused"), "{:?}", plan);
    }

    #[test]
    fn gang_members_left_waiting_are_told_once_and_rejections_warn() {
        let snap = cluster();
        // One member of the pair placed: both wait (all or nothing); a is
        // rejected, b waits outside any gang.
        let verdict = validate(
            &snap,
            &[
                reject(0, "never fits"),
                wait(1, "no room"),
                assign(2, 0, vec![1]),
                wait(3, "no room"),
            ],
        );
        let plan = plan_verdict("binpack", &snap, &verdict);
        let gang: Vec<_> = plan
            .events
            .iter()
            .filter(|e| e.reason == Reason::GangWaiting)
            .map(|e| (e.pod.to_string(), e.once, e.warning))
            .collect();
        assert_eq!(
            gang,
            [
                ("ns/d".to_string(), true, false),
                ("ns/c".to_string(), true, false)
            ]
        );
        let rejected: Vec<_> = plan
            .events
            .iter()
            .filter(|e| e.reason == Reason::PolicyRejected)
            .collect();
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].pod, key("ns/a"));
        assert_eq!(
            rejected[0].note,
            "policy binpack says the pod cannot be placed as requested: never fits"
        );
        // b waits outside any gang: told once why, as the policy says.
        let b: Vec<_> = plan
            .events
            .iter()
            .filter(|e| e.pod == key("ns/b"))
            .map(|e| (e.reason, e.once, e.note.as_str()))
            .collect();
        assert_eq!(b, [(Reason::Waiting, true, "policy binpack: no room")]);
    }

    #[test]
    fn a_failure_says_what_failed_and_that_the_pods_wait() {
        assert_eq!(
            failure_message("binpack", "sha256:1", "out of fuel", None),
            "policy binpack (sha256:1) failed: out of fuel; its pods wait"
        );
        assert_eq!(
            failure_message(
                "binpack",
                "sha256:2",
                "trap",
                Some(("sha256:1", "trap too"))
            ),
            "policy binpack (sha256:2) failed: trap; the last good version (sha256:1) failed too: trap too; its pods wait"
        );
    }

    #[test]
    fn resources_are_read_from_the_pending_requests() {
        let snap = cluster();
        assert_eq!(resources_of(&snap).len(), 1);
        assert_eq!(resource_of(&snap, &key("ns/c")), Some(key("ns/gpus")));
        assert_eq!(resource_of(&snap, &key("ns/zz")), None);
    }
}
