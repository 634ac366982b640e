//! Whether one GPU (or MIG instance) can serve a request now, as the
//! replay has left it: healthy, the model, profile and memory asked for,
//! and free for the sharing asked for.

use super::invalid::Invalid;
use crate::glob::glob_match;
use crate::types::{Gpu, GpuShape, Node, Sharing, Snapshot};

/// Who holds a GPU exclusively during the replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holder {
    /// A running pod (or a nomination) of the snapshot.
    Before,
    /// The pod at this position of `pending`, in this round.
    Pending(usize),
}

impl Holder {
    /// Who holds the GPU, as a refusal names them.
    pub(super) fn name(self, snapshot: &Snapshot) -> String {
        match self {
            Holder::Pending(p) => snapshot.pending[p].pod.clone(),
            Holder::Before => "a running pod".to_owned(),
        }
    }
}

/// One GPU during the replay: what it has left.
#[derive(Clone, Copy, Debug)]
pub(super) struct GpuLeft {
    pub(super) free_mib: u64,
    pub(super) held: Option<Holder>,
    pub(super) shares: u32,
    /// For a whole GPU: its MIG instances held.
    pub(super) mig_held: u32,
}

pub(super) type Reason = Box<dyn FnOnce(String) -> Invalid>;

/// The GPU is taken `by` someone.
fn taken_by(by: String) -> Reason {
    Box::new(move |gpu| Invalid::GpuTaken { gpu, by })
}

/// A whole GPU or MIG instance has the memory `shape` asks of each
/// (`memoryMiB` with a MIG profile is the instance's own).
pub(super) fn has_memory(info: &Gpu, shape: &GpuShape) -> Result<(), Reason> {
    if info.memory_mib < shape.memory_mib {
        let (has_mib, want_mib) = (info.memory_mib, shape.memory_mib);
        return Err(Box::new(move |gpu| Invalid::NotEnoughMemory {
            gpu,
            has_mib,
            want_mib,
        }));
    }
    Ok(())
}

/// Whether a GPU is free for exclusive use: not held, no shares, and no
/// held MIG instance or parent. The error takes the GPU's name.
pub(super) fn free_for_exclusive(
    snapshot: &Snapshot,
    node: &Node,
    info: &Gpu,
    left: &[GpuLeft],
    g: u32,
) -> Result<(), Reason> {
    let this = &left[g as usize];
    if let Some(holder) = this.held {
        return Err(taken_by(holder.name(snapshot)));
    }
    if let Some(mig) = &info.mig {
        let parent = &left[mig.parent as usize];
        if parent.held.is_some() || parent.shares > 0 {
            return Err(taken_by("the holder of its parent GPU".into()));
        }
    } else if this.mig_held > 0 {
        let by = format!("{} of its MIG instance(s)", this.mig_held);
        return Err(taken_by(by));
    }
    if this.shares > 0 || this.free_mib < info.memory_mib {
        let by = format!("{} shared allocation(s)", this.shares.max(1));
        return Err(taken_by(by));
    }
    let _ = node;
    Ok(())
}

/// Whether a unit's health (a MIG instance takes its parent's) lets it be
/// given.
pub(super) fn healthy(node: &Node, info: &Gpu) -> bool {
    let parent_unhealthy = info
        .mig
        .as_ref()
        .and_then(|m| node.gpus.get(m.parent as usize))
        .is_some_and(|p| !p.healthy);
    info.healthy && !parent_unhealthy
}

/// Whether one GPU (or MIG instance) can serve `shape` now; the error
/// takes the GPU's name.
pub(super) fn check_gpu(
    snapshot: &Snapshot,
    node: &Node,
    shape: &GpuShape,
    info: &Gpu,
    left: &[GpuLeft],
    g: u32,
) -> Result<(), Reason> {
    if !healthy(node, info) {
        return Err(Box::new(|gpu| Invalid::UnhealthyGpu { gpu }));
    }
    let model = snapshot
        .models
        .get(info.model as usize)
        .map_or("?", String::as_str);
    if let Some(pattern) = &shape.model
        && !glob_match(pattern, model)
    {
        let (model, pattern) = (model.to_owned(), pattern.clone());
        return Err(Box::new(move |gpu| Invalid::ModelMismatch {
            gpu,
            model,
            pattern,
        }));
    }
    match (&shape.mig_profile, &info.mig) {
        (Some(want), Some(mig)) => {
            let profile = snapshot
                .mig_profiles
                .get(mig.profile as usize)
                .map_or("?", String::as_str);
            if profile != want {
                let (profile, want) = (profile.to_owned(), want.clone());
                return Err(Box::new(move |gpu| Invalid::ProfileMismatch {
                    gpu,
                    profile,
                    want,
                }));
            }
            has_memory(info, shape)?;
            return free_for_exclusive(snapshot, node, info, left, g);
        }
        (Some(_), None) => {
            return Err(Box::new(|gpu| Invalid::WrongKind {
                gpu,
                want: "a MIG instance".into(),
            }));
        }
        (None, Some(_)) => {
            return Err(Box::new(|gpu| Invalid::WrongKind {
                gpu,
                want: "a whole GPU".into(),
            }));
        }
        (None, None) => {}
    }
    let this = &left[g as usize];
    match shape.sharing {
        Sharing::Exclusive => {
            has_memory(info, shape)?;
            free_for_exclusive(snapshot, node, info, left, g)?;
        }
        Sharing::Shared => {
            if let Some(holder) = this.held {
                return Err(taken_by(holder.name(snapshot)));
            }
            if this.mig_held > 0 {
                let by = format!("{} of its MIG instance(s)", this.mig_held);
                return Err(taken_by(by));
            }
            if this.free_mib < shape.memory_mib {
                let (free_mib, want_mib) = (this.free_mib, shape.memory_mib);
                return Err(Box::new(move |gpu| Invalid::SharedFull {
                    gpu,
                    free_mib,
                    want_mib,
                }));
            }
        }
    }
    Ok(())
}
