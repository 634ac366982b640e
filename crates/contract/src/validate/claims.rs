//! DRA assignments: one choice per request of each claim, each of its
//! alternative's count of distinct candidates on the assignment's node, free
//! and healthy, within the claims' matchAttribute/distinctAttribute
//! constraints.

use super::gpu_fit::{GpuLeft, free_for_exclusive, healthy};
use super::invalid::Invalid;
use super::replay::Replay;
use crate::types::{Assignment, Claim, GpuRef, Node};

impl Replay<'_> {
    /// Checks a DRA pod's assignment; the GPUs it takes, in choice order.
    pub(super) fn check_claims(
        &self,
        a: &Assignment,
        node: &Node,
        claims: &[Claim],
        left: &[GpuLeft],
    ) -> Result<Vec<u32>, Invalid> {
        let snapshot = self.snapshot;
        let wrong = |what: String| Invalid::WrongChoice { what };
        if !a.gpus.is_empty() {
            return Err(wrong(
                "a DRA pod is assigned claim choices, not GPUs (assignment.gpus must be empty)"
                    .into(),
            ));
        }
        let mut chosen: Vec<Vec<Option<&[u32]>>> = claims
            .iter()
            .map(|c| vec![None; c.requests.len()])
            .collect();
        let mut taken: Vec<u32> = Vec::new();
        for choice in &a.claims {
            let claim = claims.get(choice.claim as usize).ok_or_else(|| {
                wrong(format!("the pod has no claim at position {}", choice.claim))
            })?;
            let request = claim.requests.get(choice.request as usize).ok_or_else(|| {
                wrong(format!(
                    "claim {} has no request at position {}",
                    claim.name, choice.request
                ))
            })?;
            let slot = &mut chosen[choice.claim as usize][choice.request as usize];
            if slot.is_some() {
                return Err(wrong(format!(
                    "request {:?} of claim {} is chosen twice",
                    request.name, claim.name
                )));
            }
            *slot = Some(&choice.gpus);
            let alternative = request
                .alternatives
                .get(choice.alternative as usize)
                .ok_or_else(|| {
                    wrong(format!(
                        "request {:?} of claim {} has no alternative at position {}",
                        request.name, claim.name, choice.alternative
                    ))
                })?;
            if choice.gpus.len() != alternative.count as usize {
                return Err(Invalid::WrongCount {
                    got: choice.gpus.len(),
                    want: alternative.count,
                });
            }
            let candidates = snapshot
                .candidate_sets
                .get(alternative.candidates as usize)
                .map_or(&[][..], Vec::as_slice);
            for &g in &choice.gpus {
                let name = || (self.names)(a.node, g);
                let Some(info) = node.gpus.get(g as usize) else {
                    return Err(Invalid::UnknownGpu {
                        gpu: g,
                        node: node.name.clone(),
                    });
                };
                if taken.contains(&g) {
                    return Err(Invalid::DuplicateGpu { gpu: name() });
                }
                taken.push(g);
                let here = GpuRef {
                    node: a.node,
                    gpu: g,
                };
                if candidates.binary_search(&here).is_err() {
                    return Err(Invalid::NotCandidate {
                        gpu: name(),
                        request: request.name.clone(),
                    });
                }
                if !healthy(node, info) {
                    return Err(Invalid::UnhealthyGpu { gpu: name() });
                }
                free_for_exclusive(snapshot, node, info, left, g)
                    .map_err(|reason| reason(name()))?;
            }
        }
        for (c, claim) in claims.iter().enumerate() {
            for (r, request) in claim.requests.iter().enumerate() {
                if chosen[c][r].is_none() {
                    return Err(wrong(format!(
                        "request {:?} of claim {} has no choice",
                        request.name, claim.name
                    )));
                }
            }
            for constraint in &claim.constraints {
                let mut values = Vec::new();
                for &r in &constraint.requests {
                    for &g in chosen[c].get(r as usize).copied().flatten().unwrap_or(&[]) {
                        let value = constraint
                            .values
                            .iter()
                            .find(|v| {
                                v.device
                                    == GpuRef {
                                        node: a.node,
                                        gpu: g,
                                    }
                            })
                            .map(|v| v.value);
                        values.push(value);
                    }
                }
                let broken = values.iter().any(Option::is_none)
                    || if constraint.distinct {
                        (1..values.len()).any(|i| values[..i].contains(&values[i]))
                    } else {
                        values.windows(2).any(|w| w[0] != w[1])
                    };
                if broken {
                    return Err(Invalid::ConstraintBroken {
                        claim: claim.name.clone(),
                        attribute: constraint.attribute.clone(),
                    });
                }
            }
        }
        Ok(taken)
    }
}
