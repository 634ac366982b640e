//! Preemption back-off: a preemptor whose preemption was blocked (a
//! victim's eviction refused, say by a PodDisruptionBudget whose status
//! lagged) may not preempt again for a while, so that the same pods are not
//! nominated and evicted round after round. The wait doubles with each
//! blocked attempt, from [`FIRST_MS`] up to [`MAX_MS`]; while it lasts the
//! snapshot gives the pod `preemption: never` (the policy may still place
//! it on free GPUs), and the host refuses its preemptions.
//!
//! ```text
//!  eviction refused ─▶ block(pod, now) ─▶ until = now + min(FIRST·2^(n-1), MAX)
//!  snapshot at now  ─▶ active(pod, now) ─▶ request.preemption = never
//!  pod deleted      ─▶ forgotten
//! ```

use std::collections::HashMap;

use super::key::ObjectKey;

/// The first back-off after a blocked preemption.
pub const FIRST_MS: u64 = 10_000;
/// The longest back-off.
pub const MAX_MS: u64 = 300_000;

/// Preemptors backing off, by pod.
#[derive(Debug, Default)]
pub(crate) struct Backoffs {
    key_to_backoff: HashMap<ObjectKey, Backoff>,
}

#[derive(Clone, Copy, Debug)]
struct Backoff {
    /// Blocked attempts so far.
    blocked: u32,
    /// No preemption before this (ms since the Unix epoch).
    until_ms: u64,
}

impl Backoffs {
    /// Records that `pod`'s preemption was blocked at `now_ms`; how long it
    /// backs off (ms).
    pub fn block(&mut self, pod: &ObjectKey, now_ms: u64) -> u64 {
        let entry = self.key_to_backoff.entry(pod.clone()).or_insert(Backoff {
            blocked: 0,
            until_ms: 0,
        });
        entry.blocked = entry.blocked.saturating_add(1);
        let wait = FIRST_MS
            .saturating_mul(1 << (entry.blocked - 1).min(16))
            .min(MAX_MS);
        entry.until_ms = now_ms.saturating_add(wait);
        wait
    }

    /// Whether `pod` may not preempt at `now_ms`.
    pub fn active(&self, pod: &ObjectKey, now_ms: u64) -> bool {
        self.key_to_backoff
            .get(pod)
            .is_some_and(|b| now_ms < b.until_ms)
    }

    /// Forgets `pod` (deleted).
    pub fn forget(&mut self, pod: &ObjectKey) {
        self.key_to_backoff.remove(pod);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_blocked_attempt_doubles_the_wait_up_to_the_longest() {
        let pod = ObjectKey::new("ml", "big");
        let mut backoffs = Backoffs::default();
        assert!(!backoffs.active(&pod, 0));
        assert_eq!(backoffs.block(&pod, 1_000), 10_000);
        assert!(backoffs.active(&pod, 10_999));
        assert!(!backoffs.active(&pod, 11_000));
        assert_eq!(backoffs.block(&pod, 20_000), 20_000);
        assert_eq!(backoffs.block(&pod, 50_000), 40_000);
        for _ in 0..40 {
            backoffs.block(&pod, 100_000);
        }
        assert_eq!(backoffs.block(&pod, 100_000), MAX_MS);
        assert!(!backoffs.active(&ObjectKey::new("ml", "other"), 100_000));
        backoffs.forget(&pod);
        assert!(!backoffs.active(&pod, 100_001));
    }
}
