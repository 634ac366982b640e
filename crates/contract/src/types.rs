//! The types of the `wasmgpu:policy` contract (`wit/policy.wit`), one Rust
//! definition for the host and every Rust guest.
//!
//! Guests lift and lower them through wit-bindgen (the SDK maps the WIT
//! `types` interface onto this module); the host passes them to components
//! as they are (feature `wasmtime`). Field and variant names are the ones
//! both generators derive from the WIT: a field added to the WIT and not
//! here fails the SDK's build, and wasmtime type-checks every component
//! name against the component's own types when the host loads a policy.

#[cfg(feature = "wasmtime")]
use wasmtime::component::{ComponentType, Lift, Lower};

/// One allocatable GPU unit as the host sees it at the start of the round:
/// a whole GPU, or one MIG instance of a GPU (then `mig` is set).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Gpu {
    /// NVML UUID: `GPU-5f2c…` for a whole GPU, `MIG-…` for a MIG instance.
    /// What the pod is given; shown to users.
    pub uuid: String,
    /// Index of the GPU on its node (NVML / nvidia-smi order); for a MIG
    /// instance, the index of its parent GPU.
    pub index: u32,
    /// The product, as an index into `snapshot.models` (e.g.
    /// `NVIDIA H100 80GB HBM3`); a MIG instance has its parent's model.
    pub model: u32,
    /// Total memory in MiB (of the instance, for a MIG instance).
    #[cfg_attr(feature = "wasmtime", component(name = "memory-mib"))]
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// Memory already promised to shared allocations, in MiB. For a unit
    /// held exclusively this is the whole `memory-mib`.
    #[cfg_attr(feature = "wasmtime", component(name = "allocated-mib"))]
    #[serde(rename = "allocatedMiB")]
    pub allocated_mib: u64,
    /// True when a pod holds this unit exclusively.
    pub held: bool,
    /// How many pods hold a share of this GPU (`sharing: shared`).
    #[cfg_attr(feature = "wasmtime", component(name = "shared-owners"))]
    pub shared_owners: u32,
    /// NUMA node the GPU is attached to, when the platform reports one.
    #[cfg_attr(feature = "wasmtime", component(name = "numa-node"))]
    pub numa_node: Option<u32>,
    /// The GPUs on the same node this one has an active NVLink to, as
    /// positions in the node's `gpus` list (whole GPUs only).
    #[cfg_attr(feature = "wasmtime", component(name = "nvlink-peers"))]
    pub nvlink_peers: Vec<u32>,
    /// False when the node agent saw a critical error (XID, ECC) or the GPU
    /// is otherwise unusable; the host never accepts an unhealthy GPU.
    pub healthy: bool,
    /// Set for a MIG instance: its parent and profile. A whole GPU and its
    /// MIG instances exclude each other: the host refuses a whole GPU while
    /// any of its instances is held, and an instance while its parent is.
    pub mig: Option<MigInstance>,
}

/// Where a MIG instance sits.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Node {
    /// Kubernetes node name.
    pub name: String,
    /// The node's labels, sorted by key. Snapshot files write them as a
    /// map, as Kubernetes does.
    #[serde(with = "crate::labels")]
    #[cfg_attr(
        feature = "schemars",
        schemars(with = "std::collections::BTreeMap<String, String>")
    )]
    pub labels: Vec<(String, String)>,
    /// The node's whole GPUs sorted by `index`, each followed by its MIG
    /// instances (if any). Decisions name GPUs by position in this list.
    pub gpus: Vec<Gpu>,
}

/// How a request uses the GPUs it gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
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

/// One pending pod and the shape of what it asks for (from its GPUResource).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Request {
    /// The pod, as `namespace/name`; unique within a snapshot. Decisions
    /// name it by its position in `snapshot.pending`.
    pub pod: String,
    /// The pod's namespace (the tenant, for fair-share policies).
    pub namespace: String,
    /// The GPUResource the pod references, as `namespace/name`.
    pub resource: String,
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
    /// The pod's priority (`spec.priority`); higher goes first.
    pub priority: i32,
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
}

/// GPUs currently held by one namespace, for fair-share policies.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "wasmtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "wasmtime", component(record))]
pub struct Usage {
    /// The namespace.
    pub namespace: String,
    /// Whole GPUs held exclusively by its pods.
    #[cfg_attr(feature = "wasmtime", component(name = "exclusive-gpus"))]
    pub exclusive_gpus: u32,
    /// Memory held through shared GPUs, in MiB.
    #[cfg_attr(feature = "wasmtime", component(name = "shared-mib"))]
    #[serde(rename = "sharedMiB")]
    pub shared_mib: u64,
    /// MIG instances held by its pods.
    #[cfg_attr(feature = "wasmtime", component(name = "mig-instances"))]
    pub mig_instances: u32,
}

/// Everything a policy may look at in one round.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
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
    /// Candidate nodes with their GPUs and current allocations.
    pub nodes: Vec<Node>,
    /// Pods waiting for GPUs, oldest first.
    pub pending: Vec<Request>,
    /// Sets of nodes, as sorted indices into `nodes`, that requests name
    /// through `eligible-set`. Pods with the same constraints share one
    /// set, so a round with a thousand pods and a thousand nodes does not
    /// carry a million indices.
    #[cfg_attr(feature = "wasmtime", component(name = "eligible-sets"))]
    pub eligible_sets: Vec<Vec<u32>>,
    /// Gangs with at least one pending member, sorted by name.
    pub gangs: Vec<Gang>,
    /// Current usage per namespace, sorted by namespace.
    pub usage: Vec<Usage>,
    /// The policy's parameters: the `config.json` shipped with the policy,
    /// verbatim (empty when none). The policy defines its format.
    pub config: String,
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
    /// Exactly `count` distinct GPUs (or MIG instances) of that node, as
    /// positions in its `gpus` list.
    pub gpus: Vec<u32>,
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
}

impl Sharing {
    /// The value of a lifted `sharing` discriminant (called by the guest
    /// bindings wit-bindgen generates over this module).
    #[doc(hidden)]
    pub fn _lift(value: u8) -> Sharing {
        match value {
            0 => Sharing::Exclusive,
            1 => Sharing::Shared,
            _ => panic!("invalid sharing discriminant {value}"),
        }
    }
}
