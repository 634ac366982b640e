//! The standard wording of `wait` and `reject` reasons, as the SDK's own
//! placement writes them ([`Shortfall::reason`](crate::Shortfall::reason),
//! [`Cluster::unplaced`](crate::Cluster::unplaced),
//! [`Cluster::place_gang`](crate::Cluster::place_gang)). A policy that
//! decides on its own can word its reasons the same way, so users see one
//! vocabulary whichever policy runs:
//!
//! ```
//! use wasmgpu_policy_sdk::{reason, wait, Sharing::Exclusive};
//! use wasmgpu_policy_sdk::testing::request;
//!
//! let r = request("ns/train", 4, Exclusive, 40960);
//! let why = reason::not_now(&reason::asked(&r));
//! assert_eq!(why, "no eligible node has 4 GPU(s) with at least 40960 MiB each free right now");
//! let decision = wait(0, why);
//! ```
//!
//! The wording is for people; match on [`Shortfall`](crate::Shortfall), not
//! on these strings.

use wasmgpu_contract::{Ask, Request, Sharing};

/// What `request` asks for, in words: `2 GPU(s) matching "NVIDIA H100*" with
/// at least 40960 MiB each`, `1 GPU(s) with 8192 MiB to share`, `1 MIG
/// instance(s) of profile "1g.10gb"`; for a DRA request, per claim the sum
/// of its requests' first alternative's count: `2 device(s) for claim
/// ml/train`, `2 device(s) for claim ml/a, 1 device(s) for claim ml/b`
/// (`no devices: its claims are allocated already` for none).
pub fn asked(request: &Request) -> String {
    let r = match &request.ask {
        Ask::Gpus(shape) => shape,
        Ask::Claims(claims) if claims.is_empty() => {
            return "no devices: its claims are allocated already".to_owned();
        }
        Ask::Claims(claims) => {
            let each = claims.iter().map(|c| {
                let count = c.devices_asked();
                format!("{count} device(s) for claim {}", c.name)
            });
            return each.collect::<Vec<_>>().join(", ");
        }
    };
    let model = r
        .model
        .as_deref()
        .map(|m| format!(" matching \"{m}\""))
        .unwrap_or_default();
    if let Some(profile) = &r.mig_profile {
        return format!("{} MIG instance(s) of profile {profile:?}{model}", r.count);
    }
    match r.sharing {
        Sharing::Exclusive if r.memory_mib == 0 => format!("{} GPU(s){model}", r.count),
        Sharing::Exclusive => format!(
            "{} GPU(s){model} with at least {} MiB each",
            r.count, r.memory_mib
        ),
        Sharing::Shared => format!(
            "{} GPU(s){model} with {} MiB to share",
            r.count, r.memory_mib
        ),
    }
}

/// [`asked`], with the GPUs required to be NVLink peers of one another
/// ([`Nvlink::Require`](crate::Nvlink::Require)).
pub fn asked_nvlink(request: &Request) -> String {
    format!(
        "{} that are all NVLink peers of one another",
        asked(request)
    )
}

/// The request has no eligible node at all (a `reject` reason).
pub fn no_eligible_node() -> String {
    "no eligible node: node selector, affinity or taints exclude every GPU node".into()
}

/// No eligible node could hold `what` (an [`asked`] phrase) even with all of
/// its GPUs free (a `reject` reason).
pub fn never(what: &str) -> String {
    format!("no eligible node has {what}, even when idle")
}

/// Some eligible node could hold `what` once GPUs are released, none can now
/// (a `wait` reason).
pub fn not_now(what: &str) -> String {
    format!("no eligible node has {what} free right now")
}

/// Gang `gang` can never be placed: member `pod` fits nowhere, for `why` (a
/// `reject` reason for every member).
pub fn gang_never(gang: &str, pod: &str, why: &str) -> String {
    format!("gang {gang} can never be placed: member {pod} fits nowhere ({why})")
}

/// Gang `gang` is short: `fit` of the `need` more members it needs fit now,
/// with `bound` bound and `min_member` needed (a `wait` reason for every
/// member).
pub fn gang_short(gang: &str, fit: usize, need: usize, bound: u32, min_member: u32) -> String {
    format!(
        "gang {gang}: {fit} of the {need} more members needed fit now ({bound} bound, minMember {min_member}); all or nothing, so none is placed yet"
    )
}

/// Gang `gang` is placed without this member: `fit` members fit, `need`
/// were needed (a `wait` reason for the members left over).
pub fn gang_placed_without(gang: &str, fit: usize, need: usize) -> String {
    format!(
        "gang {gang} is placed without this member ({fit} of {need} needed fit); it waits for room"
    )
}

/// One request of a DRA claim, as what is missing: `2 device(s) for claim
/// ml/train request "gpus" (8 candidate(s) on eligible nodes)`: `count` is
/// its first alternative's, `candidates` how many of that alternative's
/// candidates sit on nodes the pod may use. Framed by [`never()`] or
/// [`not_now`].
pub fn claim_request(claim: &str, request: &str, count: u32, candidates: u32) -> String {
    format!(
        "{count} device(s) for claim {claim} request {request:?} ({candidates} candidate(s) on eligible nodes)"
    )
}

/// A DRA pod's claims taken together (`asked`, an [`asked`] phrase), when
/// each request alone could be served but not all at once: with
/// `constrained` (some claim has constraints), `… within the claims'
/// constraints`. Framed by [`never()`] or [`not_now()`].
pub fn claims_together(asked: &str, constrained: bool) -> String {
    if constrained {
        format!("{asked} within the claims' constraints")
    } else {
        asked.to_owned()
    }
}

/// What follows a [`not_now`] of a [`claim_request`]: the most of its
/// candidates free on one eligible node.
pub fn claims_most_free(most: u32) -> String {
    format!("at most {most} free on any eligible node")
}
