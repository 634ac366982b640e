//! Health rules: which events make a GPU unhealthy, and the faults seen so far.
//!
//! A GPU is unhealthy from its first critical event on: a double-bit ECC
//! error, or an XID that is not on the ignore list. The default ignore list
//! holds the XIDs that NVIDIA's Kubernetes device plugin attributes to the
//! application rather than the GPU ([`APPLICATION_XIDS`]).
//!
//! Faults seen through NVML events stick until the agent restarts: a GPU
//! comes back once the fault is fixed (usually a GPU reset or a reboot) and
//! the agent is restarted. Faults listed in an inventory file last as long as
//! the file lists them.

use std::collections::{BTreeMap, BTreeSet};

use super::source::{EventKind, HealthEvent};

/// XIDs caused by the application, not the GPU, ignored by default (the
/// list of NVIDIA's k8s-device-plugin): 13 graphics engine exception,
/// 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive
/// cleanup, 68 video processor exception, 109 context switch timeout.
pub const APPLICATION_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];

/// Which events count as critical.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthRules {
    ignored_xids: BTreeSet<u64>,
}

impl Default for HealthRules {
    fn default() -> Self {
        Self::ignoring(APPLICATION_XIDS)
    }
}

impl HealthRules {
    /// Rules that ignore exactly `xids` (an empty list makes every XID critical).
    pub fn ignoring(xids: impl IntoIterator<Item = u64>) -> Self {
        Self {
            ignored_xids: xids.into_iter().collect(),
        }
    }

    /// The ignored XIDs, ascending.
    pub fn ignored_xids(&self) -> impl Iterator<Item = u64> + '_ {
        self.ignored_xids.iter().copied()
    }

    /// Whether `kind` makes a GPU unhealthy.
    pub fn is_critical(&self, kind: EventKind) -> bool {
        match kind {
            EventKind::Xid(xid) => !self.ignored_xids.contains(&xid),
            EventKind::DoubleBitEcc => true,
        }
    }

    /// The earliest critical event among `events`.
    pub fn first_critical<'a>(
        &self,
        events: impl IntoIterator<Item = &'a HealthEvent>,
    ) -> Option<&'a HealthEvent> {
        events
            .into_iter()
            .filter(|e| self.is_critical(e.kind))
            .min_by_key(|e| e.at)
    }
}

/// How an event reads in `unhealthyReason`, e.g. `XID 79 at 2026-11-30T14:03:58Z`.
pub fn describe(event: &HealthEvent) -> String {
    let at = event
        .at
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or(event.at);
    match event.kind {
        EventKind::Xid(xid) => format!("XID {xid} at {at}"),
        EventKind::DoubleBitEcc => format!("double-bit ECC error at {at}"),
    }
}

/// The first critical event of each GPU seen through the source's events
/// since the agent started.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    uuid_to_first_fault: BTreeMap<String, HealthEvent>,
}

impl Faults {
    /// Records `event` if it is critical and its GPU had no fault yet;
    /// true when the GPU just became unhealthy.
    pub fn record(&mut self, rules: &HealthRules, event: HealthEvent) -> bool {
        if !rules.is_critical(event.kind) || self.uuid_to_first_fault.contains_key(&event.uuid) {
            return false;
        }
        self.uuid_to_first_fault.insert(event.uuid.clone(), event);
        true
    }

    /// The fault recorded for `uuid`.
    pub fn get(&self, uuid: &str) -> Option<&HealthEvent> {
        self.uuid_to_first_fault.get(uuid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(uuid: &str, kind: EventKind, at: &str) -> HealthEvent {
        HealthEvent {
            uuid: uuid.into(),
            kind,
            at: at.parse().unwrap(),
        }
    }

    #[test]
    fn application_xids_are_ignored_by_default_and_others_are_critical() {
        let rules = HealthRules::default();
        for xid in [13, 31, 43, 45, 68, 109] {
            assert!(!rules.is_critical(EventKind::Xid(xid)), "XID {xid}");
        }
        for xid in [48, 62, 63, 64, 74, 79, 94, 95, 999] {
            assert!(rules.is_critical(EventKind::Xid(xid)), "XID {xid}");
        }
        assert!(rules.is_critical(EventKind::DoubleBitEcc));
    }

    #[test]
    fn the_ignore_list_replaces_the_default() {
        let rules = HealthRules::ignoring([79]);
        assert!(!rules.is_critical(EventKind::Xid(79)));
        assert!(rules.is_critical(EventKind::Xid(13)));
        let strict = HealthRules::ignoring([]);
        assert!(strict.is_critical(EventKind::Xid(31)));
    }

    #[test]
    fn the_first_critical_event_wins_and_sticks() {
        let rules = HealthRules::default();
        let mut faults = Faults::default();
        assert!(!faults.record(
            &rules,
            event("GPU-a", EventKind::Xid(13), "2026-11-30T14:00:00Z")
        ));
        assert!(faults.get("GPU-a").is_none());
        assert!(faults.record(
            &rules,
            event("GPU-a", EventKind::Xid(79), "2026-11-30T14:03:58Z")
        ));
        assert!(!faults.record(
            &rules,
            event("GPU-a", EventKind::DoubleBitEcc, "2026-11-30T15:00:00Z")
        ));
        assert_eq!(
            describe(faults.get("GPU-a").unwrap()),
            "XID 79 at 2026-11-30T14:03:58Z"
        );
        assert!(faults.get("GPU-b").is_none());

        let events = [
            event("GPU-b", EventKind::DoubleBitEcc, "2026-11-30T16:00:00Z"),
            event("GPU-b", EventKind::Xid(31), "2026-11-30T12:00:00Z"),
            event("GPU-b", EventKind::Xid(48), "2026-11-30T13:00:00.250Z"),
        ];
        let first = rules.first_critical(&events).unwrap();
        assert_eq!(describe(first), "XID 48 at 2026-11-30T13:00:00Z");
    }
}
