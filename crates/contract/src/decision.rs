//! Short constructors for decisions and the policy's description.

use crate::types::{Assignment, Decision, Deferral, Info, Preemption};

/// Builds an [`Info`] of a policy that reads no node labels (add them to
/// `label_keys`).
pub fn info(name: &str, version: &str, description: &str) -> Info {
    Info {
        name: name.to_owned(),
        version: version.to_owned(),
        description: description.to_owned(),
        label_keys: Vec::new(),
    }
}

/// `Decision::Assign` for the pending request at position `pod`, on the node
/// at position `node`, of the GPUs at positions `gpus` in that node's list.
pub fn assign(pod: u32, node: u32, gpus: Vec<u32>) -> Decision {
    Decision::Assign(Assignment {
        pod,
        node,
        gpus,
        claims: Vec::new(),
    })
}

/// `Decision::Preempt`: evict the running pods at positions `victims`, then
/// give the pending request at `pod` the GPUs at `gpus` of the node at
/// `node`.
pub fn preempt(pod: u32, node: u32, gpus: Vec<u32>, victims: Vec<u32>) -> Decision {
    Decision::Preempt(Preemption {
        assignment: Assignment {
            pod,
            node,
            gpus,
            claims: Vec::new(),
        },
        victims,
    })
}

/// `Decision::Wait` for the pending request at position `pod`, with a reason
/// shown to users.
pub fn wait(pod: u32, reason: impl Into<String>) -> Decision {
    Decision::Wait(Deferral {
        pod,
        reason: reason.into(),
    })
}

/// `Decision::Reject` for the pending request at position `pod`, with a
/// reason shown to users.
pub fn reject(pod: u32, reason: impl Into<String>) -> Decision {
    Decision::Reject(Deferral {
        pod,
        reason: reason.into(),
    })
}

impl Decision {
    /// The pod this decision is about, as its position in `snapshot.pending`.
    pub fn pod(&self) -> u32 {
        match self {
            Decision::Assign(a) => a.pod,
            Decision::Wait(d) | Decision::Reject(d) => d.pod,
            Decision::Preempt(p) => p.assignment.pod,
        }
    }
}
