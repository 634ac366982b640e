//! A DRA pod's claims read as its ask: for each claim not allocated yet,
//! each request's alternatives with the devices eligible for them, and the
//! claim's constraints; for claims allocated already, the nodes the pod
//! must go to.
//!
//! ```text
//!  pod.spec.resourceClaims ─▶ claim (by name, or made from a template:
//!        │                     pod.status.resourceClaimStatuses)
//!        ├─ allocated ─▶ pinned: the pod goes where allocation.nodeSelector says
//!        └─ pending ──▶ per request: exactly | firstAvailable[]
//!                        candidates = devices of usable pools that match the
//!                        DeviceClass's and the request's CEL selectors and
//!                        whose NoSchedule/NoExecute taints are tolerated
//! ```
//!
//! Anything the host cannot read or evaluate (a missing claim or class, a
//! selector that does not compile or fails on a device, a field wasmgpu
//! does not support) is a [`Problem::UnusableClaim`]: the pod waits with
//! the claim, the field and the error named, and nothing is guessed.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{
    DeviceAttribute, DeviceConstraint, DeviceRequest, DeviceSelector, DeviceTaint,
    DeviceToleration, ResourceClaim,
};

use super::dra::{ClaimFacts, DraGpu, Evaluator};
use crate::facts::pod::{ClaimSource, PodFacts};
use crate::index::Index;
use crate::key::ObjectKey;
use crate::problem::Problem;

/// The most pods a claim may be reserved for (`status.reservedFor`).
const MAX_RESERVED: usize = 256;

/// What a DRA pod asks for, before node positions are known.
#[derive(Clone, Debug, Default)]
pub(crate) struct DraAsk {
    /// Its claims not allocated yet.
    pub claims: Vec<PendingClaim>,
    /// Node selectors of its claims allocated already: the pod goes where
    /// all of them match (`None` inside: any node).
    pub pinned: Vec<Option<NodeSelector>>,
}

/// A claim to allocate.
#[derive(Clone, Debug)]
pub(crate) struct PendingClaim {
    pub key: ObjectKey,
    pub requests: Vec<PendingRequest>,
    pub constraints: Vec<PendingConstraint>,
}

/// One request of a claim.
#[derive(Clone, Debug)]
pub(crate) struct PendingRequest {
    pub name: String,
    pub alternatives: Vec<PendingAlternative>,
}

/// `exactly`, or one entry of `firstAvailable`.
#[derive(Clone, Debug)]
pub(crate) struct PendingAlternative {
    pub subrequest: Option<String>,
    pub count: Count,
    /// The devices it may take: one list for every request of the survey
    /// that selects alike (a thousand claims of one class share it).
    pub candidates: Arc<Candidates>,
}

/// The devices a request may take, and the taints that kept others away.
#[derive(Clone, Debug, Default)]
pub(crate) struct Candidates {
    /// Eligible devices as (node, UUID), sorted.
    pub devices: Vec<(String, String)>,
    /// How many of them each node has.
    pub per_node: Vec<(String, u32)>,
    /// Taints (`key=value:effect`) that keep devices its selectors select
    /// from it, for the reason when it cannot be met.
    pub untolerated: BTreeSet<String>,
}

/// How many devices an alternative wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Count {
    Exactly(u32),
    /// `allocationMode: All`: every eligible device of the node.
    All,
}

impl Count {
    /// The fewest eligible devices on one node that can satisfy it.
    fn least(self) -> u32 {
        match self {
            Self::Exactly(n) => n,
            Self::All => 1,
        }
    }
}

/// A `matchAttribute` / `distinctAttribute` constraint.
#[derive(Clone, Debug)]
pub(crate) struct PendingConstraint {
    /// Positions of the requests it binds.
    pub requests: Vec<u32>,
    pub distinct: bool,
    pub attribute: String,
    /// The attribute's value of each candidate that has it, as text.
    pub values: Vec<((String, String), String)>,
}

/// Candidate devices already worked out this survey, by what decides them.
#[derive(Default)]
pub(crate) struct CandidateCache {
    evaluator: Option<Evaluator>,
    found: HashMap<String, Result<Arc<Candidates>, String>>,
    /// The most devices of a candidate list (by its address: the lists
    /// live in `found` as long as this cache) on one node that pods of the
    /// same scheduling constraints (`PodFacts::constraints_key`) may run on.
    most_on_one_node: HashMap<*const Candidates, HashMap<String, u32>>,
}

// === impl Index ===

impl Index {
    /// The ask of a pod with `spec.resourceClaims`, or why it must wait.
    // A Problem is what the survey collects anyway; boxing it only to
    // move it into that list buys nothing.
    #[allow(clippy::result_large_err)]
    pub(crate) fn dra_ask(
        &self,
        key: &ObjectKey,
        pod: &PodFacts,
        cache: &mut CandidateCache,
    ) -> Result<DraAsk, Problem> {
        let mut ask = DraAsk::default();
        for pod_claim in &pod.claims {
            let unusable = |claim: &str, reason: String| Problem::UnusableClaim {
                pod: key.clone(),
                claim: claim.to_string(),
                reason,
            };
            let name = match &pod_claim.source {
                ClaimSource::Claim(name) => name.clone(),
                ClaimSource::Template {
                    made: Some(None), ..
                } => continue,
                ClaimSource::Template {
                    made: Some(Some(name)),
                    ..
                } => name.clone(),
                ClaimSource::Template {
                    template,
                    made: None,
                } => {
                    return Err(unusable(
                        &format!("{}/{}", key.namespace, pod_claim.name),
                        format!(
                            "its ResourceClaim from ResourceClaimTemplate {template} is not made yet (kube-controller-manager's resourceclaim controller makes it and records it in pod.status.resourceClaimStatuses)"
                        ),
                    ));
                }
            };
            let claim_key = ObjectKey::new(&key.namespace, &name);
            let shown = claim_key.to_string();
            let Some(facts) = self.dra.claim(&claim_key) else {
                return Err(unusable(
                    &shown,
                    format!(
                        "ResourceClaim {shown} (spec.resourceClaims[{:?}]) does not exist",
                        pod_claim.name
                    ),
                ));
            };
            if facts.deleting() {
                return Err(unusable(
                    &shown,
                    "the ResourceClaim is being deleted".into(),
                ));
            }
            if matches!(pod_claim.source, ClaimSource::Template { .. })
                && !owned_by(facts, &pod.uid)
            {
                return Err(unusable(
                    &shown,
                    "the ResourceClaim recorded for the pod's template is not owned by this pod"
                        .into(),
                ));
            }
            if facts.allocated() {
                let reserved: Vec<&str> = facts.reserved_for().collect();
                if !reserved.contains(&pod.uid.as_str()) && reserved.len() >= MAX_RESERVED {
                    return Err(unusable(
                        &shown,
                        format!(
                            "the ResourceClaim is reserved for {MAX_RESERVED} pods already (status.reservedFor is full)"
                        ),
                    ));
                }
                ask.pinned.push(facts.node_selector().cloned());
                continue;
            }
            let claim = self
                .pending_claim(claim_key, &facts.claim, cache)
                .map_err(|reason| unusable(&shown, reason))?;
            ask.claims.push(claim);
        }
        Ok(ask)
    }

    /// Why a pod's claims could never be allocated, whatever is allocated
    /// now: a request none of whose alternatives has its count of eligible
    /// devices on one node the pod may run on. The claim (`namespace/name`)
    /// and the reason; `None` when some node could hold each request.
    pub(crate) fn claims_never_fit<'a>(
        &self,
        pod: &PodFacts,
        ask: &'a DraAsk,
        cache: &mut CandidateCache,
    ) -> Option<(String, String)> {
        let mut node_allows: HashMap<&str, bool> = HashMap::new();
        let mut allows = |node: &'a str| {
            *node_allows.entry(node).or_insert_with(|| {
                self.name_to_node
                    .get(node)
                    .is_some_and(|facts| super::eligibility::check(pod, node, facts).is_ok())
            })
        };
        let mut most_on_one_node = |candidates: &'a Arc<Candidates>| {
            let by_constraints = cache
                .most_on_one_node
                .entry(Arc::as_ptr(candidates))
                .or_default();
            if let Some(&most) = by_constraints.get(pod.constraints_key.as_str()) {
                return most;
            }
            let most = candidates
                .per_node
                .iter()
                .filter(|(node, _)| allows(node))
                .map(|(_, n)| *n)
                .max()
                .unwrap_or(0);
            by_constraints.insert(pod.constraints_key.clone(), most);
            most
        };
        for claim in &ask.claims {
            for request in &claim.requests {
                let mut most = 0;
                let fits = request.alternatives.iter().any(|alternative| {
                    let on_one = most_on_one_node(&alternative.candidates);
                    most = most.max(on_one);
                    on_one >= alternative.count.least()
                });
                if !fits {
                    let taints: BTreeSet<&str> = request
                        .alternatives
                        .iter()
                        .flat_map(|a| &a.candidates.untolerated)
                        .map(String::as_str)
                        .collect();
                    let reason = if most == 0 && !taints.is_empty() {
                        format!(
                            "request {:?} matches no device on a node the pod may run on: the devices it selects carry taints it does not tolerate ({}); add a toleration to the request, or remove the taint (kubectl get devicetaintrules)",
                            request.name,
                            taints.into_iter().collect::<Vec<_>>().join(", ")
                        )
                    } else if most == 0 {
                        format!(
                            "request {:?} matches no device on a node the pod may run on",
                            request.name
                        )
                    } else {
                        format!(
                            "request {:?} wants more devices on one node than the {most} that match on any node the pod may run on",
                            request.name
                        )
                    };
                    return Some((claim.key.to_string(), reason));
                }
            }
        }
        None
    }

    /// A claim to allocate: its requests with their candidates, and its
    /// constraints; or why it cannot be read.
    fn pending_claim(
        &self,
        key: ObjectKey,
        claim: &ResourceClaim,
        cache: &mut CandidateCache,
    ) -> Result<PendingClaim, String> {
        let devices = claim.spec.as_ref().and_then(|s| s.devices.as_ref());
        let requests: Vec<&DeviceRequest> = devices
            .and_then(|d| d.requests.as_ref())
            .into_iter()
            .flatten()
            .collect();
        if requests.is_empty() {
            return Err("spec.devices.requests is empty".into());
        }
        let mut pending = Vec::with_capacity(requests.len());
        for (r, request) in requests.iter().enumerate() {
            pending.push(self.pending_request(r, request, cache)?);
        }
        let constraints = devices
            .and_then(|d| d.constraints.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(c, constraint)| self.pending_constraint(c, constraint, &pending))
            .collect::<Result<_, _>>()?;
        Ok(PendingClaim {
            key,
            requests: pending,
            constraints,
        })
    }

    fn pending_request(
        &self,
        r: usize,
        request: &DeviceRequest,
        cache: &mut CandidateCache,
    ) -> Result<PendingRequest, String> {
        let at = format!("spec.devices.requests[{r}] ({:?})", request.name);
        let mut alternatives = Vec::new();
        match (&request.exactly, &request.first_available) {
            (Some(exactly), None) => {
                if exactly.admin_access == Some(true) {
                    return Err(format!(
                        "{at}.exactly.adminAccess is not supported by wasmgpu; let kube-scheduler allocate admin-access claims"
                    ));
                }
                if exactly.capacity.is_some() {
                    return Err(format!(
                        "{at}.exactly.capacity (consumable capacity) is not supported by wasmgpu"
                    ));
                }
                alternatives.push(self.alternative(
                    &at,
                    None,
                    count_of(&at, exactly.allocation_mode.as_deref(), exactly.count)?,
                    &exactly.device_class_name,
                    exactly.selectors.as_deref().unwrap_or_default(),
                    exactly.tolerations.as_deref().unwrap_or_default(),
                    cache,
                )?);
            }
            (None, Some(subrequests)) if !subrequests.is_empty() => {
                for (s, sub) in subrequests.iter().enumerate() {
                    let at = format!("{at}.firstAvailable[{s}] ({:?})", sub.name);
                    if sub.capacity.is_some() {
                        return Err(format!(
                            "{at}.capacity (consumable capacity) is not supported by wasmgpu"
                        ));
                    }
                    alternatives.push(self.alternative(
                        &at,
                        Some(sub.name.clone()),
                        count_of(&at, sub.allocation_mode.as_deref(), sub.count)?,
                        &sub.device_class_name,
                        sub.selectors.as_deref().unwrap_or_default(),
                        sub.tolerations.as_deref().unwrap_or_default(),
                        cache,
                    )?);
                }
            }
            _ => {
                return Err(format!(
                    "{at} needs exactly one of exactly and firstAvailable"
                ));
            }
        }
        Ok(PendingRequest {
            name: request.name.clone(),
            alternatives,
        })
    }

    /// One way to serve a request (`exactly`, or an entry of
    /// `firstAvailable`): how many devices, and which may serve it.
    #[allow(clippy::too_many_arguments)]
    fn alternative(
        &self,
        at: &str,
        subrequest: Option<String>,
        count: Count,
        class_name: &str,
        selectors: &[DeviceSelector],
        tolerations: &[DeviceToleration],
        cache: &mut CandidateCache,
    ) -> Result<PendingAlternative, String> {
        let candidates = self.candidates(at, class_name, selectors, tolerations, cache)?;
        Ok(PendingAlternative {
            subrequest,
            count,
            candidates,
        })
    }

    /// The devices of usable pools that a DeviceClass and a request's
    /// selectors select and whose taints the request tolerates.
    fn candidates(
        &self,
        at: &str,
        class_name: &str,
        selectors: &[DeviceSelector],
        tolerations: &[DeviceToleration],
        cache: &mut CandidateCache,
    ) -> Result<Arc<Candidates>, String> {
        let cache_key =
            serde_json::to_string(&(class_name, selectors, tolerations)).unwrap_or_default();
        if let Some(found) = cache.found.get(&cache_key) {
            return found.clone();
        }
        let found = self
            .evaluate(at, class_name, selectors, tolerations, cache)
            .map(Arc::new);
        cache.found.insert(cache_key, found.clone());
        found
    }

    fn evaluate(
        &self,
        at: &str,
        class_name: &str,
        selectors: &[DeviceSelector],
        tolerations: &[DeviceToleration],
        cache: &mut CandidateCache,
    ) -> Result<Candidates, String> {
        let Some(class) = self.dra.class(class_name) else {
            return Err(format!(
                "{at} names DeviceClass {class_name:?}, which does not exist"
            ));
        };
        let mut compiled = Vec::new();
        for (i, selector) in class.selectors.iter().enumerate() {
            match selector {
                Ok(s) => compiled.push((
                    format!("DeviceClass {class_name} selectors[{i}]"),
                    s.clone(),
                )),
                Err((expression, error)) => {
                    return Err(format!(
                        "DeviceClass {class_name} selectors[{i}] {expression:?} does not compile: {error}"
                    ));
                }
            }
        }
        for (i, selector) in selectors.iter().enumerate() {
            let Some(cel) = &selector.cel else {
                return Err(format!("{at}.selectors[{i}] has no cel expression"));
            };
            let s = super::dra::compile(&cel.expression).map_err(|error| {
                format!(
                    "{at}.selectors[{i}] {:?} does not compile: {error}",
                    cel.expression
                )
            })?;
            compiled.push((format!("{at}.selectors[{i}]"), s));
        }
        let evaluator = cache.evaluator.get_or_insert_with(Evaluator::new);
        let mut found = Candidates::default();
        'devices: for (node, gpu) in self.dra.devices() {
            if has_binding_conditions(gpu) {
                continue;
            }
            for (what, selector) in &compiled {
                match evaluator.matches(selector, &gpu.selector_input) {
                    Ok(true) => {}
                    Ok(false) => continue 'devices,
                    Err(error) => {
                        return Err(format!(
                            "{what} {:?} cannot be evaluated on device {}: {error}",
                            selector.expression, gpu.id
                        ));
                    }
                }
            }
            let untolerated = untolerated(self.dra.taints_of(gpu), tolerations);
            if untolerated.is_empty() {
                found.devices.push((node.to_string(), gpu.uuid.clone()));
            } else {
                found.untolerated.extend(untolerated);
            }
        }
        found.devices.sort();
        for (node, _) in &found.devices {
            match found.per_node.last_mut() {
                Some((last, n)) if last == node => *n += 1,
                _ => found.per_node.push((node.clone(), 1)),
            }
        }
        Ok(found)
    }

    fn pending_constraint(
        &self,
        c: usize,
        constraint: &DeviceConstraint,
        requests: &[PendingRequest],
    ) -> Result<PendingConstraint, String> {
        let at = format!("spec.devices.constraints[{c}]");
        let (attribute, distinct) =
            match (&constraint.match_attribute, &constraint.distinct_attribute) {
                (Some(a), None) => (a.clone(), false),
                (None, Some(a)) => (a.clone(), true),
                _ => {
                    return Err(format!(
                        "{at} needs exactly one of matchAttribute and distinctAttribute"
                    ));
                }
            };
        let names = constraint.requests.as_deref().unwrap_or_default();
        let positions: Vec<u32> = if names.is_empty() {
            (0..requests.len() as u32).collect()
        } else {
            let mut positions = Vec::new();
            for name in names {
                let parent = name.split('/').next().unwrap_or(name);
                let Some(p) = requests.iter().position(|r| r.name == parent) else {
                    return Err(format!(
                        "{at}.requests names {name:?}, which is not a request of the claim"
                    ));
                };
                positions.push(p as u32);
            }
            positions.sort_unstable();
            positions.dedup();
            positions
        };
        let mut values = Vec::new();
        let by_uuid: HashMap<(&str, &str), &DraGpu> = self
            .dra
            .devices()
            .map(|(node, gpu)| ((node, gpu.uuid.as_str()), gpu))
            .collect();
        for &p in &positions {
            for alternative in &requests[p as usize].alternatives {
                for (node, uuid) in &alternative.candidates.devices {
                    let Some(gpu) = by_uuid.get(&(node.as_str(), uuid.as_str())) else {
                        continue;
                    };
                    if let Some(value) = attribute_text(gpu, &attribute) {
                        values.push(((node.clone(), uuid.clone()), value));
                    }
                }
            }
        }
        values.sort();
        values.dedup();
        Ok(PendingConstraint {
            requests: positions,
            distinct,
            attribute,
            values,
        })
    }
}

/// `allocationMode` and `count` as a [`Count`].
fn count_of(at: &str, mode: Option<&str>, count: Option<i64>) -> Result<Count, String> {
    match mode.unwrap_or("ExactCount") {
        "ExactCount" => {
            let count = count.unwrap_or(1);
            u32::try_from(count)
                .ok()
                .filter(|c| (1..=128).contains(c))
                .map(Count::Exactly)
                .ok_or_else(|| format!("{at}.count is {count}; it must be 1 to 128"))
        }
        "All" => Ok(Count::All),
        other => Err(format!(
            "{at}.allocationMode is {other:?}; it must be ExactCount or All"
        )),
    }
}

/// Whether the claim `facts` was made for the pod with `uid` (its
/// controller owner).
fn owned_by(facts: &ClaimFacts, uid: &str) -> bool {
    facts
        .claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.kind == "Pod")
}

/// The value of a fully qualified attribute (`domain/name`; a name without
/// a domain is the driver's) as comparable text.
fn attribute_text(gpu: &DraGpu, attribute: &str) -> Option<String> {
    let (domain, name) = attribute
        .rsplit_once('/')
        .unwrap_or((&gpu.id.driver, attribute));
    let attributes = gpu.published.attributes.as_ref()?;
    let value: &DeviceAttribute = attributes.get(&format!("{domain}/{name}")).or_else(|| {
        (domain == gpu.id.driver)
            .then(|| attributes.get(name))
            .flatten()
    })?;
    if let Some(i) = value.int {
        Some(format!("int:{i}"))
    } else if let Some(b) = value.bool {
        Some(format!("bool:{b}"))
    } else if let Some(s) = &value.string {
        Some(format!("string:{s}"))
    } else {
        value.version.as_ref().map(|v| format!("version:{v}"))
    }
}

/// Whether the device must wait for binding conditions before its pod is
/// bound (`bindingConditions`): wasmgpu does not wait for them, so it
/// leaves such devices to kube-scheduler.
fn has_binding_conditions(gpu: &DraGpu) -> bool {
    gpu.published
        .binding_conditions
        .as_ref()
        .is_some_and(|c| !c.is_empty())
}

/// The `NoSchedule`/`NoExecute` taints of a device (its slice's and its
/// DeviceTaintRules') that no toleration tolerates, as `key=value:effect`;
/// other effects (`None`, and unknown ones, as the API says) do not keep a
/// device from a claim.
fn untolerated<'a>(
    taints: impl Iterator<Item = &'a DeviceTaint>,
    tolerations: &[DeviceToleration],
) -> Vec<String> {
    taints
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .filter(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
        .map(|t| match &t.value {
            Some(value) => format!("{}={value}:{}", t.key, t.effect),
            None => format!("{}:{}", t.key, t.effect),
        })
        .collect()
}

/// A device toleration against a device taint, by the rules of pod
/// tolerations (`Exists` / `Equal`, empty key and effect match all).
fn tolerates(toleration: &DeviceToleration, taint: &DeviceTaint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    if key.is_empty() {
        return operator == "Exists";
    }
    if key != taint.key {
        return false;
    }
    match operator {
        "Exists" => true,
        "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}
