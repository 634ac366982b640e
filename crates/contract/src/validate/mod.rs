//! # The host's decision rules
//!
//! [`validate`] replays the decisions of one round, in order, against the
//! snapshot the policy was given, and keeps an assignment only when it is
//! possible: the pod is pending and decided once, the node exists and is
//! eligible for the pod, the GPUs are exactly `count` (and never none)
//! distinct, healthy GPUs of that node that match the model glob, the memory
//! and the kind asked for (whole GPU, share, or MIG instance of the
//! profile), and are free — counting what earlier decisions of the same
//! round already took, and counting a whole GPU and its MIG instances as
//! excluding each other. A gang's assignments are kept only when, with the
//! members already bound, they reach its `min-member`; otherwise its members
//! wait. Everything else comes back with the reason, in words.
//!
//! Decisions name pods, nodes and GPUs by position; the verdict names them
//! ([`Placement`]), so nothing after validation handles positions.
//!
//! One source for both sides: the controller validates every round with
//! it, and the policy SDK offers it to authors as
//! `wasmgpu_policy_sdk::testing::validate`, over the same [`crate::types`].
//! Pure and synchronous: no I/O, no clock.

mod claims;
mod invalid;
mod preempt;

pub use invalid::Invalid;

use crate::glob::glob_match;
use crate::host_snapshot::{HostNode, HostSnapshot, SharedCounters, made_up_uuid};
use crate::types::{Ask, Assignment, Decision, Gpu, GpuShape, Node, Request, Sharing, Snapshot};

/// An accepted assignment, by name.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Placement {
    /// The pod, `namespace/name`.
    pub pod: String,
    /// The node.
    pub node: String,
    /// UUIDs of the GPUs (or MIG instances) it gets.
    pub gpus: Vec<String>,
    /// The request's position in the snapshot's `pending`.
    #[serde(skip)]
    pub request: usize,
    /// The node's position in the snapshot's `nodes`, and the GPUs'
    /// positions in its `gpus`: where to read what the devices are.
    #[serde(skip)]
    pub at: (usize, Vec<u32>),
    /// For a DRA pod, the policy's choices (their GPUs are in `at` too, in
    /// the same order).
    #[serde(skip)]
    pub claims: Vec<crate::types::ClaimChoice>,
}

/// A pod left waiting (or rejected), by name, with the reason.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Deferred {
    /// The pod, `namespace/name`.
    pub pod: String,
    /// Why, in words.
    pub reason: String,
    /// The gang the pod is a member of (`namespace/name`), when it is one:
    /// what it waits for is its gang, all or nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gang: Option<String>,
}

/// An accepted preemption: where the preemptor goes once its victims are
/// gone, and who they are.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Preempting {
    /// The preemptor's placement (its GPUs are nominated for it).
    pub placement: Placement,
    /// The pods to evict, `namespace/name`.
    pub victims: Vec<String>,
    /// Their positions in the snapshot's `running`.
    #[serde(skip)]
    pub victim_positions: Vec<usize>,
}

/// A decision the host refused, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Refused {
    /// The decision's position in the policy's list.
    pub index: usize,
    /// The pod it names, when the position names one.
    pub pod: Option<String>,
    /// The decision as the policy made it, in words (names where the
    /// positions resolve).
    pub decision: String,
    /// Why it was refused.
    pub reason: Invalid,
}

/// The host's verdict on one round.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// Assignments to apply, in the policy's order.
    pub accepted: Vec<Placement>,
    /// Preemptions to carry out, in the policy's order.
    pub preempting: Vec<Preempting>,
    /// Pods the policy chose to leave pending this round, and gang members
    /// held back because their gang did not reach its `min-member`.
    pub waiting: Vec<Deferred>,
    /// Pods the policy says can never be placed as requested.
    pub rejected: Vec<Deferred>,
    /// Decisions the host refused.
    pub refused: Vec<Refused>,
    /// Positions in `pending` of the gang members whose valid assignments
    /// were held back (their reason is in `waiting`).
    #[serde(skip)]
    pub held_back: Vec<usize>,
}

/// Who holds a GPU exclusively during the replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holder {
    /// A running pod (or a nomination) of the snapshot.
    Before,
    /// The pod at this position of `pending`, in this round.
    Pending(usize),
}

/// One GPU during the replay: what it has left.
#[derive(Clone, Copy, Debug)]
struct GpuLeft {
    free_mib: u64,
    held: Option<Holder>,
    shares: u32,
    /// For a whole GPU: its MIG instances held.
    mig_held: u32,
}

/// The pod of a decision, by name, when its position names one.
fn pod_name(snapshot: &Snapshot, position: u32) -> Option<&str> {
    snapshot
        .pending
        .get(position as usize)
        .map(|r| r.pod.as_str())
}

/// How GPUs are named in verdicts: by UUID for a [`HostSnapshot`], by the
/// made-up name of [`HostSnapshot::from_snapshot`] otherwise.
type Names<'n> = &'n dyn Fn(u32, u32) -> String;

fn made_up(snapshot: &Snapshot) -> impl Fn(u32, u32) -> String + '_ {
    move |node, gpu| {
        snapshot
            .nodes
            .get(node as usize)
            .and_then(|n| made_up_uuid(n, gpu))
            .unwrap_or_else(|| format!("#{gpu}"))
    }
}

fn host_names(host: &HostSnapshot) -> impl Fn(u32, u32) -> String + '_ {
    move |node, gpu| {
        host.uuid(node, gpu)
            .map_or_else(|| format!("#{gpu}"), str::to_owned)
    }
}

/// A decision in words, with names where its positions resolve.
pub fn describe(snapshot: &Snapshot, decision: &Decision) -> String {
    describe_named(snapshot, decision, &made_up(snapshot))
}

/// [`describe`], naming GPUs by their UUIDs.
pub fn describe_host(host: &HostSnapshot, decision: &Decision) -> String {
    describe_named(&host.snapshot, decision, &host_names(host))
}

fn describe_named(snapshot: &Snapshot, decision: &Decision, names: Names) -> String {
    let pod = |p: u32| pod_name(snapshot, p).map_or(format!("pod #{p}"), str::to_owned);
    let placed = |a: &Assignment| {
        let node = snapshot.nodes.get(a.node as usize);
        let gpus: Vec<String> = a
            .gpus
            .iter()
            .chain(a.claims.iter().flat_map(|c| &c.gpus))
            .map(|&g| {
                if node.is_some_and(|n| (g as usize) < n.gpus.len()) {
                    names(a.node, g)
                } else {
                    format!("#{g}")
                }
            })
            .collect();
        format!(
            "{} on {} GPUs {}",
            pod(a.pod),
            node.map_or(format!("node #{}", a.node), |n| n.name.clone()),
            gpus.join(",")
        )
    };
    match decision {
        Decision::Assign(a) => placed(a),
        Decision::Wait(d) => format!("wait for {}", pod(d.pod)),
        Decision::Reject(d) => format!("reject {}", pod(d.pod)),
        Decision::Preempt(p) => {
            let victims = snapshot.running_names(&p.victims);
            format!("{}, evicting {}", placed(&p.assignment), victims.join(","))
        }
    }
}

/// Checks `decisions` against `snapshot`; see the module docs. GPUs are
/// named as [`HostSnapshot::from_snapshot`] names them.
pub fn validate(snapshot: &Snapshot, decisions: &[Decision]) -> Verdict {
    Replay::new(snapshot, &made_up(snapshot), &[]).run(decisions)
}

/// [`validate`] for the host: GPUs are named by their UUIDs, and DRA
/// shared counters are counted.
pub fn validate_host(host: &HostSnapshot, decisions: &[Decision]) -> Verdict {
    Replay::new(&host.snapshot, &host_names(host), &host.nodes).run(decisions)
}

/// The state of one round's replay.
struct Replay<'s> {
    snapshot: &'s Snapshot,
    names: Names<'s>,
    /// Where each node's GPUs start in `gpus`.
    node_start: Vec<usize>,
    gpus: Vec<GpuLeft>,
    /// GPUs each tenant took this round.
    tenant_took: Vec<u32>,
    /// GPUs each tenant's running pods lose to this round's preemptions.
    tenant_lost: Vec<u32>,
    /// Running pods already named as victims this round.
    victim: Vec<bool>,
    /// Each node's DRA shared counters (none where it has none): what the
    /// GPUs consume, and what is left as the round goes.
    counters: Vec<Option<&'s SharedCounters>>,
    counters_left: Vec<Vec<u64>>,
    verdict: Verdict,
}

impl<'s> Replay<'s> {
    fn new(snapshot: &'s Snapshot, names: Names<'s>, hosts: &'s [HostNode]) -> Replay<'s> {
        let mut node_start = Vec::with_capacity(snapshot.nodes.len());
        let mut gpus = Vec::new();
        for node in &snapshot.nodes {
            let first = gpus.len();
            node_start.push(first);
            for gpu in &node.gpus {
                gpus.push(GpuLeft {
                    free_mib: gpu.memory_mib.saturating_sub(gpu.allocated_mib),
                    held: gpu.held.then_some(Holder::Before),
                    shares: gpu.shared_owners,
                    mig_held: 0,
                });
            }
            for gpu in &node.gpus {
                if let Some(mig) = &gpu.mig
                    && gpu.held
                    && (mig.parent as usize) < node.gpus.len()
                {
                    gpus[first + mig.parent as usize].mig_held += 1;
                }
            }
        }
        let counters: Vec<Option<&SharedCounters>> = (0..snapshot.nodes.len())
            .map(|n| hosts.get(n).map(|h| &h.counters))
            .map(|c| c.filter(|c| !c.left.is_empty()))
            .collect();
        let counters_left = counters
            .iter()
            .map(|c| c.map_or_else(Vec::new, |c| c.left.iter().map(|(_, v)| *v).collect()))
            .collect();
        Replay {
            snapshot,
            names,
            node_start,
            gpus,
            tenant_took: vec![0; snapshot.tenants.len()],
            tenant_lost: vec![0; snapshot.tenants.len()],
            victim: vec![false; snapshot.running.len()],
            counters,
            counters_left,
            verdict: Verdict::default(),
        }
    }

    fn run(mut self, decisions: &[Decision]) -> Verdict {
        let snapshot = self.snapshot;
        let mut decided = vec![false; snapshot.pending.len()];
        for (index, decision) in decisions.iter().enumerate() {
            let position = decision.pod();
            let refuse = |reason| Refused {
                index,
                pod: pod_name(snapshot, position).map(str::to_owned),
                decision: describe_named(snapshot, decision, self.names),
                reason,
            };
            let Some(request) = snapshot.pending.get(position as usize) else {
                let refused = refuse(Invalid::UnknownPod { pod: position });
                self.verdict.refused.push(refused);
                continue;
            };
            let position = position as usize;
            if std::mem::replace(&mut decided[position], true) {
                let refused = refuse(Invalid::DecidedTwice);
                self.verdict.refused.push(refused);
                continue;
            }
            let deferred = |reason: &str| Deferred {
                pod: request.pod.clone(),
                reason: reason.to_owned(),
                gang: gang_of(snapshot, request),
            };
            let outcome = match decision {
                Decision::Wait(d) => {
                    self.verdict.waiting.push(deferred(&d.reason));
                    Ok(())
                }
                Decision::Reject(d) => {
                    self.verdict.rejected.push(deferred(&d.reason));
                    Ok(())
                }
                Decision::Assign(a) => self.assign(a, request, position),
                Decision::Preempt(p) => self.preempt(p, request, position),
            };
            if let Err(reason) = outcome {
                let refused = refuse(reason);
                self.verdict.refused.push(refused);
            }
        }
        hold_back_short_gangs(snapshot, &mut self.verdict);
        self.verdict
    }

    /// Checks an assignment against the GPUs as they are now (`left`, the
    /// node's slice), and returns the placement it makes.
    fn check(
        &self,
        a: &Assignment,
        request: &Request,
        left: &[GpuLeft],
    ) -> Result<Placement, Invalid> {
        let snapshot = self.snapshot;
        let node = snapshot
            .nodes
            .get(a.node as usize)
            .ok_or(Invalid::UnknownNode { node: a.node })?;
        let eligible = snapshot.eligible_sets.get(request.eligible_set as usize);
        if !eligible.is_some_and(|set| crate::bits::contains(set, a.node)) {
            return Err(Invalid::NotEligible {
                node: node.name.clone(),
            });
        }
        let gpus = match &request.ask {
            Ask::Gpus(shape) => {
                if !a.claims.is_empty() {
                    return Err(Invalid::WrongChoice {
                        what: "a GPUResource pod is assigned GPUs, not claim choices".into(),
                    });
                }
                self.check_shape(a, node, shape, left)?;
                a.gpus.clone()
            }
            Ask::Claims(claims) => claims::check(self, a, node, claims, left)?,
        };
        self.check_counters(a.node, &gpus, left)?;
        self.check_limit(request, gpus.len() as u32)?;
        Ok(Placement {
            pod: request.pod.clone(),
            node: node.name.clone(),
            gpus: gpus.iter().map(|&g| (self.names)(a.node, g)).collect(),
            request: 0,
            at: (a.node as usize, gpus),
            claims: a.claims.clone(),
        })
    }

    fn check_shape(
        &self,
        a: &Assignment,
        node: &Node,
        shape: &GpuShape,
        left: &[GpuLeft],
    ) -> Result<(), Invalid> {
        if a.gpus.is_empty() {
            return Err(Invalid::NoGpus);
        }
        if a.gpus.len() != shape.count as usize {
            return Err(Invalid::WrongCount {
                got: a.gpus.len(),
                want: shape.count,
            });
        }
        for (k, &g) in a.gpus.iter().enumerate() {
            let Some(info) = node.gpus.get(g as usize) else {
                return Err(Invalid::UnknownGpu {
                    gpu: g,
                    node: node.name.clone(),
                });
            };
            let gpu = || (self.names)(a.node, g);
            // At most 16 GPUs: comparing with the earlier ones beats hashing.
            if a.gpus[..k].contains(&g) {
                return Err(Invalid::DuplicateGpu { gpu: gpu() });
            }
            if info.published_by == crate::types::Publisher::DraDriver {
                return Err(Invalid::NotFromAgent { gpu: gpu() });
            }
            check_gpu(self.snapshot, node, shape, info, left, g).map_err(|reason| reason(gpu()))?;
        }
        Ok(())
    }

    /// Refuses `gpus` of `node` together when they consume more of a DRA
    /// shared counter than is left. `gpus_left` is the node's GPUs as the
    /// decision sees them: what a preemption's victims release there (held
    /// before the round, free in it) gives its counters back.
    fn check_counters(
        &self,
        node: u32,
        gpus: &[u32],
        gpus_left: &[GpuLeft],
    ) -> Result<(), Invalid> {
        let Some(Some(counters)) = self.counters.get(node as usize) else {
            return Ok(());
        };
        let mut left = self.counters_left[node as usize].clone();
        for (g, (now, seen)) in self.node_slice(node).iter().zip(gpus_left).enumerate() {
            if now.held == Some(Holder::Before) && seen.held.is_none() {
                for &(c, amount) in counters.of(g as u32) {
                    if let Some(l) = left.get_mut(c as usize) {
                        *l = l.saturating_add(amount);
                    }
                }
            }
        }
        let mut wanted = vec![0u64; left.len()];
        // A GPU shared already consumed its counters with its first share.
        let unused = |g: u32| gpus_left.get(g as usize).is_none_or(|s| s.shares == 0);
        for &g in gpus.iter().filter(|&&g| unused(g)) {
            for &(c, amount) in counters.of(g) {
                let Some(want) = wanted.get_mut(c as usize) else {
                    continue;
                };
                *want = want.saturating_add(amount);
                if *want > left[c as usize] {
                    return Err(Invalid::CounterExhausted {
                        gpu: (self.names)(node, g),
                        counter: counters.left[c as usize].0.clone(),
                        wants: amount,
                        left: left[c as usize].saturating_sub(*want - amount),
                    });
                }
            }
        }
        Ok(())
    }

    /// Refuses taking `gpus` more for the request's tenant past its limit.
    fn check_limit(&self, request: &Request, gpus: u32) -> Result<(), Invalid> {
        let Some(t) = request.tenant else {
            return Ok(());
        };
        let Some(tenant) = self.snapshot.tenants.get(t as usize) else {
            return Ok(());
        };
        let would_hold = tenant
            .holding
            .saturating_add(self.tenant_took[t as usize])
            .saturating_add(gpus);
        match tenant.limit {
            Some(limit) if would_hold > limit => Err(Invalid::OverLimit {
                tenant: tenant.name.clone(),
                limit,
                would_hold,
            }),
            _ => Ok(()),
        }
    }

    fn node_slice(&self, node: u32) -> &[GpuLeft] {
        let Some(&first) = self.node_start.get(node as usize) else {
            return &[];
        };
        let len = self.snapshot.nodes[node as usize].gpus.len();
        &self.gpus[first..first + len]
    }

    fn assign(
        &mut self,
        a: &Assignment,
        request: &Request,
        position: usize,
    ) -> Result<(), Invalid> {
        let mut placement = self.check(a, request, self.node_slice(a.node))?;
        placement.request = position;
        self.take(&placement, request, position, false);
        self.verdict.accepted.push(placement);
        Ok(())
    }

    fn preempt(
        &mut self,
        p: &crate::types::Preemption,
        request: &Request,
        position: usize,
    ) -> Result<(), Invalid> {
        let (mut placement, victims) = preempt::check(self, p, request)?;
        placement.request = position;
        self.take(&placement, request, position, true);
        for &v in &victims {
            self.victim[v] = true;
            let running = &self.snapshot.running[v];
            if let Some(t) = running.tenant
                && let Some(lost) = self.tenant_lost.get_mut(t as usize)
            {
                *lost = lost.saturating_add(running.gpus.len() as u32);
            }
        }
        self.verdict.preempting.push(Preempting {
            placement,
            victims: victims
                .iter()
                .map(|&v| self.snapshot.running[v].pod.clone())
                .collect(),
            victim_positions: victims,
        });
        Ok(())
    }

    /// Marks what a placement takes. A nomination (`nominated`) holds its
    /// GPUs whole, so that no later decision takes them.
    fn take(&mut self, placement: &Placement, request: &Request, position: usize, nominated: bool) {
        let (n, ref gpus) = placement.at;
        let node = &self.snapshot.nodes[n];
        let first = self.node_start[n];
        if let Some(Some(counters)) = self.counters.get(n) {
            let left = &mut self.counters_left[n];
            // A GPU consumes its counters once, when it goes into use.
            let slots = &self.gpus[first..];
            let unused = |g: u32| {
                slots
                    .get(g as usize)
                    .is_none_or(|s| s.shares == 0 && s.held.is_none())
            };
            for &g in gpus.iter().filter(|&&g| unused(g)) {
                for &(c, amount) in counters.of(g) {
                    if let Some(l) = left.get_mut(c as usize) {
                        *l = l.saturating_sub(amount);
                    }
                }
            }
        }
        let share = match &request.ask {
            Ask::Gpus(shape) if shape.sharing == Sharing::Shared && !nominated => {
                Some(shape.memory_mib)
            }
            _ => None,
        };
        for &g in gpus {
            if let Some(mig) = &node.gpus[g as usize].mig {
                self.gpus[first + mig.parent as usize].mig_held += 1;
            }
            let left = &mut self.gpus[first + g as usize];
            match share {
                None => {
                    left.held = Some(Holder::Pending(position));
                    left.free_mib = 0;
                }
                Some(mib) => {
                    left.shares += 1;
                    left.free_mib = left.free_mib.saturating_sub(mib);
                }
            }
        }
        if let Some(t) = request.tenant
            && let Some(took) = self.tenant_took.get_mut(t as usize)
        {
            *took = took.saturating_add(gpus.len() as u32);
        }
    }
}

/// The name of `request`'s gang, when it is a member of one.
fn gang_of(snapshot: &Snapshot, request: &Request) -> Option<String> {
    let gang = snapshot.gangs.get(request.gang? as usize)?;
    Some(gang.name.clone())
}

/// Moves the assignments of every gang that, with its members already
/// bound, stays short of its `min-member` from `accepted` to `waiting`.
fn hold_back_short_gangs(snapshot: &Snapshot, verdict: &mut Verdict) {
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

type Reason = Box<dyn FnOnce(String) -> Invalid>;

/// A whole GPU or MIG instance has the memory `shape` asks of each
/// (`memoryMiB` with a MIG profile is the instance's own).
fn has_memory(info: &Gpu, shape: &GpuShape) -> Result<(), Reason> {
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
fn free_for_exclusive(
    snapshot: &Snapshot,
    node: &Node,
    info: &Gpu,
    left: &[GpuLeft],
    g: u32,
) -> Result<(), Reason> {
    let this = &left[g as usize];
    if let Some(holder) = this.held {
        let by = match holder {
            Holder::Pending(p) => snapshot.pending[p].pod.clone(),
            Holder::Before => "a running pod".to_owned(),
        };
        return Err(Box::new(move |gpu| Invalid::GpuTaken { gpu, by }));
    }
    if let Some(mig) = &info.mig {
        let parent = &left[mig.parent as usize];
        if parent.held.is_some() || parent.shares > 0 {
            return Err(Box::new(|gpu| Invalid::GpuTaken {
                gpu,
                by: "the holder of its parent GPU".into(),
            }));
        }
    } else if this.mig_held > 0 {
        let by = format!("{} of its MIG instance(s)", this.mig_held);
        return Err(Box::new(move |gpu| Invalid::GpuTaken { gpu, by }));
    }
    if this.shares > 0 || this.free_mib < info.memory_mib {
        let by = format!("{} shared allocation(s)", this.shares.max(1));
        return Err(Box::new(move |gpu| Invalid::GpuTaken { gpu, by }));
    }
    let _ = node;
    Ok(())
}

/// Whether a unit's health (a MIG instance takes its parent's) lets it be
/// given.
fn healthy(node: &Node, info: &Gpu) -> bool {
    let parent_unhealthy = info
        .mig
        .as_ref()
        .and_then(|m| node.gpus.get(m.parent as usize))
        .is_some_and(|p| !p.healthy);
    info.healthy && !parent_unhealthy
}

/// Whether one GPU (or MIG instance) can serve `shape` now; the error
/// takes the GPU's name.
fn check_gpu(
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
                let by = match holder {
                    Holder::Pending(p) => snapshot.pending[p].pod.clone(),
                    Holder::Before => "a running pod".to_owned(),
                };
                return Err(Box::new(move |gpu| Invalid::GpuTaken { gpu, by }));
            }
            if this.mig_held > 0 {
                let by = format!("{} of its MIG instance(s)", this.mig_held);
                return Err(Box::new(move |gpu| Invalid::GpuTaken { gpu, by }));
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

#[cfg(test)]
mod tests;
