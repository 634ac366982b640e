//! Pods counted per GPUResource, kept as the pod watch reports them: how
//! many name it and have not finished, and how many hold GPUs through it by
//! their own allocation. A round's report reads the counts instead of
//! hashing every pod's names again; holdings of the other sources (bindings
//! in flight, nominations, reservations, ledger entries: a few) are added
//! to them when read (`views::pod_counts_in`).
//!
//! ```text
//!  apply_pod / delete_pod / reset_pods ── old facts out, new facts in ──▶ PodTally
//! ```

use std::collections::hash_map::Entry;

use crate::bound::held_by_itself;
use crate::facts::pod::PodFacts;
use crate::fast_map::FastMap;

/// How many pods of a GPUResource hold GPUs, and how many reference it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodCounts {
    /// Pods holding GPUs of its shape.
    pub holding: usize,
    /// Pods naming the GPUResource that have not finished.
    pub referencing: usize,
}

/// The counts by GPUResource, `(namespace, name)`.
#[derive(Clone, Debug, Default)]
pub(crate) struct PodTally {
    resource_to_counts: FastMap<(String, String), PodCounts>,
}

impl PodTally {
    /// A pod of `namespace` changes from `old` to `new` (either `None`:
    /// not known).
    pub fn replace(&mut self, namespace: &str, old: Option<&PodFacts>, new: Option<&PodFacts>) {
        if let Some(old) = old {
            self.count(namespace, old, false);
        }
        if let Some(new) = new {
            self.count(namespace, new, true);
        }
    }

    /// Forgets every pod (before a relist).
    pub fn clear(&mut self) {
        self.resource_to_counts.clear();
    }

    /// The counts of every GPUResource some pod names or holds through.
    pub fn counts(&self) -> impl Iterator<Item = ((&str, &str), PodCounts)> {
        self.resource_to_counts
            .iter()
            .map(|((namespace, name), counts)| ((namespace.as_str(), name.as_str()), *counts))
    }

    fn count(&mut self, namespace: &str, pod: &PodFacts, add: bool) {
        let referenced = pod.resource.as_deref().filter(|_| !pod.terminal);
        let held = held_by_itself(pod).map(|allocation| allocation.resource.as_str());
        for (name, holding) in [(referenced, false), (held, true)] {
            let Some(name) = name else {
                continue;
            };
            match self
                .resource_to_counts
                .entry((namespace.to_owned(), name.to_owned()))
            {
                Entry::Occupied(mut entry) => {
                    bump(entry.get_mut(), holding, add);
                    if *entry.get() == PodCounts::default() {
                        entry.remove();
                    }
                }
                // Taking away what was never counted leaves nothing.
                Entry::Vacant(entry) if add => {
                    bump(entry.insert(PodCounts::default()), holding, true)
                }
                Entry::Vacant(_) => {}
            }
        }
    }
}

/// One more (`add`) or one fewer pod holding through (`holding`) or
/// naming a GPUResource.
fn bump(counts: &mut PodCounts, holding: bool, add: bool) {
    let count = match holding {
        true => &mut counts.holding,
        false => &mut counts.referencing,
    };
    *count = if add {
        *count + 1
    } else {
        count.saturating_sub(1)
    };
}
