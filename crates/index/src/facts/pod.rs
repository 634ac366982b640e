//! What the index keeps of a `Pod` that asks wasmgpu for GPUs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, Pod, Toleration};

use crate::facts::containers::{ContainerRequests, containers_of};

use wasmgpu_api::{
    self as api, GPURESOURCE_ANNOTATION, Nomination, POD_GROUP_LABEL, PodAllocation,
    SCHEDULER_NAME, UnreadableAllocation, UnreadableGpuLimit, UnreadableNomination,
};

/// The facts about a pod that decide whether it waits, holds GPUs, and where
/// it may run.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PodFacts {
    pub uid: String,
    /// The `wasmgpu.io/gpuresource` annotation (a GPUResource in the pod's
    /// namespace), if any.
    pub resource: Option<String>,
    /// `spec.nodeName`: set once the pod is bound.
    pub node_name: Option<String>,
    /// The pod's phase is `Succeeded` or `Failed`: it will never run again.
    pub terminal: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The allocation recorded on the pod (`wasmgpu.io/allocation`), read
    /// or not; it holds GPUs while the pod is bound and not finished.
    pub allocation: Option<Result<PodAllocation, UnreadableAllocation>>,
    /// GPUs nominated for the pod by a preemption (`wasmgpu.io/nomination`),
    /// read or not; they are its while it waits for its victims to go.
    pub nomination: Option<Result<Nomination, UnreadableNomination>>,
    pub created_ms: u64,
    /// When it started running (`status.startTime`), else when it was
    /// created; milliseconds since the Unix epoch.
    pub started_ms: u64,
    pub priority: i32,
    /// `spec.preemptionPolicy` is `Never`.
    pub never_preempts: bool,
    /// The pod's labels (what PodDisruptionBudgets select by).
    pub labels: BTreeMap<String, String>,
    pub node_selector: BTreeMap<String, String>,
    /// The terms of the required node affinity (ORed); `None`: no required
    /// node affinity.
    pub required_terms: Option<Vec<NodeSelectorTerm>>,
    pub tolerations: Vec<Toleration>,
    /// `nodeSelector`, required terms and tolerations in one string: pods
    /// with the same key may run on the same nodes.
    pub constraints_key: String,
    /// The gang (a PodGroup in the pod's namespace) the pod joins through
    /// the `scheduling.x-k8s.io/pod-group` label.
    pub pod_group: Option<String>,
    /// The GPUs the containers' `wasmgpu.io/gpu` limits ask for, by the
    /// Kubernetes rule for extended resources ([`api::pod_gpus`]: init
    /// containers give theirs back); `None` when no container names it.
    pub gpu_limit: Result<Option<u64>, UnreadableGpuLimit>,
    /// The pod's DRA claims (`spec.resourceClaims`), in order.
    pub claims: Vec<PodClaim>,
    /// The `wasmgpu.io/policy` annotation: the policy for a DRA pod (a
    /// GPUResource pod uses its GPUResource's).
    pub policy: Option<String>,
    /// Its containers' requests when one asks for an extended resource
    /// (which a DeviceClass may map: [`crate::extended`]); else empty.
    pub containers: Vec<ContainerRequests>,
    /// The claim made for its extended resources, as
    /// `status.extendedResourceClaimStatus` names it.
    pub extended_claim: Option<String>,
}

/// One entry of a pod's `spec.resourceClaims`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodClaim {
    /// The entry's name (what containers reference).
    pub name: String,
    /// The claim it names, or the template its claim is made from.
    pub source: ClaimSource,
}

/// Where a pod's claim comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ClaimSource {
    /// `resourceClaimName`: a claim of that name in the pod's namespace.
    Claim(String),
    /// `resourceClaimTemplateName`: the claim made for the pod from it,
    /// as `pod.status.resourceClaimStatuses` names it (`Some(None)`: no
    /// claim is needed; `None`: not made yet).
    Template {
        template: String,
        made: Option<Option<String>>,
    },
}

impl PodFacts {
    /// The facts of a pod placed by wasmgpu; `None` for pods of other
    /// schedulers.
    pub fn from_pod(pod: &Pod) -> Option<Self> {
        let spec = pod.spec.as_ref()?;
        if spec.scheduler_name.as_deref() != Some(SCHEDULER_NAME) {
            return None;
        }
        let meta = &pod.metadata;
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let created_ms = meta
            .creation_timestamp
            .as_ref()
            .map(|t| u64::try_from(t.0.as_millisecond()).unwrap_or(0))
            .unwrap_or(0);
        let required_terms = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|selector| selector.node_selector_terms.clone());
        let node_selector = spec.node_selector.clone().unwrap_or_default();
        let tolerations = spec.tolerations.clone().unwrap_or_default();
        let constraints_key =
            serde_json::to_string(&(&node_selector, &required_terms, &tolerations))
                .unwrap_or_default();
        Some(Self {
            uid: meta.uid.clone().unwrap_or_default(),
            resource: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(GPURESOURCE_ANNOTATION))
                .map(|r| r.trim().to_string()),
            node_name: spec.node_name.clone().filter(|n| !n.is_empty()),
            terminal: matches!(phase, Some("Succeeded" | "Failed")),
            deleting: meta.deletion_timestamp.is_some(),
            allocation: PodAllocation::from_annotations(meta.annotations.as_ref()),
            nomination: Nomination::from_annotations(meta.annotations.as_ref()),
            created_ms,
            started_ms: pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map_or(created_ms, |t| {
                    u64::try_from(t.0.as_millisecond()).unwrap_or(0)
                }),
            priority: spec.priority.unwrap_or(0),
            never_preempts: spec.preemption_policy.as_deref() == Some("Never"),
            labels: meta.labels.clone().unwrap_or_default(),
            node_selector,
            required_terms,
            tolerations,
            constraints_key,
            gpu_limit: api::container_gpus(spec).map(|c| api::pod_gpus(&c)),
            pod_group: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(POD_GROUP_LABEL))
                .map(|g| g.trim().to_string())
                .filter(|g| !g.is_empty()),
            claims: pod_claims(pod),
            containers: containers_of(spec),
            extended_claim: extended_claim_of(pod),
            policy: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(api::POLICY_ANNOTATION))
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty()),
        })
    }

    /// The pod still needs a node: not bound, not finished, not going away.
    pub fn unplaced(&self) -> bool {
        self.node_name.is_none() && !self.terminal && !self.deleting
    }

    /// The names of the claims the pod uses (in its namespace): those it
    /// names, and those made for it from templates.
    pub fn claim_names(&self) -> impl Iterator<Item = &str> {
        self.claims.iter().filter_map(|c| match &c.source {
            ClaimSource::Claim(name)
            | ClaimSource::Template {
                made: Some(Some(name)),
                ..
            } => Some(name.as_str()),
            ClaimSource::Template { .. } => None,
        })
    }

    /// The nomination the pod waits on: readable and made for this pod
    /// (not an earlier one of its name), while it is unplaced.
    pub fn nomination(&self) -> Option<&Nomination> {
        match &self.nomination {
            Some(Ok(n)) if n.uid == self.uid && self.unplaced() => Some(n),
            _ => None,
        }
    }
}

/// The claim `status.extendedResourceClaimStatus` names.
fn extended_claim_of(pod: &Pod) -> Option<String> {
    let status = pod
        .status
        .as_ref()?
        .extended_resource_claim_status
        .as_ref()?;
    Some(status.resource_claim_name.clone()).filter(|n| !n.is_empty())
}

/// A pod's `spec.resourceClaims`, each with its source, and the claim made
/// for its extended resources.
fn pod_claims(pod: &Pod) -> Vec<PodClaim> {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    let made = |name: &str| {
        statuses
            .into_iter()
            .flatten()
            .find(|s| s.name == name)
            .map(|s| s.resource_claim_name.clone())
    };
    pod.spec
        .iter()
        .flat_map(|s| s.resource_claims.iter().flatten())
        .map(|c| PodClaim {
            name: c.name.clone(),
            source: match (&c.resource_claim_name, &c.resource_claim_template_name) {
                (Some(claim), _) => ClaimSource::Claim(claim.clone()),
                (None, Some(template)) => ClaimSource::Template {
                    template: template.clone(),
                    made: made(&c.name),
                },
                (None, None) => ClaimSource::Template {
                    template: String::new(),
                    made: Some(None),
                },
            },
        })
        .chain(extended_claim_of(pod).map(|name| PodClaim {
            name: name.clone(),
            source: ClaimSource::Claim(name),
        }))
        .collect()
}
