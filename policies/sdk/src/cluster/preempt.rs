//! Preemption by priority: when a pending pod fits nowhere now, find the
//! node where evicting the fewest lower-priority pods makes room, and name
//! exactly those pods (the host refuses a needless victim).
//!
//! ```text
//!   eligible node ── running pods there: lower priority, evictable, past
//!        │           their minimum runtime, not yet a victim; a gang
//!        │           member only if every running member of its gang is
//!        │           (lowest priority first, pods in no gang first, then
//!        │           youngest)
//!        ▼
//!   release them one by one on a copy of the node until the pod fits (a
//!   gang's members on the node together)
//!        ▼
//!   victims = those holding a GPU the pod is given (or its MIG parent or
//!   instance), each gang among them with all its running members, on any
//!   node; best node: fewest victims, then lowest priorities, then lowest
//!   position, among the first 100 nodes in position order that could
//!   make room; the search stops at a node that needs one victim of the
//!   lowest priority running anywhere (none can do better)
//! ```
//!
//! Exclusive, MIG and DRA requests preempt (a DRA request's devices are
//! found on the node as [`Cluster::place_claims`] finds them, and the
//! decision carries its claim choices); shared requests (which take part of
//! a GPU) and gang members do not, nor pods whose `preemptionPolicy` is
//! `Never`.

use super::claims::Usable;
use super::nodes::GpuState;
use super::state::Cluster;
use super::want::{Fit, Want};

use crate::nvlink::Nvlink;
use wasmgpu_contract::{Assignment, ClaimChoice, Decision, Preemption, PreemptionPolicy, Running};

/// Where a preemptor goes on a node once its victims are gone: the GPUs
/// (positions on the node), and for a DRA request the claim choices that
/// name them.
struct Fits {
    gpus: Vec<usize>,
    claims: Vec<ClaimChoice>,
}

/// One node's best preemption.
struct Choice {
    victims: Vec<u32>,
    /// The sum of the victims' priorities.
    priorities: i64,
    node: u32,
    fits: Fits,
}

impl Choice {
    /// Fewest victims, then lowest priorities, then lowest position.
    fn rank(&self) -> (usize, i64, u32) {
        (self.victims.len(), self.priorities, self.node)
    }
}

/// How many nodes that could make room a preemption compares before it
/// picks among them (kube-scheduler's preemption compares at least as many,
/// `minCandidateNodesAbsolute`, for the one pod it preempts for at a time).
/// Without a bound, a backlog of pods that fit nowhere in a full cluster
/// costs pods × nodes a round: 1,000 such pods at 10,000 nodes took 1.6 s
/// (docs/BENCHMARKS.md).
pub(super) const ENOUGH_CANDIDATES: usize = 100;

impl<'s> Cluster<'s> {
    /// A `preempt` decision for `want` (see the module docs), committed to
    /// this round's state: its GPUs are taken, its victims may not be named
    /// again. `None` when the pod may not preempt or no eviction makes room.
    pub fn preempt(&mut self, want: &Want<'s>, fit: Fit, nvlink: Nvlink) -> Option<Decision> {
        let priority = want.request.priority;
        if self.running_on.lowest_anywhere >= priority {
            return None;
        }
        let below = Some(priority);
        self.preempt_among(want, fit, nvlink, below, &|pod: &Running| {
            pod.priority < priority
        })
    }

    /// [`Cluster::preempt`] with another rule for who may be evicted:
    /// running pods for which `may_evict` holds (and which are evictable,
    /// past their minimum runtime, not yet a victim; a gang member only
    /// when all its gang's running members are, and then with all of them). Reclaim
    /// names pods of tenants over their quota this way, whatever their
    /// priority; the host checks the rule it applies (docs/POLICIES.md).
    pub fn preempt_where(
        &mut self,
        want: &Want<'s>,
        fit: Fit,
        nvlink: Nvlink,
        may_evict: &dyn Fn(&Running) -> bool,
    ) -> Option<Decision> {
        self.preempt_among(want, fit, nvlink, None, may_evict)
    }

    /// [`Cluster::preempt_where`], looking only at nodes where a pod of
    /// priority below `below` runs when it is given (a rule that evicts
    /// only such pods finds nothing elsewhere).
    fn preempt_among(
        &mut self,
        want: &Want<'s>,
        fit: Fit,
        nvlink: Nvlink,
        below: Option<i32>,
        may_evict: &dyn Fn(&Running) -> bool,
    ) -> Option<Decision> {
        let request = want.request;
        if request.preemption == PreemptionPolicy::Never
            || request.gang.is_some()
            || !want.exclusive()
        {
            return None;
        }
        let mut best: Option<Choice> = None;
        let mut nodes: Vec<u32> = match want.claims() {
            Some(claims) => self.claim_nodes(request, claims),
            None => self.eligible(request).collect(),
        };
        nodes.retain(|&node| below.is_none_or(|p| self.running_on.lower_than(node, p)));
        // Nothing beats one victim of the lowest priority running anywhere:
        // the first node (in position order) that needs only that is the
        // best. Else the search ends after `ENOUGH_CANDIDATES` nodes could
        // make room.
        let floor = (1, i64::from(self.running_on.lowest_anywhere));
        let mut found = 0;
        for node in nodes {
            if (node as usize) >= self.nodes.len() {
                continue;
            }
            let Some(option) = self.preempt_on(node, want, fit, nvlink, may_evict) else {
                continue;
            };
            found += 1;
            if best.as_ref().is_none_or(|b| option.rank() < b.rank()) {
                best = Some(option);
            }
            let at_floor = best
                .as_ref()
                .is_some_and(|b| (b.victims.len(), b.priorities) <= floor);
            if at_floor || found >= ENOUGH_CANDIDATES {
                break;
            }
        }
        let Choice {
            victims,
            node,
            fits,
            ..
        } = best?;
        self.commit(node, &fits.gpus, want);
        for &v in &victims {
            self.victim_taken[v as usize] = true;
        }
        // A DRA request's devices are named by its claim choices.
        let gpus = match want.is_dra() {
            true => Vec::new(),
            false => fits.gpus.iter().map(|&g| g as u32).collect(),
        };
        Some(Decision::Preempt(Preemption {
            assignment: Assignment {
                pod: want.position,
                node,
                gpus,
                claims: fits.claims,
            },
            victims,
        }))
    }

    /// Where `want` goes on `node` as the round's state stands: the GPUs
    /// [`Cluster::pick_gpus`] picks, or for a DRA request the devices
    /// [`Cluster::place_claims`] would choose there.
    fn fits_on(&self, node: u32, want: &Want<'s>, fit: Fit, nvlink: Nvlink) -> Option<Fits> {
        match want.claims() {
            Some(claims) => {
                let claims = self.solve_on(node, claims, Usable::Free)?;
                let gpus = claims
                    .iter()
                    .flat_map(|c| c.gpus.iter().map(|&g| g as usize))
                    .collect();
                Some(Fits { gpus, claims })
            }
            None => Some(Fits {
                gpus: self.pick(node, want, fit, nvlink)?,
                claims: Vec::new(),
            }),
        }
    }

    /// Why `want` could not preempt although pods of lower priority run
    /// where it may go: how many a PodDisruptionBudget protects now, and
    /// how many are within their minimum runtime (with when the first is
    /// past it). `None` when none is.
    pub fn preemption_blocked(&self, want: &Want<'s>) -> Option<String> {
        let request = want.request;
        if request.preemption == PreemptionPolicy::Never
            || self.running_on.lowest_anywhere >= request.priority
        {
            return None;
        }
        let lower: Vec<&Running> = self
            .eligible(request)
            .filter(|&node| self.running_on.lower_than(node, request.priority))
            .flat_map(|node| self.running_on.on(node))
            .map(|&r| &self.snapshot.running[r as usize])
            .filter(|pod| pod.priority < request.priority)
            .collect();
        let unevictable = lower.iter().filter(|pod| !pod.evictable).count();
        let young: Vec<u64> = lower
            .iter()
            .filter(|pod| pod.evictable && pod.protected_ms > 0)
            .map(|pod| pod.protected_ms)
            .collect();
        let mut why = Vec::new();
        if unevictable > 0 {
            why.push(format!(
                "{unevictable} pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now"
            ));
        }
        if let Some(first) = young.iter().min() {
            why.push(format!(
                "{} pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in {} s)",
                young.len(),
                first.div_ceil(1000)
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// The running pods `want` may evict on `node`, in eviction order.
    fn candidates(&self, node: u32, may_evict: &dyn Fn(&Running) -> bool) -> Vec<u32> {
        let running = &self.snapshot.running;
        let may_go = |r: u32| {
            let pod = &running[r as usize];
            may_evict(pod)
                && pod.evictable
                && pod.protected_ms == 0
                && !self.victim_taken[r as usize]
        };
        let mut found: Vec<u32> = self
            .running_on
            .on(node)
            .iter()
            .copied()
            .filter(|&r| {
                may_go(r)
                    && self
                        .gang_of(r)
                        .is_none_or(|members| members.iter().all(|&m| may_go(m)))
            })
            .collect();
        found.sort_by(|&a, &b| {
            let (a, b) = (&running[a as usize], &running[b as usize]);
            (
                a.priority,
                a.gang.is_some(),
                std::cmp::Reverse(a.started_ms),
                &a.pod,
            )
                .cmp(&(
                    b.priority,
                    b.gang.is_some(),
                    std::cmp::Reverse(b.started_ms),
                    &b.pod,
                ))
        });
        found
    }

    /// The running members of running pod `r`'s gang; `None` when it is in
    /// none.
    fn gang_of(&self, r: u32) -> Option<&'s [u32]> {
        let g = self.snapshot.running[r as usize].gang?;
        let gang = self.snapshot.gangs.get(g as usize)?;
        Some(&gang.running)
    }

    /// The preemption on `node`, if evicting candidates makes room.
    fn preempt_on(
        &mut self,
        node: u32,
        want: &Want<'s>,
        fit: Fit,
        nvlink: Nvlink,
        may_evict: &dyn Fn(&Running) -> bool,
    ) -> Option<Choice> {
        let candidates = self.candidates(node, may_evict);
        if candidates.is_empty() {
            return None;
        }
        let saved = self.nodes[node as usize].gpus.clone();
        let mut picked = None;
        // The pods released so far (a few: they all run on this node).
        let mut released: Vec<u32> = Vec::new();
        for (k, &victim) in candidates.iter().enumerate() {
            // A gang member goes with its gang: its mates here free their
            // GPUs at the same time.
            let going: Vec<u32> = match self.gang_of(victim) {
                Some(members) => members
                    .iter()
                    .copied()
                    .filter(|&m| self.snapshot.running[m as usize].node == node)
                    .collect(),
                None => vec![victim],
            };
            for r in going {
                if !released.contains(&r) {
                    released.push(r);
                    release(
                        &mut self.nodes[node as usize].gpus,
                        &self.snapshot.running[r as usize],
                    );
                }
            }
            if let Some(fits) = self.fits_on(node, want, fit, nvlink) {
                picked = Some((k, fits));
                break;
            }
        }
        self.nodes[node as usize].gpus = saved;
        let (last, fits) = picked?;
        let node_gpus = &self.snapshot.nodes[node as usize].gpus;
        let touching: Vec<u32> = candidates[..=last]
            .iter()
            .copied()
            .filter(|&v| {
                // A gang is needed when any of its members here is.
                let members: Vec<u32> = match self.gang_of(v) {
                    Some(members) => members.to_vec(),
                    None => vec![v],
                };
                members.iter().any(|&m| {
                    let pod = &self.snapshot.running[m as usize];
                    pod.node == node && touches(node_gpus, pod, &fits.gpus)
                })
            })
            .collect();
        let mut victims: Vec<u32> = Vec::with_capacity(touching.len());
        for v in touching {
            let members: Vec<u32> = match self.gang_of(v) {
                Some(members) => members.to_vec(),
                None => vec![v],
            };
            for m in members {
                if !victims.contains(&m) {
                    victims.push(m);
                }
            }
        }
        let priorities = victims
            .iter()
            .map(|&v| i64::from(self.snapshot.running[v as usize].priority))
            .sum();
        Some(Choice {
            victims,
            priorities,
            node,
            fits,
        })
    }
}

/// Frees what `pod` holds in `gpus` (a node's state).
fn release(gpus: &mut [GpuState], pod: &Running) {
    for &g in &pod.gpus {
        let Some(gpu) = gpus.get_mut(g as usize) else {
            continue;
        };
        if pod.shared_mib > 0 {
            gpu.shares = gpu.shares.saturating_sub(1);
            gpu.free_mib = gpu
                .free_mib
                .saturating_add(pod.shared_mib)
                .min(gpu.memory_mib);
            continue;
        }
        gpu.exclusive = false;
        gpu.free_mib = gpu.memory_mib;
        match gpu.mig {
            Some((parent, _)) => {
                if let Some(parent) = gpus.get_mut(parent as usize) {
                    parent.mig_held = parent.mig_held.saturating_sub(1);
                }
            }
            None => {
                for other in gpus.iter_mut() {
                    if other.mig.is_some_and(|(p, _)| p == g) {
                        other.parent_busy = false;
                    }
                }
            }
        }
    }
}

/// Whether `pod` holds one of `picked` (positions on the node), the parent
/// of a picked MIG instance, or an instance of a picked whole GPU.
fn touches(node: &[wasmgpu_contract::Gpu], pod: &Running, picked: &[usize]) -> bool {
    let parent_of = |g: usize| {
        node.get(g)
            .and_then(|gpu| gpu.mig)
            .map(|m| m.parent as usize)
    };
    pod.gpus.iter().any(|&held| {
        let held = held as usize;
        picked
            .iter()
            .any(|&p| p == held || parent_of(p) == Some(held) || parent_of(held) == Some(p))
    })
}

#[cfg(test)]
mod tests {
    use crate::nvlink::Nvlink;
    use crate::testing::{node, request, running, running_on_each_gpu, snapshot, validate};
    use crate::{Cluster, Fit};
    use wasmgpu_contract::{Decision, Sharing, preempt};

    /// Node "n": 8 GPUs each held by a pod of priority 100 (started 0–7);
    /// node "m": 4 GPUs, two held by priority-10 pods.
    fn full() -> wasmgpu_contract::Snapshot {
        let mut snap = snapshot(
            vec![
                node("n", 8, "NVIDIA H100", 81920),
                node("m", 4, "NVIDIA H100", 81920),
            ],
            vec![request("ml/urgent", 4, Sharing::Exclusive, 0)],
        );
        snap.pending[0].priority = 1000;
        running_on_each_gpu(&mut snap, 0, "batch/p", 100);
        snap
    }

    fn decide(snap: &wasmgpu_contract::Snapshot) -> Option<Decision> {
        let mut cluster = Cluster::new(snap);
        let want = cluster.want(&snap.pending[0]);
        cluster.preempt(&want, Fit::Tightest, Nvlink::Ignore)
    }

    /// Makes running pods `members` gang `batch/g`.
    fn gang_of(snap: &mut wasmgpu_contract::Snapshot, members: &[u32]) {
        crate::testing::gang(snap, "batch/g", members.len() as u32, &[]);
        let g = snap.gangs.len() as u32 - 1;
        for &r in members {
            snap.running[r as usize].gang = Some(g);
            snap.gangs[g as usize].running.push(r);
        }
    }

    #[test]
    fn a_gang_goes_whole_and_only_when_cheaper_than_pods_in_none() {
        // The youngest two are a gang: the four youngest in no gang go.
        let mut snap = full();
        gang_of(&mut snap, &[6, 7]);
        let decision = decide(&snap).expect("a preemption");
        assert_eq!(decision, preempt(0, 0, vec![2, 3, 4, 5], vec![5, 4, 3, 2]));
        assert!(validate(&snap, &[decision]).refused.is_empty());

        // p0–p3 are protected; p4 and p5 are a gang with m0 on node m. On
        // m, evicting m0 makes room, and the gang goes whole: 3 victims,
        // fewer than n's 5 (p7, p6 and the gang).
        let mut snap = full();
        running(&mut snap, "batch/m0", 100, 1, &[0], 0);
        for r in &mut snap.running[..4] {
            r.protected_ms = 1;
        }
        gang_of(&mut snap, &[4, 5, 8]);
        let decision = decide(&snap).expect("a preemption");
        assert_eq!(decision, preempt(0, 1, vec![0, 1, 2, 3], vec![4, 5, 8]));
        let verdict = validate(&snap, &[decision]);
        assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);

        // A gang member that may not go keeps its whole gang: 2 GPUs can
        // be freed on n, none on m.
        snap.running[8].evictable = false;
        assert_eq!(decide(&snap), None);
    }

    #[test]
    fn the_fewest_lowest_youngest_pods_go_and_the_host_accepts_them() {
        let mut snap = full();
        // m has 2 GPUs free and 2 held by priority-10 pods: 2 victims there.
        running(&mut snap, "batch/m0", 10, 1, &[0], 0);
        running(&mut snap, "batch/m1", 10, 1, &[1], 0);
        let decision = decide(&snap).expect("a preemption");
        assert_eq!(decision, preempt(0, 1, vec![0, 1, 2, 3], vec![8, 9]));
        assert!(validate(&snap, &[decision]).refused.is_empty());
        // Without m, n's youngest four go.
        let snap = full();
        let decision = decide(&snap).expect("a preemption");
        assert_eq!(decision, preempt(0, 0, vec![4, 5, 6, 7], vec![7, 6, 5, 4]));
        let verdict = validate(&snap, &[decision]);
        assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
    }

    #[test]
    fn nobody_is_preempted_for_equal_priority_never_or_protected() {
        let mut snap = full();
        snap.pending[0].priority = 100;
        assert_eq!(decide(&snap), None);
        let mut snap = full();
        snap.pending[0].preemption = wasmgpu_contract::PreemptionPolicy::Never;
        assert_eq!(decide(&snap), None);
        let mut snap = full();
        for r in &mut snap.running[..6] {
            r.protected_ms = 1;
        }
        assert_eq!(decide(&snap), None, "only 2 GPUs could be freed");
        snap.running[0].protected_ms = 1_500;
        let cluster = Cluster::new(&snap);
        assert_eq!(
            cluster
                .preemption_blocked(&cluster.want(&snap.pending[0]))
                .as_deref(),
            Some(
                "6 pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in 1 s)"
            )
        );
        for r in &mut snap.running[..2] {
            r.protected_ms = 0;
            r.evictable = true;
        }
        let decision = decide(&snap).expect("4 unprotected pods");
        let verdict = validate(&snap, &[decision]);
        assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
    }

    #[test]
    fn a_dra_pod_preempts_through_its_claims_and_the_host_accepts_it() {
        use crate::testing::{candidate_set, claim, dra_request};
        // Node n's 8 GPUs held by priority-100 pods; a priority-1000 pod
        // claims 4 of n's first 6 (its candidates) with a second claim of 1.
        let mut snap = full();
        snap.pending.clear();
        let six = candidate_set(&mut snap, (0..6).map(|g| (0, g)));
        let mut urgent = dra_request(
            "ml/urgent",
            vec![
                claim("ml/urgent-a", &[("gpus", 3, six)]),
                claim("ml/urgent-b", &[("gpu", 1, six)]),
            ],
        );
        urgent.priority = 1000;
        snap.pending.push(urgent);
        let Some(Decision::Preempt(p)) = decide(&snap) else {
            panic!("a preemption: {:?}", decide(&snap));
        };
        // The youngest among the candidates' holders go: p5, p4, p3, p2.
        assert_eq!(p.victims, vec![5, 4, 3, 2]);
        assert!(p.assignment.gpus.is_empty(), "named by the claims");
        let chosen: Vec<u32> = p
            .assignment
            .claims
            .iter()
            .flat_map(|c| c.gpus.clone())
            .collect();
        assert_eq!(chosen, vec![2, 3, 4, 5]);
        assert_eq!(p.assignment.devices(), 4);
        let decision = Decision::Preempt(p);
        let verdict = validate(&snap, &[decision]);
        assert!(verdict.refused.is_empty(), "{:?}", verdict.refused);
        assert_eq!(verdict.preempting.len(), 1);

        // Never, or nothing lower: no preemption.
        snap.pending[0].preemption = wasmgpu_contract::PreemptionPolicy::Never;
        assert_eq!(decide(&snap), None);
        snap.pending[0].preemption = wasmgpu_contract::PreemptionPolicy::PreemptLowerPriority;
        snap.pending[0].priority = 100;
        assert_eq!(decide(&snap), None);
    }

    /// `nodes` nodes of 2 GPUs, each held by a pod of priority 0 (one pod
    /// per GPU), and one pending pod of priority 10 asking for 2.
    fn full_cluster(nodes: u32) -> wasmgpu_contract::Snapshot {
        let mut snap = snapshot(
            (0..nodes)
                .map(|n| node(&format!("n{n:04}"), 2, "NVIDIA H100", 81920))
                .collect(),
            vec![request("ml/urgent", 2, Sharing::Exclusive, 0)],
        );
        snap.pending[0].priority = 10;
        for n in 0..nodes {
            running_on_each_gpu(&mut snap, n, &format!("batch/n{n}-"), 0);
        }
        snap
    }

    /// Node `n` of a [`full_cluster`]: one pod of `priority` holds both its
    /// GPUs, so one eviction makes room there.
    fn one_pod_holds(snap: &mut wasmgpu_contract::Snapshot, n: u32, priority: i32) {
        let on: Vec<usize> = (0..snap.running.len())
            .filter(|&r| snap.running[r].node == n)
            .collect();
        snap.running[on[0]].gpus = vec![0, 1];
        snap.running[on[0]].priority = priority;
        snap.running.remove(on[1]);
    }

    #[test]
    fn the_search_compares_a_bounded_number_of_nodes_that_could_make_room() {
        // 300 nodes: every one could make room by evicting its two pods.
        // Past the first 100 candidates, node 250 needs only one victim (a
        // pod holding both its GPUs): a search over all nodes would pick
        // it; the bounded one picks the best of the first 100, node 0.
        let mut snap = full_cluster(300);
        one_pod_holds(&mut snap, 250, 0);
        assert_eq!(super::ENOUGH_CANDIDATES, 100);
        let decision = decide(&snap).expect("a preemption");
        let Decision::Preempt(p) = &decision else {
            panic!("{decision:?}")
        };
        assert_eq!((p.assignment.node, p.victims.len()), (0, 2));
        assert!(validate(&snap, &[decision]).refused.is_empty());
        // Within the first 100 it is found.
        let mut snap = full_cluster(300);
        one_pod_holds(&mut snap, 50, 0);
        let decision = decide(&snap).expect("a preemption");
        let Decision::Preempt(p) = &decision else {
            panic!("{decision:?}")
        };
        assert_eq!((p.assignment.node, p.victims.len()), (50, 1));
        assert!(validate(&snap, &[decision]).refused.is_empty());
    }

    #[test]
    fn one_victim_of_the_lowest_priority_ends_the_search_where_none_does_better() {
        // Nodes 3 and 7 each need one victim; node 3's is of priority 5,
        // node 7's of the lowest priority running anywhere (0): node 7 is
        // the best, and node 9, as good but later, is not chosen.
        let mut snap = full_cluster(12);
        for (n, priority) in [(3, 5), (7, 0), (9, 0)] {
            one_pod_holds(&mut snap, n, priority);
        }
        let decision = decide(&snap).expect("a preemption");
        let Decision::Preempt(p) = &decision else {
            panic!("{decision:?}")
        };
        assert_eq!((p.assignment.node, p.victims.len()), (7, 1));
        assert!(validate(&snap, &[decision]).refused.is_empty());
    }
}
