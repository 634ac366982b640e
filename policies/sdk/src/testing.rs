//! Snapshot builders and the controller's own validator, for a policy's
//! unit tests and benchmarks: [`wasmgpu_contract::testing`], re-exported,
//! plus builders for DRA requests ([`dra_request`], [`claim`],
//! [`candidate_set`]).
//!
//! ```
//! use wasmgpu_policy_sdk::{Fit, place_each};
//! use wasmgpu_policy_sdk::testing::{candidate_set, claim, dra_request, node, snapshot, validate};
//!
//! let mut snap = snapshot(vec![node("a", 4, "NVIDIA H100", 81920)], vec![]);
//! let gpus = candidate_set(&mut snap, (0..4).map(|g| (0, g)));
//! snap.pending.push(dra_request("ml/train", vec![claim("ml/train", &[("gpus", 2, gpus)])]));
//! let decisions = place_each(&snap, Fit::Tightest);
//! let verdict = validate(&snap, &decisions);
//! assert!(verdict.refused.is_empty() && verdict.accepted.len() == 1);
//! ```

pub use wasmgpu_contract::testing::*;

use wasmgpu_contract::{Alternative, Ask, Claim, ClaimRequest, GpuRef, Request, Sharing, Snapshot};

/// A pending pod asking through DRA `claims`, otherwise as [`request`]
/// builds one (namespace from `pod`, priority 0, created at 0, eligible
/// set 0).
pub fn dra_request(pod: &str, claims: Vec<Claim>) -> Request {
    Request {
        ask: Ask::Claims(claims),
        ..request(pod, 1, Sharing::Exclusive, 0)
    }
}

/// A claim `name` without constraints, with one request per `(name,
/// count, candidate set)`, each with one alternative (`exactly`).
pub fn claim(name: &str, requests: &[(&str, u32, u32)]) -> Claim {
    Claim {
        name: name.to_owned(),
        requests: requests
            .iter()
            .map(|&(request, count, candidates)| ClaimRequest {
                name: request.to_owned(),
                alternatives: vec![Alternative {
                    subrequest: None,
                    count,
                    candidates,
                }],
            })
            .collect(),
        constraints: Vec::new(),
    }
}

/// Adds a candidate set of the GPUs `(node, gpu)` (positions) to the
/// snapshot, sorted and each once as the host sends them; its index, for
/// [`Alternative::candidates`].
pub fn candidate_set(snapshot: &mut Snapshot, gpus: impl IntoIterator<Item = (u32, u32)>) -> u32 {
    let mut set: Vec<GpuRef> = gpus
        .into_iter()
        .map(|(node, gpu)| GpuRef { node, gpu })
        .collect();
    set.sort_unstable();
    set.dedup();
    snapshot.candidate_sets.push(set);
    (snapshot.candidate_sets.len() - 1) as u32
}
