//! Which problems have stood long enough to be told.
//!
//! Objects made together (`kubectl apply -f dir/`) reach the controller by
//! different watches, in any order: a pod before its ResourceClaim, its
//! GPUResource or its PodGroup, a pool's ResourceSlices one by one. For the
//! round between the two, the pod has a problem that is not one (the claim
//! "does not exist"). A problem is told (an Event and a log line) once it
//! has stood for [`GRACE`], and then once, however many rounds it stays.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// How long a problem stands before it is told: well beyond the skew
/// between two watches of one API server, well within what a user waits
/// for after `kubectl apply`.
pub const GRACE: Duration = Duration::from_secs(1);

/// Problems by message: since when each has stood, and whether it was told.
#[derive(Debug, Default)]
pub struct Standing {
    message_to_state: HashMap<String, State>,
}

#[derive(Clone, Copy, Debug)]
struct State {
    since: Instant,
    told: bool,
}

impl Standing {
    /// Takes the problems a round found (`messages`, at `now`): returns the
    /// positions of those to tell now. Problems not found again are
    /// forgotten: one that comes back stands anew.
    pub fn sort<'m>(
        &mut self,
        messages: impl IntoIterator<Item = &'m str>,
        now: Instant,
    ) -> Vec<usize> {
        let mut before = std::mem::take(&mut self.message_to_state);
        let mut to_tell = Vec::new();
        for (at, message) in messages.into_iter().enumerate() {
            // The same message twice in one round: told once.
            if self.message_to_state.contains_key(message) {
                continue;
            }
            let mut state = before.remove(message).unwrap_or(State {
                since: now,
                told: false,
            });
            if !state.told && now.duration_since(state.since) >= GRACE {
                state.told = true;
                to_tell.push(at);
            }
            self.message_to_state.insert(message.to_owned(), state);
        }
        to_tell
    }

    /// When the next problem not told yet will have stood long enough; a
    /// round then tells it, changes or not.
    pub fn next_due(&self) -> Option<Instant> {
        self.message_to_state
            .values()
            .filter(|state| !state.told)
            .map(|state| state.since + GRACE)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_told_once_after_standing_for_the_grace() {
        let mut standing = Standing::default();
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert!(standing.sort(["claim missing"], at(0)).is_empty());
        assert_eq!(standing.next_due(), Some(at(1000)));
        assert!(standing.sort(["claim missing"], at(999)).is_empty());
        assert_eq!(standing.sort(["claim missing"], at(1000)), [0]);
        assert_eq!(standing.next_due(), None);
        // Told once, however many rounds it stays.
        assert!(standing.sort(["claim missing"], at(5000)).is_empty());
    }

    #[test]
    fn a_problem_gone_before_the_grace_is_never_told_and_one_that_comes_back_stands_anew() {
        let mut standing = Standing::default();
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert!(standing.sort(["claim missing"], at(0)).is_empty());
        // The claim's watch delivers it: the problem is gone.
        assert!(standing.sort([], at(300)).is_empty());
        assert_eq!(standing.next_due(), None);
        assert!(standing.sort(["claim missing"], at(2000)).is_empty());
        assert_eq!(standing.sort(["claim missing", "other"], at(3000)), [0]);
        assert_eq!(standing.next_due(), Some(at(4000)));
        assert_eq!(standing.sort(["other", "other"], at(4000)), [0]);
    }
}
