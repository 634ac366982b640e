//! The types of the `wasmgpu:policy` contract (`wit/policy.wit`), one Rust
//! definition for the host and every Rust guest. Snapshot files hold them
//! through [`crate::snapshot_file`] (with what stays on the host: labels and
//! UUIDs), so `Gpu`, `Node` and `Snapshot` have no serde form of their own.
//!
//! Guests lift and lower them through wit-bindgen (the SDK maps the WIT
//! `types` interface onto this module); the host passes them to components
//! as they are (feature `wasmtime`). Field and variant names are the ones
//! both generators derive from the WIT: a field added to the WIT and not
//! here fails the SDK's build, and wasmtime type-checks every component
//! name against the component's own types when the host loads a policy.

#[cfg(feature = "wasmtime")]
use wasmtime::component::{ComponentType, Lift, Lower};

/// Which inventory publishes a GPU. A GPUResource request takes only GPUs
/// the wasmgpu agent publishes (it hands them to the container); a DRA
/// claim takes only the candidates the host lists for it.
#[derive(
    Clone, Copy, Default, Hash, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(enum))]
#[repr(u8)]
pub enum Publisher {
    /// A `GPUNode` of the wasmgpu agent.
    #[cfg_attr(feature = "wasmtime", component(name = "agent"))]
    #[default]
    Agent,
    /// A `ResourceSlice` of a DRA driver (e.g. `gpu.nvidia.com`).
    #[cfg_attr(feature = "wasmtime", component(name = "dra-driver"))]
    DraDriver,
    /// Both, for the same UUID: one GPU, counted once.
    #[cfg_attr(feature = "wasmtime", component(name = "both"))]
    Both,
}

/// One allocatable GPU unit as the host sees it at the start of the round:
/// a whole GPU, or one MIG instance of a GPU (then `mig` is set). Its UUID
/// stays on the host ([`crate::HostSnapshot`]): decisions name it by position.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Gpu {
    /// Index of the GPU on its node (NVML / nvidia-smi order); for a MIG
    /// instance, the index of its parent GPU.
    pub index: u32,
    /// The product, as an index into `snapshot.models` (e.g.
    /// `NVIDIA H100 80GB HBM3`); a MIG instance has its parent's model.
    pub model: u32,
    /// Total memory in MiB (of the instance, for a MIG instance).
    #[cfg_attr(feature = "wasmtime", component(name = "memory-mib"))]
    pub memory_mib: u64,
    /// Memory already promised to shared allocations, in MiB. For a unit
    /// held exclusively this is the whole `memory-mib`.
    #[cfg_attr(feature = "wasmtime", component(name = "allocated-mib"))]
    pub allocated_mib: u64,
    /// True when a pod holds this unit exclusively (or it is nominated for
    /// a preemptor).
    pub held: bool,
    /// How many pods hold a share of this GPU (`sharing: shared`).
    #[cfg_attr(feature = "wasmtime", component(name = "shared-owners"))]
    pub shared_owners: u32,
    /// NUMA node the GPU is attached to, when the platform reports one.
    #[cfg_attr(feature = "wasmtime", component(name = "numa-node"))]
    pub numa_node: Option<u32>,
    /// The whole GPUs on the same node this one has an active NVLink to:
    /// bit i is set for the GPU whose `index` is i (indices below 64).
    pub nvlink: u64,
    /// False when the node agent saw a critical error (XID, ECC) or the GPU
    /// is otherwise unusable; the host never accepts an unhealthy GPU.
    pub healthy: bool,
    /// Set for a MIG instance: its parent and profile. A whole GPU and its
    /// MIG instances exclude each other: the host refuses a whole GPU while
    /// any of its instances is held, and an instance while its parent is.
    pub mig: Option<MigInstance>,
    /// Which inventory publishes it.
    #[cfg_attr(feature = "wasmtime", component(name = "published-by"))]
    pub published_by: Publisher,
}

/// Where a MIG instance sits.
#[derive(Clone, Debug, PartialEq, Eq, Copy, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct MigInstance {
    /// Position of the parent GPU in the node's `gpus` list.
    pub parent: u32,
    /// The profile, as an index into `snapshot.mig-profiles` (e.g. `1g.10gb`).
    pub profile: u32,
}

/// A node with GPUs. Only Ready, schedulable nodes with a published GPU
/// inventory appear in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Node {
    /// Kubernetes node name.
    pub name: String,
    /// The node's value for each of `snapshot.label-keys`, by position;
    /// none where the node lacks the label.
    pub labels: Vec<Option<String>>,
    /// The node's whole GPUs sorted by `index`, each followed by its MIG
    /// instances (if any). Decisions name GPUs by position in this list.
    pub gpus: Vec<Gpu>,
}

/// How a request uses the GPUs it gets.
#[derive(Clone, Copy, Hash, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(enum))]
#[repr(u8)]
pub enum Sharing {
    /// Each GPU is held by this pod alone; `memory-mib` is the minimum
    /// total memory a GPU must have.
    #[cfg_attr(feature = "wasmtime", component(name = "exclusive"))]
    Exclusive,
    /// Each GPU may be shared with other pods; `memory-mib` is the share
    /// taken on each GPU and must fit in its free memory.
    #[cfg_attr(feature = "wasmtime", component(name = "shared"))]
    Shared,
}

/// What a pod's GPUResource asks for.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct GpuShape {
    /// GPUs (or MIG instances) wanted, 1 to 16, all on one node.
    pub count: u32,
    /// Glob on the GPU model (`*` and `?`, case-sensitive); none: any model.
    pub model: Option<String>,
    /// Set: the request wants `count` MIG instances of exactly this profile
    /// (e.g. `1g.10gb`), always exclusive. None: whole GPUs (or shares).
    #[cfg_attr(feature = "wasmtime", component(name = "mig-profile"))]
    pub mig_profile: Option<String>,
    /// Exclusive: minimum memory per GPU. Shared: the share taken per GPU. MiB.
    #[cfg_attr(feature = "wasmtime", component(name = "memory-mib"))]
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// Exclusive or shared use of each GPU.
    pub sharing: Sharing,
}

/// A GPU on a node, by position: `node` in `snapshot.nodes`, `gpu` in that
/// node's `gpus`.
#[derive(
    Clone, Debug, PartialEq, Eq, Copy, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct GpuRef {
    /// The node.
    pub node: u32,
    /// The GPU.
    pub gpu: u32,
}

/// One way to satisfy a claim's request: its `exactly`, or one entry of its
/// `firstAvailable` list (tried in order).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Alternative {
    /// The `firstAvailable` entry's name; none for `exactly`.
    pub subrequest: Option<String>,
    /// Devices wanted (`allocationMode: All` is resolved by the host to the
    /// count it means).
    pub count: u32,
    /// The GPUs the host found eligible, as an index into
    /// `snapshot.candidate-sets`: DeviceClass and request selectors (CEL),
    /// device taints against the request's tolerations, and pool rules are
    /// already applied.
    pub candidates: u32,
}

/// One request of a claim (`spec.devices.requests[]`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct ClaimRequest {
    /// The request's name.
    pub name: String,
    /// Its alternatives in order; one for `exactly`.
    pub alternatives: Vec<Alternative>,
}

/// The attribute value of one candidate GPU, for a claim constraint.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct AttributeValue {
    /// The GPU.
    pub device: GpuRef,
    /// The value, as a number: equal numbers are equal values.
    pub value: u32,
}

/// A `matchAttribute` or `distinctAttribute` constraint of a claim.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Constraint {
    /// The claim's requests it binds, as positions in `claim.requests`.
    pub requests: Vec<u32>,
    /// False: every chosen device has the same value (`matchAttribute`);
    /// true: every chosen device has a different one (`distinctAttribute`).
    pub distinct: bool,
    /// The attribute's qualified name, for logs.
    pub attribute: String,
    /// The values of the candidates that have the attribute; a candidate
    /// without it cannot be chosen for a request the constraint binds.
    pub values: Vec<AttributeValue>,
}

/// A ResourceClaim a pending pod needs and that is not allocated yet.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Claim {
    /// The claim, as `namespace/name`.
    pub name: String,
    /// Its requests, in the claim's order.
    pub requests: Vec<ClaimRequest>,
    /// Its constraints.
    pub constraints: Vec<Constraint>,
}

impl Claim {
    /// Devices the claim asks for: the sum over its requests of their first
    /// alternative's count (what a pod's ask is worded and tenant limits
    /// are counted by).
    pub fn devices_asked(&self) -> u32 {
        self.requests
            .iter()
            .map(|r| r.alternatives.first().map_or(0, |a| a.count))
            .fold(0, u32::saturating_add)
    }
}

/// What a pending pod asks for.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(variant))]
pub enum Ask {
    /// GPUs through a GPUResource (`wasmgpu.io/gpuresource` annotation).
    #[cfg_attr(feature = "wasmtime", component(name = "gpus"))]
    Gpus(GpuShape),
    /// Devices through DRA ResourceClaims (`spec.resourceClaims`): every
    /// claim of the pod not yet allocated, all on one node.
    #[cfg_attr(feature = "wasmtime", component(name = "claims"))]
    Claims(Vec<Claim>),
}

/// Whether a pending pod may preempt others (`spec.preemptionPolicy`).
#[derive(
    Clone, Copy, Default, Hash, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "PascalCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(enum))]
#[repr(u8)]
pub enum PreemptionPolicy {
    /// It may preempt pods of lower priority (the Kubernetes default).
    #[cfg_attr(feature = "wasmtime", component(name = "preempt-lower-priority"))]
    #[default]
    PreemptLowerPriority,
    /// It never preempts anyone.
    #[cfg_attr(feature = "wasmtime", component(name = "never"))]
    Never,
}

/// One pending pod and what it asks for.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Request {
    /// The pod, as `namespace/name`; unique within a snapshot. Decisions
    /// name it by its position in `snapshot.pending`.
    pub pod: String,
    /// The pod's namespace, as an index into `snapshot.namespaces`.
    pub namespace: u32,
    /// The pod's tenant, as an index into `snapshot.tenants`.
    pub tenant: Option<u32>,
    /// The pod's priority (`spec.priority`); higher goes first.
    pub priority: i32,
    /// Whether it may preempt.
    #[serde(default)]
    pub preemption: PreemptionPolicy,
    /// When the pod was created, milliseconds since the Unix epoch. The
    /// policy has no clock: this is its notion of age.
    #[cfg_attr(feature = "wasmtime", component(name = "created-ms"))]
    pub created_ms: u64,
    /// Where the pod may run at all: an index into `snapshot.eligible-sets`
    /// (node readiness, node selector, required affinity and taints are
    /// already checked by the host). A decision naming a node outside that
    /// set is refused.
    #[cfg_attr(feature = "wasmtime", component(name = "eligible-set"))]
    pub eligible_set: u32,
    /// The gang the pod belongs to, as an index into `snapshot.gangs`.
    pub gang: Option<u32>,
    /// What it asks for.
    pub ask: Ask,
}

/// A pod that holds GPUs now, and what a policy needs to know to preempt it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Running {
    /// The pod, as `namespace/name`.
    pub pod: String,
    /// Its namespace, as an index into `snapshot.namespaces`.
    pub namespace: u32,
    /// Its tenant, as an index into `snapshot.tenants`.
    pub tenant: Option<u32>,
    /// Its priority.
    pub priority: i32,
    /// Its node, as a position in `snapshot.nodes`.
    pub node: u32,
    /// What it holds there, as positions in the node's `gpus`.
    pub gpus: Vec<u32>,
    /// For a shared allocation, the memory it takes on each GPU in MiB; 0
    /// when it holds its GPUs exclusively.
    #[cfg_attr(feature = "wasmtime", component(name = "shared-mib"))]
    #[serde(rename = "sharedMiB")]
    pub shared_mib: u64,
    /// When it was bound, milliseconds since the Unix epoch.
    #[cfg_attr(feature = "wasmtime", component(name = "started-ms"))]
    pub started_ms: u64,
    /// Its gang, as an index into `snapshot.gangs`: preempting one member
    /// means preempting all its running members.
    pub gang: Option<u32>,
    /// False when a PodDisruptionBudget forbids evicting it now.
    pub evictable: bool,
    /// Milliseconds left of its minimum runtime; it may be preempted only
    /// at 0.
    #[cfg_attr(feature = "wasmtime", component(name = "protected-ms"))]
    pub protected_ms: u64,
}

/// Pods that run all together or not at all (a `PodGroup`). The host
/// applies a round's assignments for a gang only when, with the members
/// already bound, they reach `min-member`; otherwise it applies none of
/// them and the members wait.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Gang {
    /// The group, as `namespace/name`.
    pub name: String,
    /// How many members must hold GPUs at once.
    #[cfg_attr(feature = "wasmtime", component(name = "min-member"))]
    pub min_member: u32,
    /// Members already bound (holding their GPUs).
    pub bound: u32,
    /// The members pending in this snapshot, as positions in `pending`.
    pub pending: Vec<u32>,
    /// The members running, as positions in `running`.
    pub running: Vec<u32>,
}

/// A tenant (a `GPUTenant` object): namespaces that share a quota.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Tenant {
    /// The tenant's name.
    pub name: String,
    /// Its share of what is beyond the quotas, relative to other tenants.
    pub weight: u32,
    /// GPUs it is guaranteed: while under it, it may reclaim GPUs from
    /// tenants over theirs.
    pub quota: u32,
    /// GPUs it may never exceed; the host refuses an assignment over it.
    pub limit: Option<u32>,
    /// GPUs its pods hold now (a MIG instance or a share counts as one).
    /// The host leaves out pods on their way out (deleting, or victims of
    /// a preemption).
    pub holding: u32,
    /// GPUs its pending pods ask for.
    pub waiting: u32,
}

/// Everything a policy may look at in one round.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Snapshot {
    /// Increases by one each round; lets a policy correlate its log lines.
    pub round: u64,
    /// GPU product names, each once; `gpu.model` indexes this list.
    pub models: Vec<String>,
    /// MIG profile names, each once; `mig-instance.profile` indexes it.
    #[cfg_attr(feature = "wasmtime", component(name = "mig-profiles"))]
    pub mig_profiles: Vec<String>,
    /// Namespaces of pending and running pods, each once, sorted.
    pub namespaces: Vec<String>,
    /// The label keys the policy asked for in `describe()`, in its order;
    /// `node.labels` holds one value per key.
    #[cfg_attr(feature = "wasmtime", component(name = "label-keys"))]
    pub label_keys: Vec<String>,
    /// Candidate nodes with their GPUs and current allocations.
    pub nodes: Vec<Node>,
    /// Pods waiting for GPUs, oldest first.
    pub pending: Vec<Request>,
    /// Pods holding GPUs on the nodes above, by node then pod.
    pub running: Vec<Running>,
    /// Sets of nodes that requests name through `eligible-set`, as bit
    /// sets: bit i of word i/64 is node i (see [`crate::bits`]). Pods with
    /// the same constraints share one set.
    #[cfg_attr(feature = "wasmtime", component(name = "eligible-sets"))]
    pub eligible_sets: Vec<Vec<u64>>,
    /// Candidate GPUs that DRA alternatives name through `candidates`,
    /// sorted by node then GPU.
    #[cfg_attr(feature = "wasmtime", component(name = "candidate-sets"))]
    pub candidate_sets: Vec<Vec<GpuRef>>,
    /// Gangs with at least one pending or running member, sorted by name.
    pub gangs: Vec<Gang>,
    /// Tenants, sorted by name.
    pub tenants: Vec<Tenant>,
    /// The policy's parameters: the `config.json` shipped with the policy,
    /// verbatim (empty when none). The policy defines its format.
    pub config: String,
}

/// What a DRA assignment gives one alternative of one claim request.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct ClaimChoice {
    /// The claim, as a position in the request's `claims`.
    pub claim: u32,
    /// The request, as a position in the claim's `requests`.
    pub request: u32,
    /// The alternative taken, as a position in the request's `alternatives`.
    pub alternative: u32,
    /// Exactly its `count` distinct candidates on the assignment's node,
    /// as positions in the node's `gpus` list.
    pub gpus: Vec<u32>,
}

/// Give GPUs on a node to a pending pod.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Assignment {
    /// The pod, as its position in `snapshot.pending`.
    pub pod: u32,
    /// The node, as its position in `snapshot.nodes`; must be in the
    /// request's eligible set.
    pub node: u32,
    /// For a GPUResource request: exactly `count` distinct GPUs (or MIG
    /// instances) of that node, as positions in its `gpus` list. Empty for
    /// a DRA request.
    pub gpus: Vec<u32>,
    /// For a DRA request: one choice per request of each claim. Empty for
    /// a GPUResource request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ClaimChoice>,
}

impl Assignment {
    /// The devices it gives: its `gpus`, or a DRA request's chosen ones.
    pub fn devices(&self) -> usize {
        self.gpus.len() + self.claims.iter().map(|c| c.gpus.len()).sum::<usize>()
    }
}

/// Evict running pods so that a pending pod can take their GPUs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Preemption {
    /// Where the preemptor goes once its victims are gone; its GPUs may be
    /// held now, but only by the victims.
    pub assignment: Assignment,
    /// The pods to evict, as positions in `snapshot.running`: exactly the
    /// holders of the GPUs the assignment names that must go, none needless.
    pub victims: Vec<u32>,
}

/// A pod the policy does not place this round, and why (shown to users).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Deferral {
    /// The pod, as its position in `snapshot.pending`.
    pub pod: u32,
    /// A short human-readable reason.
    pub reason: String,
}

/// What the policy decided for one pending pod. Pods the policy does not
/// mention wait for a later round.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(variant))]
pub enum Decision {
    /// Place the pod now.
    #[cfg_attr(feature = "wasmtime", component(name = "assign"))]
    Assign(Assignment),
    /// Leave the pod pending this round (e.g. no room yet).
    #[cfg_attr(feature = "wasmtime", component(name = "wait"))]
    Wait(Deferral),
    /// The request can never be satisfied as posed; the pod keeps waiting
    /// but the reason is reported as an error the user should act on.
    #[cfg_attr(feature = "wasmtime", component(name = "reject"))]
    Reject(Deferral),
    /// Evict lower-priority (or over-quota) pods and give their GPUs to the
    /// pod once they are gone.
    #[cfg_attr(feature = "wasmtime", component(name = "preempt"))]
    Preempt(Preemption),
}

/// Who the policy is.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Info {
    /// Short name, e.g. `binpack`.
    pub name: String,
    /// The policy's own version, e.g. `1.2.0`.
    pub version: String,
    /// One sentence on what it optimises for.
    pub description: String,
    /// The node label keys it reads (exact keys, at most 32); each node in
    /// a snapshot carries its values for these and no others.
    #[serde(default)]
    #[cfg_attr(feature = "wasmtime", component(name = "label-keys"))]
    pub label_keys: Vec<String>,
}

/// The value of a lifted enum discriminant (called by the guest bindings
/// wit-bindgen generates over this module).
macro_rules! lift {
    ($ty:ident { $($n:literal => $v:ident),* $(,)? }) => {
        impl $ty {
            #[doc(hidden)]
            pub fn _lift(value: u8) -> $ty {
                match value {
                    $($n => $ty::$v,)*
                    _ => panic!(concat!("invalid ", stringify!($ty), " discriminant {}"), value),
                }
            }
        }
    };
}
lift!(Sharing { 0 => Exclusive, 1 => Shared });
lift!(Publisher { 0 => Agent, 1 => DraDriver, 2 => Both });
lift!(PreemptionPolicy { 0 => PreemptLowerPriority, 1 => Never });

impl Snapshot {
    /// The namespace at `index` of `namespaces` (a request's or running
    /// pod's `namespace`); empty when out of range.
    pub fn namespace(&self, index: u32) -> &str {
        self.namespaces
            .get(index as usize)
            .map_or("", String::as_str)
    }

    /// The running pods at `positions` of `running`, by name (`#N` for a
    /// position that names none).
    pub fn running_names(&self, positions: &[u32]) -> Vec<String> {
        positions
            .iter()
            .map(|&r| {
                self.running
                    .get(r as usize)
                    .map_or(format!("#{r}"), |pod| pod.pod.clone())
            })
            .collect()
    }
}
