//! Gangs: a gang's assignments are kept only when, with the members
//! already bound, they reach its `min-member`; otherwise its members wait.

use super::verdict::{Deferred, Verdict};
use crate::types::{Request, Snapshot};

/// The name of `request`'s gang, when it is a member of one.
pub(super) fn gang_of(snapshot: &Snapshot, request: &Request) -> Option<String> {
    let gang = snapshot.gangs.get(request.gang? as usize)?;
    Some(gang.name.clone())
}

/// Moves the assignments of every gang that, with its members already
/// bound, stays short of its `min-member` from `accepted` to `waiting`.
pub(super) fn hold_back_short_gangs(snapshot: &Snapshot, verdict: &mut Verdict) {
    if snapshot.gangs.is_empty() {
        return;
    }
    let mut placed = vec![0u32; snapshot.gangs.len()];
    for p in &verdict.accepted {
        if let Some(g) = snapshot.pending[p.request].gang
            && let Some(count) = placed.get_mut(g as usize)
        {
            *count = count.saturating_add(1);
        }
    }
    let short = |gang: Option<u32>| {
        gang.and_then(|g| {
            let info = snapshot.gangs.get(g as usize)?;
            let have = info.bound.saturating_add(placed[g as usize]);
            (have < info.min_member).then(|| {
                let reason = format!(
                    "gang {}: {} member(s) placed this round and {} bound, {} needed (minMember); all or nothing, so none is bound yet",
                    info.name, placed[g as usize], info.bound, info.min_member
                );
                (reason, info.name.clone())
            })
        })
    };
    let mut kept = Vec::with_capacity(verdict.accepted.len());
    for p in std::mem::take(&mut verdict.accepted) {
        match short(snapshot.pending[p.request].gang) {
            Some((reason, gang)) => {
                verdict.held_back.push(p.request);
                verdict.waiting.push(Deferred {
                    pod: p.pod,
                    reason,
                    gang: Some(gang),
                });
            }
            None => kept.push(p),
        }
    }
    verdict.accepted = kept;
}
