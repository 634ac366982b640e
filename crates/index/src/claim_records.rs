//! A DRA pod's ask as the snapshot carries it: devices become positions
//! (`gpu-ref`s into `snapshot.candidate-sets`, each set sent once), constraint
//! values become numbers, and the pod's eligible nodes shrink to those its
//! allocated claims pin it to.

use std::collections::HashMap;
use std::sync::Arc;

use wasmgpu_contract::bits;
use wasmgpu_contract::types::{
    Alternative, AttributeValue, Claim, ClaimRequest, Constraint, GpuRef,
};

use super::claim_asks::{Candidates, Count, DraAsk, PendingAlternative};
use super::eligibility::term_matches;
use crate::facts::node::NodeFacts;

/// The snapshot's candidate sets, each stored once.
#[derive(Default)]
pub(crate) struct CandidateSets {
    pub sets: Vec<Vec<GpuRef>>,
    set_to_position: HashMap<Vec<GpuRef>, u32>,
    /// Candidate lists already turned into a set, by the list's address
    /// (kept alive here, so no other list takes it): the survey shares one
    /// list among the requests that select alike, so a thousand such
    /// requests cost one translation.
    list_to_set: HashMap<*const Candidates, (Arc<Candidates>, u32)>,
}

impl CandidateSets {
    fn intern(&mut self, set: Vec<GpuRef>) -> u32 {
        if let Some(&p) = self.set_to_position.get(&set) {
            return p;
        }
        self.sets.push(set.clone());
        let p = self.sets.len() as u32 - 1;
        self.set_to_position.insert(set, p);
        p
    }

    /// The positions of `candidates` on the candidate nodes, sorted, and
    /// their set's position in the snapshot.
    fn of(&mut self, candidates: &Arc<Candidates>, view: &NodesView<'_>) -> (&[GpuRef], u32) {
        let key = Arc::as_ptr(candidates);
        let set = match self.list_to_set.get(&key) {
            Some(&(_, set)) => set,
            None => {
                let mut refs: Vec<GpuRef> = candidates
                    .devices
                    .iter()
                    .filter_map(|(node, uuid)| {
                        view.positions.get(&(node.as_str(), uuid.as_str())).copied()
                    })
                    .collect();
                refs.sort();
                refs.dedup();
                let set = self.intern(refs);
                self.list_to_set.insert(key, (Arc::clone(candidates), set));
                set
            }
        };
        (&self.sets[set as usize], set)
    }
}

/// What the build step knows of the candidate nodes.
pub(crate) struct NodesView<'a> {
    /// Candidate nodes by position: name and facts.
    pub nodes: Vec<(&'a str, &'a NodeFacts)>,
    /// (node name, UUID) → its position.
    pub positions: HashMap<(&'a str, &'a str), GpuRef>,
}

/// The claims of `ask` for the snapshot, and the pod's eligible nodes
/// (`eligible`, a bit set over candidate nodes) narrowed to where its
/// allocated claims are and where an `All` request's count holds.
pub(crate) fn claims_record(
    ask: &DraAsk,
    view: &NodesView<'_>,
    eligible: &mut [u64],
    sets: &mut CandidateSets,
) -> Vec<Claim> {
    for (i, (name, facts)) in view.nodes.iter().enumerate() {
        let pinned_elsewhere = ask.pinned.iter().flatten().any(|selector| {
            !selector
                .node_selector_terms
                .iter()
                .any(|term| term_matches(term, name, &facts.labels))
        });
        if pinned_elsewhere {
            clear(eligible, i as u32);
        }
    }
    let mut claims = Vec::with_capacity(ask.claims.len());
    for claim in &ask.claims {
        let mut requests = Vec::with_capacity(claim.requests.len());
        for request in &claim.requests {
            let alternatives = request
                .alternatives
                .iter()
                .map(|a| alternative_record(a, view, eligible, sets))
                .collect();
            requests.push(ClaimRequest {
                name: request.name.clone(),
                alternatives,
            });
        }
        let constraints = claim
            .constraints
            .iter()
            .map(|c| {
                let mut numbers: HashMap<&str, u32> = HashMap::new();
                let mut values: Vec<AttributeValue> = c
                    .values
                    .iter()
                    .filter_map(|((node, uuid), text)| {
                        let device = *view.positions.get(&(node.as_str(), uuid.as_str()))?;
                        let next = numbers.len() as u32;
                        let value = *numbers.entry(text.as_str()).or_insert(next);
                        Some(AttributeValue { device, value })
                    })
                    .collect();
                values.sort_by_key(|v| v.device);
                Constraint {
                    requests: c.requests.clone(),
                    distinct: c.distinct,
                    attribute: c.attribute.clone(),
                    values,
                }
            })
            .collect();
        claims.push(Claim {
            name: claim.key.to_string(),
            requests,
            constraints,
        });
    }
    claims
}

/// One alternative: its candidates on the candidate nodes, as a set of the
/// snapshot. For `All`, the count is the most candidates an eligible node
/// has, and the nodes with fewer leave the eligible set (every candidate of
/// the node is wanted, so a node with fewer could not give the same count).
fn alternative_record(
    alternative: &PendingAlternative,
    view: &NodesView<'_>,
    eligible: &mut [u64],
    sets: &mut CandidateSets,
) -> Alternative {
    let (refs, set) = sets.of(&alternative.candidates, view);
    let count = match alternative.count {
        Count::Exactly(n) => n,
        Count::All => {
            let mut per_node: HashMap<u32, u32> = HashMap::new();
            for r in refs {
                *per_node.entry(r.node).or_default() += 1;
            }
            let on = |n: u32| per_node.get(&n).copied().unwrap_or(0);
            let most = bits::indices(eligible).map(on).max().unwrap_or(0);
            let fewer: Vec<u32> = bits::indices(eligible).filter(|&n| on(n) != most).collect();
            for n in fewer {
                clear(eligible, n);
            }
            most.max(1)
        }
    };
    Alternative {
        subrequest: alternative.subrequest.clone(),
        count,
        candidates: set,
    }
}

fn clear(words: &mut [u64], member: u32) {
    if let Some(word) = words.get_mut(member as usize / 64) {
        *word &= !(1 << (member % 64));
    }
}
