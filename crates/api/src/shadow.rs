//! # Shadow comparison
//!
//! A shadow policy decides on the same snapshot as its primary, after it;
//! its decisions are validated like the primary's and compared with what
//! the primary's verdict placed, pod by pod. Nothing it decides is applied.
//!
//! ```text
//!  primary's verdict.accepted ──┐
//!                               ├─▶ compare ─▶ Comparison { counts by Outcome, differences }
//!  shadow's verdict (validated) ┘                 │
//!                                                 ▼
//!                          ShadowStatus::compared / failed / skipped
//!                          (cumulative counts, last rounds, bounded in size)
//! ```
//!
//! Pure and synchronous: no I/O, no clock (times come in as text).

use std::collections::{BTreeMap, BTreeSet};

use crate::policy::{
    PlacedOn, SHADOW_DIFFERENCES_KEPT, SHADOW_ROUNDS_KEPT, ShadowCounts, ShadowDifference,
    ShadowRound, ShadowStatus,
};
use wasmgpu_contract::validate::{Placement, Verdict};

/// The most bytes a [`ShadowStatus`] takes as JSON: it lives in an
/// annotation of a ConfigMap that may also carry its component.
pub const MAX_STATUS_BYTES: usize = 16 << 10;
/// The longest reason or error kept, in bytes.
const MAX_TEXT_BYTES: usize = 300;

/// How the shadow's decision on one pod compared with the primary's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Same node, same GPUs.
    Same,
    /// Same node, other GPUs.
    SameNodeOtherGpus,
    /// Another node.
    OtherNode,
    /// Placed by the primary only.
    PrimaryOnly,
    /// Placed by the shadow only.
    ShadowOnly,
    /// A decision of the shadow the host refused.
    Refused,
}

impl Outcome {
    /// Every outcome, in the order they are shown.
    pub const ALL: [Outcome; 6] = [
        Outcome::Same,
        Outcome::SameNodeOtherGpus,
        Outcome::OtherNode,
        Outcome::PrimaryOnly,
        Outcome::ShadowOnly,
        Outcome::Refused,
    ];

    /// A short, stable label (metrics, JSON).
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Same => "same",
            Outcome::SameNodeOtherGpus => "same-node-other-gpus",
            Outcome::OtherNode => "other-node",
            Outcome::PrimaryOnly => "primary-only",
            Outcome::ShadowOnly => "shadow-only",
            Outcome::Refused => "refused",
        }
    }
}

/// One round's comparison.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Pods (and refused decisions) by outcome.
    pub counts: ShadowCounts,
    /// Every pod decided differently, sorted by pod.
    pub differences: Vec<ShadowDifference>,
}

// === impl ShadowCounts ===

impl ShadowCounts {
    /// The count of `outcome`.
    pub fn get(&self, outcome: Outcome) -> u64 {
        match outcome {
            Outcome::Same => self.same,
            Outcome::SameNodeOtherGpus => self.same_node_other_gpus,
            Outcome::OtherNode => self.other_node,
            Outcome::PrimaryOnly => self.primary_only,
            Outcome::ShadowOnly => self.shadow_only,
            Outcome::Refused => self.refused,
        }
    }

    fn bump(&mut self, outcome: Outcome) {
        let count = match outcome {
            Outcome::Same => &mut self.same,
            Outcome::SameNodeOtherGpus => &mut self.same_node_other_gpus,
            Outcome::OtherNode => &mut self.other_node,
            Outcome::PrimaryOnly => &mut self.primary_only,
            Outcome::ShadowOnly => &mut self.shadow_only,
            Outcome::Refused => &mut self.refused,
        };
        *count += 1;
    }

    fn add(&mut self, other: &ShadowCounts) {
        for outcome in Outcome::ALL {
            for _ in 0..other.get(outcome) {
                self.bump(outcome);
            }
        }
    }

    /// Pods (and refused decisions) decided differently.
    pub fn differing(&self) -> u64 {
        Outcome::ALL
            .iter()
            .filter(|o| **o != Outcome::Same)
            .map(|o| self.get(*o))
            .sum()
    }
}

/// Compares the placements the primary's verdict accepted with the
/// shadow's verdict on the same snapshot.
pub fn compare(primary: &[Placement], shadow: &Verdict) -> Comparison {
    let placed = |placements: &[Placement]| -> BTreeMap<String, PlacedOn> {
        placements
            .iter()
            .map(|p| {
                let mut gpus = p.gpus.clone();
                gpus.sort();
                (
                    p.pod.clone(),
                    PlacedOn {
                        node: p.node.clone(),
                        gpus,
                    },
                )
            })
            .collect()
    };
    let by_primary = placed(primary);
    let by_shadow = placed(&shadow.accepted);
    let pods: BTreeSet<&String> = by_primary.keys().chain(by_shadow.keys()).collect();
    let mut comparison = Comparison::default();
    for pod in pods {
        let (ours, theirs) = (by_primary.get(pod), by_shadow.get(pod));
        let outcome = match (ours, theirs) {
            (Some(a), Some(b)) if a.node != b.node => Outcome::OtherNode,
            (Some(a), Some(b)) if a.gpus != b.gpus => Outcome::SameNodeOtherGpus,
            (Some(_), Some(_)) => Outcome::Same,
            (Some(_), None) => Outcome::PrimaryOnly,
            (None, _) => Outcome::ShadowOnly,
        };
        comparison.counts.bump(outcome);
        if outcome != Outcome::Same {
            comparison.differences.push(ShadowDifference {
                pod: pod.clone(),
                outcome: outcome.label().into(),
                primary: ours.cloned(),
                shadow: theirs.cloned(),
                reason: None,
            });
        }
    }
    for refused in &shadow.refused {
        comparison.counts.bump(Outcome::Refused);
        let pod = refused
            .pod
            .clone()
            .unwrap_or_else(|| format!("(decision #{})", refused.index));
        comparison.differences.push(ShadowDifference {
            primary: by_primary.get(&pod).cloned(),
            pod,
            outcome: Outcome::Refused.label().into(),
            shadow: None,
            reason: Some(cut(format!("{}: {}", refused.decision, refused.reason))),
        });
    }
    comparison.differences.sort_by(|a, b| a.pod.cmp(&b.pod));
    comparison
}

/// What one shadow round was about, besides its result.
#[derive(Clone, Debug, Default)]
pub struct RoundMeta {
    /// The controller's round number.
    pub round: u64,
    /// When (RFC 3339).
    pub at: String,
    /// The primary's version that decided.
    pub primary_digest: String,
    /// Pods pending.
    pub pending: usize,
    /// The shadow call's time, when it returned.
    pub call: Option<std::time::Duration>,
}

// === impl ShadowStatus ===

impl ShadowStatus {
    /// Nothing counted yet for the shadow `digest` (with config digest
    /// `config_digest`) of `primary`, from `since` on.
    pub fn start(
        primary: &str,
        digest: &str,
        config_digest: Option<String>,
        since: String,
    ) -> Self {
        ShadowStatus {
            primary: primary.into(),
            digest: digest.into(),
            config_digest,
            since,
            ..Default::default()
        }
    }

    /// Whether these counts are about that shadow version and primary.
    pub fn is_about(&self, primary: &str, digest: &str, config_digest: Option<&str>) -> bool {
        self.primary == primary
            && self.digest == digest
            && self.config_digest.as_deref() == config_digest
    }

    /// Records a compared round.
    pub fn compared(&mut self, meta: RoundMeta, comparison: Comparison) {
        self.rounds_compared += 1;
        self.totals.add(&comparison.counts);
        self.last_round_at = Some(meta.at.clone());
        let mut differences = comparison.differences;
        let more = differences.len().saturating_sub(SHADOW_DIFFERENCES_KEPT);
        differences.truncate(SHADOW_DIFFERENCES_KEPT);
        self.push(ShadowRound {
            counts: comparison.counts,
            differences,
            more_differences: more as u64,
            ..round_of(meta)
        });
    }

    /// Records a round whose shadow call failed.
    pub fn failed(&mut self, meta: RoundMeta, error: String) {
        let error = cut(error);
        self.rounds_failed += 1;
        self.last_round_at = Some(meta.at.clone());
        self.last_error = Some(error.clone());
        self.last_error_at = Some(meta.at.clone());
        self.push(ShadowRound {
            error: Some(error),
            ..round_of(meta)
        });
    }

    /// Records a round skipped because the previous call still ran.
    pub fn skipped(&mut self) {
        self.rounds_skipped += 1;
    }

    /// Keeps the last [`SHADOW_ROUNDS_KEPT`] rounds, and the whole within
    /// [`MAX_STATUS_BYTES`]: the oldest rounds lose their differences
    /// first (counted in `moreDifferences`).
    fn push(&mut self, round: ShadowRound) {
        self.recent.push(round);
        let over = self.recent.len().saturating_sub(SHADOW_ROUNDS_KEPT);
        self.recent.drain(..over);
        let size = |s: &ShadowStatus| serde_json::to_vec(s).map_or(0, |v| v.len());
        let mut oldest = 0;
        while size(self) > MAX_STATUS_BYTES && oldest < self.recent.len() {
            let round = &mut self.recent[oldest];
            match round.differences.pop() {
                Some(_) => round.more_differences += 1,
                None => oldest += 1,
            }
        }
    }
}

fn round_of(meta: RoundMeta) -> ShadowRound {
    ShadowRound {
        round: meta.round,
        at: meta.at,
        primary_digest: meta.primary_digest,
        pending: meta.pending as u64,
        call_micros: meta.call.map(|d| d.as_micros() as u64),
        ..Default::default()
    }
}

/// `text`, cut to [`MAX_TEXT_BYTES`] at a character boundary.
fn cut(mut text: String) -> String {
    wasmgpu_support::cut(&mut text, MAX_TEXT_BYTES);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgpu_contract::validate::{Invalid, Refused};

    fn placed(pod: &str, node: &str, gpus: &[&str]) -> Placement {
        Placement {
            pod: pod.into(),
            node: node.into(),
            gpus: gpus.iter().map(|g| g.to_string()).collect(),
            request: 0,
            at: (0, Vec::new()),
            claims: Vec::new(),
        }
    }

    fn meta(round: u64) -> RoundMeta {
        RoundMeta {
            round,
            at: format!("2026-12-01T00:00:{:02}Z", round % 60),
            primary_digest: "sha256:p".into(),
            pending: 4,
            call: Some(std::time::Duration::from_micros(1234)),
        }
    }

    #[test]
    fn shadow_outcomes_are_counted_per_pod() {
        let primary = vec![
            placed("ns/same", "n1", &["g1", "g2"]),
            placed("ns/gpus", "n1", &["g3"]),
            placed("ns/node", "n1", &["g4"]),
            placed("ns/mine", "n2", &["g5"]),
        ];
        let shadow = Verdict {
            // GPU order does not matter.
            accepted: vec![
                placed("ns/same", "n1", &["g2", "g1"]),
                placed("ns/gpus", "n1", &["g5"]),
                placed("ns/node", "n2", &["g4"]),
                placed("ns/theirs", "n3", &["g1"]),
            ],
            refused: vec![Refused {
                index: 4,
                pod: Some("ns/mine".into()),
                decision: "ns/mine on n9 GPUs #0".into(),
                reason: Invalid::UnknownNode { node: 9 },
            }],
            ..Default::default()
        };
        let comparison = compare(&primary, &shadow);
        assert_eq!(
            comparison.counts,
            ShadowCounts {
                same: 1,
                same_node_other_gpus: 1,
                other_node: 1,
                primary_only: 1,
                shadow_only: 1,
                refused: 1,
            }
        );
        assert_eq!(comparison.counts.differing(), 5);
        let outcomes: Vec<(&str, &str)> = comparison
            .differences
            .iter()
            .map(|d| (d.pod.as_str(), d.outcome.as_str()))
            .collect();
        assert_eq!(
            outcomes,
            [
                ("ns/gpus", "same-node-other-gpus"),
                ("ns/mine", "primary-only"),
                ("ns/mine", "refused"),
                ("ns/node", "other-node"),
                ("ns/theirs", "shadow-only"),
            ]
        );
        let node = &comparison.differences[3];
        assert_eq!(node.primary.as_ref().unwrap().node, "n1");
        assert_eq!(node.shadow.as_ref().unwrap().node, "n2");
        let refused = &comparison.differences[2];
        assert!(
            refused
                .reason
                .as_ref()
                .unwrap()
                .contains("no node at position 9"),
            "{refused:?}"
        );
        assert_eq!(refused.primary.as_ref().unwrap().node, "n2");
    }

    #[test]
    fn shadow_identical_decisions_differ_nowhere() {
        let primary = vec![placed("ns/a", "n1", &["g1"])];
        let shadow = Verdict {
            accepted: primary.clone(),
            ..Default::default()
        };
        let comparison = compare(&primary, &shadow);
        assert_eq!(comparison.counts.same, 1);
        assert_eq!(comparison.counts.differing(), 0);
        assert!(comparison.differences.is_empty());
        // Nothing placed by either: nothing to count.
        let none = compare(&[], &Verdict::default());
        assert_eq!(none, Comparison::default());
    }

    #[test]
    fn shadow_status_accumulates_and_keeps_the_last_rounds() {
        let mut status = ShadowStatus::start("binpack", "sha256:s", None, "t0".into());
        assert!(status.is_about("binpack", "sha256:s", None));
        assert!(!status.is_about("binpack", "sha256:s", Some("sha256:c")));
        assert!(!status.is_about("spread", "sha256:s", None));
        let primary: Vec<Placement> = (0..8)
            .map(|i| placed(&format!("ns/p{i}"), "n1", &["g1"]))
            .collect();
        for round in 1..=12 {
            status.compared(meta(round), compare(&primary, &Verdict::default()));
        }
        status.skipped();
        status.failed(meta(13), "x".repeat(1000));
        assert_eq!(status.rounds_compared, 12);
        assert_eq!(status.rounds_failed, 1);
        assert_eq!(status.rounds_skipped, 1);
        assert_eq!(status.totals.primary_only, 96);
        assert_eq!(status.recent.len(), SHADOW_ROUNDS_KEPT);
        assert_eq!(status.recent[0].round, 4);
        let last_compared = &status.recent[SHADOW_ROUNDS_KEPT - 2];
        assert_eq!(last_compared.differences.len(), SHADOW_DIFFERENCES_KEPT);
        assert_eq!(last_compared.more_differences, 3);
        assert_eq!(last_compared.call_micros, Some(1234));
        let failed = status.recent.last().unwrap();
        assert!(failed.error.as_ref().unwrap().len() <= MAX_TEXT_BYTES + '…'.len_utf8());
        assert_eq!(status.last_error, failed.error);
        assert_eq!(status.last_round_at.as_deref(), Some(failed.at.as_str()));
    }

    #[test]
    fn shadow_status_stays_within_its_size_bound() {
        // The worst case: every kept round at its most differences, each
        // with the most GPUs and long names on both sides.
        let gpus: Vec<String> = (0..16)
            .map(|i| format!("GPU-{i:02}-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"))
            .collect();
        let gpus: Vec<&str> = gpus.iter().map(String::as_str).collect();
        let long = "x".repeat(200);
        let primary: Vec<Placement> = (0..20)
            .map(|i| placed(&format!("ns-{long}/pod-{i}"), &format!("a-{long}"), &gpus))
            .collect();
        let shadow = Verdict {
            accepted: (0..20)
                .map(|i| placed(&format!("ns-{long}/pod-{i}"), &format!("b-{long}"), &gpus))
                .collect(),
            ..Default::default()
        };
        let mut status = ShadowStatus::start("p", "sha256:s", None, "t0".into());
        for round in 0..30 {
            status.compared(meta(round), compare(&primary, &shadow));
            let size = serde_json::to_vec(&status).unwrap().len();
            assert!(size <= MAX_STATUS_BYTES, "{size} bytes");
        }
        assert_eq!(status.recent.len(), SHADOW_ROUNDS_KEPT);
        // The newest round keeps its differences; the counts stay whole.
        let newest = status.recent.last().unwrap();
        assert!(!newest.differences.is_empty());
        assert_eq!(
            newest.differences.len() as u64 + newest.more_differences,
            20
        );
        assert_eq!(status.totals.other_node, 600);
    }
}
