//! Building the policy snapshots: candidate nodes with their GPUs (and, on
//! the host side, their labels and UUIDs), pending requests with their
//! eligible nodes, the pods running on those nodes, gangs.

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmgpu_contract::glob_match;

use super::claim_asks::{CandidateCache, DraAsk};
use super::claim_records::{CandidateSets, NodesView, claims_record};
use super::eligibility;
use super::fast_map::FastMap;
use super::holdings::{Holdings, Source};
use super::inventory::NodeInventory;
use super::layout::intern;
use super::tenants::TenantTable;
use crate::facts::node::NodeFacts;
use crate::facts::pod::PodFacts;
use crate::index::Index;
use crate::key::ObjectKey;
use crate::problem::Problem;
use wasmgpu_api::{GPUResourceSpec, Sharing as ApiSharing};
use wasmgpu_contract::types::{
    Ask, GpuShape, Node, PreemptionPolicy, Request, Running, Sharing, Snapshot,
};
use wasmgpu_contract::{HostNode, HostSnapshot, bits};

/// A pod that waits for GPUs and could be placed, with its policy.
pub(crate) struct Waiting<'a> {
    pub(crate) policy: &'a str,
    pub(crate) key: &'a ObjectKey,
    pub(crate) pod: &'a PodFacts,
    /// The GPUResource it references; none for a DRA pod.
    pub(crate) resource: Option<ObjectKey>,
    /// Its request; `namespace` is set when the snapshot's table is built
    /// (and, for a DRA pod, its claims).
    pub(crate) request: Request,
    /// A DRA pod's claims, before node positions are known.
    pub(crate) dra: Option<DraAsk>,
}

/// What one pass over the pods finds.
#[derive(Default)]
pub(crate) struct Survey<'a> {
    pub(crate) waiting: Vec<Waiting<'a>>,
    problems: Vec<Problem>,
}

impl Survey<'_> {
    /// Every waiting pod's namespace and ask, for the tenant table.
    pub(crate) fn asks(&self) -> impl Iterator<Item = (&str, &Ask)> {
        self.waiting
            .iter()
            .map(|w| (w.key.namespace.as_str(), &w.request.ask))
    }
}

/// A pod the snapshot lists as running, and what the index knows of it.
pub(crate) struct RunningPod<'h> {
    pub(crate) key: &'h ObjectKey,
    pub(crate) facts: Option<&'h PodFacts>,
}

/// A node that may take pods now: Ready, not cordoned, with an inventory.
struct Candidate<'a> {
    name: &'a str,
    facts: &'a NodeFacts,
    inventory: &'a NodeInventory,
}

// === impl Index ===

impl Index {
    /// One snapshot per policy that has pending requests, keyed by policy
    /// name. Each carries every candidate node (GPUs and what pods hold on
    /// them), that policy's pending requests oldest first, and usage
    /// per namespace. `config` is left empty: the caller sets the policy's.
    /// `now_ms` (ms since the Unix epoch) counts down running pods'
    /// minimum runtime (`running.protected-ms`).
    pub fn snapshots(&self, round: u64, now_ms: u64) -> BTreeMap<String, HostSnapshot> {
        let holdings = self.holdings();
        let survey = self.survey(&holdings);
        let tenants = self.tenant_table(&holdings, survey.asks());
        let mut policy_to_waiting: BTreeMap<&str, Vec<Waiting<'_>>> = BTreeMap::new();
        for waiting in survey.waiting {
            policy_to_waiting
                .entry(waiting.policy)
                .or_default()
                .push(waiting);
        }
        policy_to_waiting
            .into_iter()
            .map(|(policy, waiting)| {
                let snapshot = self.build(round, now_ms, &holdings, &tenants, waiting);
                (policy.to_string(), snapshot)
            })
            .collect()
    }

    /// The snapshot for one policy (with no requests when none wait for
    /// it), at `now_ms` as [`Index::snapshots`].
    pub fn snapshot(&self, policy: &str, round: u64, now_ms: u64) -> HostSnapshot {
        let holdings = self.holdings();
        let survey = self.survey(&holdings);
        let tenants = self.tenant_table(&holdings, survey.asks());
        let waiting = survey
            .waiting
            .into_iter()
            .filter(|w| w.policy == policy)
            .collect();
        self.build(round, now_ms, &holdings, &tenants, waiting)
    }

    /// The policies that have pods waiting for them.
    pub fn policies_with_pending(&self) -> Vec<String> {
        self.policies_with_pending_in(&self.holdings())
    }

    pub(super) fn policies_with_pending_in(&self, holdings: &Holdings) -> Vec<String> {
        let mut policies: Vec<String> = self
            .survey(holdings)
            .waiting
            .iter()
            .map(|w| w.policy.to_string())
            .collect();
        policies.sort();
        policies.dedup();
        policies
    }

    /// Errors users can act on: pods naming no or a missing GPUResource,
    /// invalid GPUResources, requests no node could ever hold.
    pub fn problems(&self) -> Vec<Problem> {
        let mut problems = self.survey(&self.holdings()).problems;
        problems.extend(self.resourceslice_problems());
        problems
    }

    /// The problems of [`Index::problems`] from `survey`, made of
    /// `holdings`, and gang members waiting past their PodGroup's
    /// `scheduleTimeoutSeconds` at `now_ms`.
    pub(super) fn problems_of(
        &self,
        survey: Survey<'_>,
        holdings: &Holdings,
        now_ms: u64,
    ) -> Vec<Problem> {
        let mut problems = survey.problems;
        problems.extend(self.gang_timeouts(&survey.waiting, holdings, now_ms));
        problems.extend(self.resourceslice_problems());
        problems
    }

    /// Sorts the pods: who waits (and for which policy), who has a problem.
    pub(crate) fn survey(&self, holdings: &Holdings) -> Survey<'_> {
        let mut survey = Survey::default();
        // Pods with the same constraints and GPUResource fit the same nodes.
        let mut fit_to_reason: FastMap<(&str, ObjectKey), Option<String>> = FastMap::default();
        for (resource, state) in &self.key_to_resource {
            if let Some(error) = &state.spec_error {
                survey.problems.push(Problem::InvalidResource {
                    resource: resource.clone(),
                    error: error.clone(),
                });
            }
        }
        let mut cache = CandidateCache::default();
        for (key, pod) in &self.key_to_pod {
            if !pod.unplaced() || holdings.holds(key, pod) {
                continue;
            }
            if !pod.claims.is_empty() {
                match self.dra_waiting(key, pod, &mut cache) {
                    Ok(waiting) => survey.waiting.push(waiting),
                    Err(problem) => survey.problems.push(problem),
                }
                continue;
            }
            let Some(resource_name) = pod.resource.as_deref().filter(|r| !r.is_empty()) else {
                // Extended resources a DeviceClass maps: the controller
                // makes its claim first (Index::extended_claims).
                if self.extended_classes(pod).is_empty() {
                    survey
                        .problems
                        .push(Problem::NoResourceAnnotation { pod: key.clone() });
                }
                continue;
            };
            let resource = ObjectKey::new(&key.namespace, resource_name);
            let Some(state) = self.key_to_resource.get(&resource) else {
                survey.problems.push(Problem::MissingResource {
                    pod: key.clone(),
                    resource,
                });
                continue;
            };
            // An invalid spec is reported on the GPUResource; one being
            // deleted takes no new pods.
            if state.spec_error.is_some() || state.deleting {
                continue;
            }
            let limit = match &pod.gpu_limit {
                Ok(limit) => *limit,
                Err(error) => {
                    survey.problems.push(Problem::UnreadableLimit {
                        pod: key.clone(),
                        error: error.clone(),
                    });
                    continue;
                }
            };
            if let Some(limit) = limit
                && limit != u64::from(state.spec.count)
            {
                survey.problems.push(Problem::LimitMismatch {
                    pod: key.clone(),
                    resource: resource.clone(),
                    limit,
                    count: state.spec.count,
                });
                continue;
            }
            if let Some(group) = &pod.pod_group {
                let gang = ObjectKey::new(&key.namespace, group);
                if !self.key_to_gang.contains_key(&gang) {
                    survey.problems.push(Problem::MissingPodGroup {
                        pod: key.clone(),
                        resource: resource.clone(),
                        group: gang,
                    });
                    continue;
                }
            }
            let reason = fit_to_reason
                .entry((pod.constraints_key.as_str(), resource.clone()))
                .or_insert_with(|| self.unsatisfiable(key, pod, &state.spec))
                .clone();
            if let Some(reason) = reason {
                survey.problems.push(Problem::Unsatisfiable {
                    pod: key.clone(),
                    resource,
                    reason,
                });
                continue;
            }
            let spec = &state.spec;
            survey.waiting.push(Waiting {
                policy: self.policy_of(spec),
                key,
                pod,
                resource: Some(resource),
                request: request_of(
                    key,
                    pod,
                    Ask::Gpus(GpuShape {
                        count: spec.count,
                        model: spec.model.clone(),
                        mig_profile: spec.mig_profile.clone(),
                        memory_mib: spec.memory_mib,
                        sharing: match spec.sharing {
                            ApiSharing::Exclusive => Sharing::Exclusive,
                            ApiSharing::Shared => Sharing::Shared,
                        },
                    }),
                ),
                dra: None,
            });
        }
        survey
    }

    /// A pod asking through `spec.resourceClaims`, waiting for its policy
    /// (its `wasmgpu.io/policy` annotation, else the default); or why it
    /// cannot.
    // A Problem is what the survey collects anyway; boxing it only to
    // move it into that list buys nothing.
    #[allow(clippy::result_large_err)]
    fn dra_waiting<'a>(
        &'a self,
        key: &'a ObjectKey,
        pod: &'a PodFacts,
        cache: &mut CandidateCache,
    ) -> Result<Waiting<'a>, Problem> {
        if let Some(resource) = &pod.resource {
            return Err(Problem::UnusableClaim {
                pod: key.clone(),
                claim: String::new(),
                reason: format!(
                    "the pod asks through both GPUResource {resource} ({} annotation) and spec.resourceClaims; use one",
                    wasmgpu_api::GPURESOURCE_ANNOTATION
                ),
            });
        }
        let ask = self.dra_ask(key, pod, cache)?;
        if let Some((claim, reason)) = self.claims_never_fit(pod, &ask, cache) {
            return Err(Problem::UnsatisfiableClaim {
                pod: key.clone(),
                claim,
                reason,
            });
        }
        Ok(Waiting {
            policy: pod.policy.as_deref().unwrap_or(&self.default_policy),
            key,
            pod,
            resource: None,
            request: request_of(key, pod, Ask::Claims(Vec::new())),
            dra: Some(ask),
        })
    }

    /// Why no node could ever hold the request, whatever is allocated and
    /// whichever nodes are ready: no node the pod may run on has `count`
    /// GPUs of the model with the memory. `None` when some node could.
    fn unsatisfiable(
        &self,
        key: &ObjectKey,
        pod: &PodFacts,
        spec: &GPUResourceSpec,
    ) -> Option<String> {
        if self.node_to_inventory.is_empty() && self.node_to_lost_inventory.is_empty() {
            return Some("no node has published a GPU inventory (GPUNode)".into());
        }
        let mut allowed_nodes = 0;
        let mut most_fitting = 0;
        // A node whose GPUNode was deleted counts with what it last listed:
        // its agent publishes it again, and the pod waits for that.
        let inventories = self
            .node_to_inventory
            .iter()
            .chain(&self.node_to_lost_inventory);
        for (name, inventory) in inventories {
            let Some(facts) = self.name_to_node.get(name) else {
                continue;
            };
            if let Err(why) = eligibility::check(pod, name, facts) {
                tracing::trace!(pod = %key, node = %name, %why, "Node not eligible");
                continue;
            }
            allowed_nodes += 1;
            let fitting = match &spec.mig_profile {
                Some(profile) => inventory
                    .gpus
                    .iter()
                    .filter(|gpu| could_hold(spec, &gpu.model, u64::MAX))
                    .flat_map(|gpu| &gpu.mig_instances)
                    .filter(|m| inventory.agent_publishes(&m.uuid))
                    .filter(|m| &m.profile == profile)
                    .filter(|m| m.memory_total_mib >= spec.memory_mib)
                    .count(),
                None => inventory
                    .gpus
                    .iter()
                    .filter(|gpu| inventory.agent_publishes(&gpu.uuid))
                    .filter(|gpu| could_hold(spec, &gpu.model, gpu.memory_total_mib))
                    .count(),
            };
            if fitting >= spec.count as usize {
                return None;
            }
            most_fitting = most_fitting.max(fitting);
        }
        if allowed_nodes == 0 {
            return Some(
                "no node with GPUs matches the pod's nodeSelector, node affinity and tolerations"
                    .into(),
            );
        }
        let model = spec
            .model
            .as_deref()
            .map(|m| format!(" matching {m:?}"))
            .unwrap_or_default();
        if let Some(profile) = &spec.mig_profile {
            return Some(format!(
                "wants {} MIG instance(s) of profile {profile:?}{model} on one node; the {allowed_nodes} node(s) it may run on have at most {most_fitting}",
                spec.count
            ));
        }
        let memory = match (spec.sharing, spec.memory_mib) {
            (_, 0) => String::new(),
            (ApiSharing::Exclusive, mib) => format!(" with at least {mib} MiB"),
            (ApiSharing::Shared, mib) => format!(" with room for {mib} MiB"),
        };
        Some(format!(
            "wants {} GPUs{model}{memory} on one node; the {allowed_nodes} node(s) it may run on have at most {most_fitting}",
            spec.count
        ))
    }

    /// The snapshot of `waiting` (already of one policy); `tenants` is the
    /// round's, over every policy.
    fn build(
        &self,
        round: u64,
        now_ms: u64,
        holdings: &Holdings,
        tenants: &TenantTable,
        mut waiting: Vec<Waiting<'_>>,
    ) -> HostSnapshot {
        let candidates = self.candidate_nodes();
        waiting.sort_by(|a, b| {
            (a.request.created_ms, &a.request.pod).cmp(&(b.request.created_ms, &b.request.pod))
        });
        // Sets are numbered in the order of first use; pods with the same
        // constraints are checked once, and equal sets are shared.
        let mut eligible_sets: Vec<Vec<u64>> = Vec::new();
        let mut set_to_position: FastMap<Vec<u64>, u32> = FastMap::default();
        let mut constraints_to_position: FastMap<&str, u32> = FastMap::default();
        for w in &mut waiting {
            if let Some(&position) = constraints_to_position.get(w.pod.constraints_key.as_str()) {
                w.request.eligible_set = position;
                continue;
            }
            let set = bits::from_indices(
                candidates.len(),
                candidates
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| eligibility::check(w.pod, c.name, c.facts).is_ok())
                    .map(|(i, _)| i as u32),
            );
            let position = *set_to_position.entry(set).or_insert_with_key(|set| {
                eligible_sets.push(set.clone());
                eligible_sets.len() as u32 - 1
            });
            constraints_to_position.insert(&w.pod.constraints_key, position);
            w.request.eligible_set = position;
        }
        let mut tables = Tables::default();
        let (nodes, host_nodes): (Vec<Node>, Vec<HostNode>) = candidates
            .iter()
            .map(|c| node_record(c, holdings, &mut tables))
            .unzip();
        let candidate_sets = dra_records(
            &candidates,
            &host_nodes,
            &mut waiting,
            &mut eligible_sets,
            &mut set_to_position,
        );
        let (mut running, running_pods) = self.running(&candidates, &host_nodes, holdings);
        let gangs = self.gangs_of(&mut waiting, &mut running, &running_pods, holdings);
        // Each namespace once, in order (thousands of pods, a few of them).
        let mut namespaces: Vec<String> = waiting
            .iter()
            .map(|w| w.key.namespace.as_str())
            .chain(running_pods.iter().map(|p| p.key.namespace.as_str()))
            .collect::<std::collections::HashSet<&str, ahash::RandomState>>()
            .into_iter()
            .map(str::to_owned)
            .collect();
        namespaces.sort_unstable();
        let position = |ns: &str| {
            namespaces
                .binary_search_by(|n| n.as_str().cmp(ns))
                .unwrap_or(0) as u32
        };
        for w in &mut waiting {
            w.request.namespace = position(&w.key.namespace);
            w.request.tenant = tenants.of(&w.key.namespace);
            if self.preemption_backoffs.active(w.key, now_ms) {
                w.request.preemption = PreemptionPolicy::Never;
            }
        }
        for (r, p) in running.iter_mut().zip(&running_pods) {
            r.namespace = position(&p.key.namespace);
            r.tenant = tenants.of(&p.key.namespace);
            let min_runtime_ms = tenants
                .min_runtime_ms(r.tenant)
                .unwrap_or(self.min_runtime_ms);
            r.protected_ms = protected_ms(r.started_ms, min_runtime_ms, now_ms);
        }
        let resources = waiting
            .iter()
            .map(|w| w.resource.as_ref().map(ToString::to_string))
            .collect();
        HostSnapshot {
            resources,
            snapshot: Snapshot {
                round,
                models: tables.models,
                mig_profiles: tables.mig_profiles,
                namespaces,
                label_keys: Vec::new(),
                nodes,
                pending: waiting.into_iter().map(|w| w.request).collect(),
                running,
                eligible_sets,
                candidate_sets,
                gangs,
                tenants: tenants.tenants.clone(),
                config: String::new(),
            },
            nodes: host_nodes,
        }
    }

    /// The pods holding GPUs on the candidate nodes, by node then pod, and
    /// their keys (namespaces are set by the caller). Gang members reserved
    /// and preemptors nominated hold GPUs without running: they are not
    /// listed.
    fn running<'h>(
        &self,
        candidates: &[Candidate<'_>],
        host_nodes: &[HostNode],
        holdings: &'h Holdings<'_>,
    ) -> (Vec<Running>, Vec<RunningPod<'h>>) {
        let node_to_position: FastMap<&str, u32> = candidates
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name, i as u32))
            .collect();
        let victims = self.nominated_victims();
        // By node: holdings come by pod, mostly in key order already.
        let mut node_to_found: Vec<Vec<(RunningPod<'h>, Running)>> =
            (0..candidates.len()).map(|_| Vec::new()).collect();
        for holding in holdings.live() {
            if matches!(holding.source, Source::Reservation | Source::Nomination) {
                continue;
            }
            let allocation = holding.allocation;
            let Some(&node) = node_to_position.get(allocation.node.as_str()) else {
                continue;
            };
            let uuids = &host_nodes[node as usize].uuids;
            let gpus = allocation
                .devices
                .iter()
                .filter_map(|d| uuids.iter().position(|u| *u == d.uuid))
                .map(|p| p as u32)
                .collect();
            let facts = holding.facts;
            let shared_mib = match allocation.sharing {
                ApiSharing::Shared => allocation.devices.first().map_or(0, |d| d.memory_mib),
                ApiSharing::Exclusive => 0,
            };
            let key = holding.pod;
            let mut pod = String::with_capacity(key.namespace.len() + 1 + key.name.len());
            pod.push_str(&key.namespace);
            pod.push('/');
            pod.push_str(&key.name);
            // A pod already going (evicted, deleted) or named a victim of a
            // nomination is not named again: its GPUs are promised. Nor is
            // one sharing a claim with other pods: its devices would stay
            // held by them.
            let evictable = facts.is_some_and(|p| {
                !p.deleting
                    && !victims.contains(p.uid.as_str())
                    && self.evictable(key, &p.labels)
                    && !self.shares_a_claim(&key.namespace, p)
            });
            node_to_found[node as usize].push((
                RunningPod { key, facts },
                Running {
                    pod,
                    namespace: 0,
                    tenant: None,
                    priority: facts.map_or(0, |p| p.priority),
                    node,
                    gpus,
                    shared_mib,
                    started_ms: facts.map_or(0, |p| p.started_ms),
                    gang: None,
                    evictable,
                    protected_ms: 0,
                },
            ));
        }
        let mut running = Vec::with_capacity(node_to_found.iter().map(Vec::len).sum());
        let mut pods = Vec::with_capacity(running.capacity());
        for mut found in node_to_found {
            found.sort_by(|a, b| a.0.key.cmp(b.0.key));
            for (pod, r) in found {
                pods.push(pod);
                running.push(r);
            }
        }
        (running, pods)
    }
}

impl Index {
    /// The nodes pods may go to now (Ready, schedulable, with an
    /// inventory), in name order: both maps are walked side by side
    /// rather than one looked up for each entry of the other.
    fn candidate_nodes(&self) -> Vec<Candidate<'_>> {
        let mut candidates = Vec::with_capacity(self.node_to_inventory.len());
        let mut inventories = self.node_to_inventory.iter().peekable();
        for (name, facts) in &self.name_to_node {
            while inventories.next_if(|(n, _)| *n < name).is_some() {}
            let Some((_, inventory)) = inventories.next_if(|(n, _)| *n == name) else {
                continue;
            };
            if facts.schedulable() {
                candidates.push(Candidate {
                    name,
                    facts,
                    inventory,
                });
            }
        }
        candidates
    }

    /// Whether one of `pod`'s claims (in `namespace`) is reserved for
    /// another pod too.
    fn shares_a_claim(&self, namespace: &str, pod: &PodFacts) -> bool {
        pod.claim_names().any(|name| {
            self.dra
                .claim(&ObjectKey::new(namespace, name))
                .is_some_and(|c| c.reserved_for().any(|uid| uid != pod.uid))
        })
    }
}

/// A pending pod's request with `ask`; its namespace, tenant, eligible set
/// and gang are filled in when the snapshot is built.
fn request_of(key: &ObjectKey, pod: &PodFacts, ask: Ask) -> Request {
    Request {
        pod: key.to_string(),
        namespace: 0,
        tenant: None,
        priority: pod.priority,
        preemption: if pod.never_preempts {
            PreemptionPolicy::Never
        } else {
            PreemptionPolicy::PreemptLowerPriority
        },
        created_ms: pod.created_ms,
        eligible_set: 0,
        gang: None,
        ask,
    }
}

/// Fills in the DRA pods' claims (devices as positions) and narrows their
/// eligible sets; returns the snapshot's candidate sets.
fn dra_records(
    candidates: &[Candidate<'_>],
    host_nodes: &[HostNode],
    waiting: &mut [Waiting<'_>],
    eligible_sets: &mut Vec<Vec<u64>>,
    set_to_position: &mut FastMap<Vec<u64>, u32>,
) -> Vec<Vec<wasmgpu_contract::types::GpuRef>> {
    if waiting.iter().all(|w| w.dra.is_none()) {
        return Vec::new();
    }
    let mut positions = std::collections::HashMap::new();
    for (n, (c, host)) in candidates.iter().zip(host_nodes).enumerate() {
        for (g, uuid) in host.uuids.iter().enumerate() {
            positions.insert(
                (c.name, uuid.as_str()),
                wasmgpu_contract::types::GpuRef {
                    node: n as u32,
                    gpu: g as u32,
                },
            );
        }
    }
    let view = NodesView {
        nodes: candidates.iter().map(|c| (c.name, c.facts)).collect(),
        positions,
    };
    let mut sets = CandidateSets::default();
    for w in waiting.iter_mut() {
        let Some(ask) = &w.dra else {
            continue;
        };
        let mut eligible = eligible_sets
            .get(w.request.eligible_set as usize)
            .cloned()
            .unwrap_or_default();
        w.request.ask = Ask::Claims(claims_record(ask, &view, &mut eligible, &mut sets));
        w.request.eligible_set = *set_to_position.entry(eligible).or_insert_with_key(|set| {
            eligible_sets.push(set.clone());
            eligible_sets.len() as u32 - 1
        });
    }
    sets.sets
}

/// Names sent once per snapshot: GPU models and MIG profiles.
#[derive(Default)]
struct Tables {
    models: Vec<String>,
    mig_profiles: Vec<String>,
}

impl Tables {
    fn model(&mut self, name: &str) -> u32 {
        intern(&mut self.models, name)
    }

    fn mig_profile(&mut self, name: &str) -> u32 {
        intern(&mut self.mig_profiles, name)
    }
}

/// Whether a device of `model` with `memory_mib` could ever serve the
/// request (when nothing else held it): a whole GPU, or a MIG instance
/// (whose own memory `memoryMiB` is compared with), as the validator holds.
fn could_hold(spec: &GPUResourceSpec, model: &str, memory_mib: u64) -> bool {
    spec.model.as_deref().is_none_or(|m| glob_match(m, model)) && memory_mib >= spec.memory_mib
}

/// A candidate node as the policy sees it, and what the host keeps of it:
/// its layout (laid out when its inventory changed, see `layout`) with
/// the snapshot's table positions for models and MIG profiles, and what
/// holders keep on each GPU.
fn node_record(
    candidate: &Candidate<'_>,
    holdings: &Holdings,
    tables: &mut Tables,
) -> (Node, HostNode) {
    let on_node = holdings.on_node(candidate.name);
    let inventory = candidate.inventory;
    let layout = &inventory.layout;
    let models: Vec<u32> = layout.models.iter().map(|m| tables.model(m)).collect();
    let profiles: Vec<u32> = layout
        .mig_profiles
        .iter()
        .map(|p| tables.mig_profile(p))
        .collect();
    let use_of = |uuid: &str| {
        let held = on_node.gpu(uuid).unwrap_or_default();
        (held.exclusive, held.shared_mib, held.shared_owners)
    };
    let mut gpus = layout.gpus.clone();
    for ((gpu, uuid), &unpublished) in gpus.iter_mut().zip(&*layout.uuids).zip(&layout.unpublished)
    {
        gpu.model = models[gpu.model as usize];
        let (held, shared_mib, shared_owners) = use_of(uuid);
        match &mut gpu.mig {
            None => {
                // A static-MIG parent a DRA driver does not publish whole
                // is never given whole.
                gpu.held = held || unpublished;
                gpu.allocated_mib = if gpu.held {
                    gpu.memory_mib
                } else {
                    shared_mib.min(gpu.memory_mib)
                };
                gpu.shared_owners = shared_owners;
            }
            Some(mig) => {
                mig.profile = profiles[mig.profile as usize];
                gpu.held = held;
                gpu.allocated_mib = if held { gpu.memory_mib } else { 0 };
            }
        }
    }
    // Devices overlapping those in use through shared counters are held.
    let (counters, blocked) = inventory.counters.for_snapshot(&layout.uuids, |uuid| {
        let (exclusive, _, shared_owners) = use_of(uuid);
        exclusive || shared_owners > 0
    });
    for (gpu, _) in gpus.iter_mut().zip(&blocked).filter(|(_, b)| **b) {
        gpu.held = true;
        gpu.allocated_mib = gpu.memory_mib;
    }
    (
        Node {
            name: candidate.name.to_string(),
            labels: Vec::new(),
            gpus,
        },
        HostNode {
            labels: Arc::clone(&candidate.facts.labels),
            uuids: Arc::clone(&layout.uuids),
            counters,
        },
    )
}

/// What is left at `now_ms` of the minimum runtime of a pod bound at
/// `started_ms` (0: start unknown, not protected).
fn protected_ms(started_ms: u64, min_runtime_ms: u64, now_ms: u64) -> u64 {
    if started_ms == 0 || min_runtime_ms == 0 {
        return 0;
    }
    started_ms
        .saturating_add(min_runtime_ms)
        .saturating_sub(now_ms)
}
