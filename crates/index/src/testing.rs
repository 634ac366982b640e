//! Builders of the objects watches deliver (`Node`, `GPUNode`, `Pod`,
//! `GPUResource`, `PodGroup`), small and chainable, for the index's tests
//! and benchmarks (feature `testing`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeCondition, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use wasmgpu_api::{
    Allocation, Device, GPUNode, GPUNodeSpec, GPUNodeStatus, GPUResource, GPUResourceSpec,
    GPUResourceStatus, GpuInfo, PolicyRef, Sharing,
};

pub const H100: &str = "NVIDIA H100 80GB HBM3";
pub const H100_MIB: u64 = 81559;
pub const DEFAULT_POLICY: &str = "binpack";

/// A `Node`, Ready and schedulable unless told otherwise.
pub struct TestNode(Node);

pub fn node(name: &str) -> TestNode {
    TestNode(Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    })
}

impl TestNode {
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    pub fn taint(mut self, key: &str, value: Option<&str>, effect: &str) -> Self {
        let spec = self.0.spec.get_or_insert_with(Default::default);
        spec.taints.get_or_insert_with(Vec::new).push(Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        });
        self
    }

    pub fn cordoned(mut self) -> Self {
        self.0
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        self
    }

    pub fn not_ready(mut self) -> Self {
        let status = self.0.status.as_mut().expect("status");
        status.conditions.as_mut().expect("conditions")[0].status = "False".into();
        self
    }

    pub fn build(self) -> Node {
        self.0
    }
}

/// A `GPUNode` with an inventory of H100s unless told otherwise.
pub struct TestGpuNode {
    name: String,
    gpus: Vec<GpuInfo>,
}

pub fn gpunode(name: &str) -> TestGpuNode {
    TestGpuNode {
        name: name.into(),
        gpus: Vec::new(),
    }
}

impl TestGpuNode {
    /// `count` healthy H100s, UUIDs `GPU-<node>-<index>`.
    pub fn with_gpus(mut self, count: u32) -> Self {
        self.gpus = (0..count)
            .map(|index| GpuInfo {
                uuid: format!("GPU-{}-{index}", self.name),
                index,
                model: H100.into(),
                memory_total_mib: H100_MIB,
                healthy: true,
                ..Default::default()
            })
            .collect();
        self
    }

    /// Renames GPU `index` to `uuid(index)` (e.g. UUIDs as long as NVML's,
    /// where their size matters); before [`TestGpuNode::nvlinked`].
    pub fn uuids(mut self, uuid: impl Fn(u32) -> String) -> Self {
        for gpu in &mut self.gpus {
            gpu.uuid = uuid(gpu.index);
        }
        self
    }

    pub fn model(mut self, model: &str, memory_mib: u64) -> Self {
        for gpu in &mut self.gpus {
            gpu.model = model.into();
            gpu.memory_total_mib = memory_mib;
        }
        self
    }

    /// Links every pair of GPUs with NVLink.
    pub fn nvlinked(mut self) -> Self {
        let uuids: Vec<String> = self.gpus.iter().map(|g| g.uuid.clone()).collect();
        for gpu in &mut self.gpus {
            gpu.nvlink_peers = uuids.iter().filter(|u| **u != gpu.uuid).cloned().collect();
        }
        self
    }

    pub fn unhealthy(mut self, index: u32) -> Self {
        let gpu = self
            .gpus
            .iter_mut()
            .find(|g| g.index == index)
            .expect("a GPU of that index");
        gpu.healthy = false;
        self
    }

    /// Puts GPU `index` in MIG mode with one instance per `(profile, MiB)`,
    /// UUIDs `MIG-<node>-<index>-<k>`.
    pub fn mig(mut self, index: u32, instances: &[(&str, u64)]) -> Self {
        let name = self.name.clone();
        let gpu = self
            .gpus
            .iter_mut()
            .find(|g| g.index == index)
            .expect("a GPU of that index");
        gpu.mig_mode = Some(wasmgpu_api::MigMode::Enabled);
        gpu.mig_instances = instances
            .iter()
            .enumerate()
            .map(|(k, (profile, mib))| wasmgpu_api::MigInstanceInfo {
                uuid: format!("MIG-{name}-{index}-{k}"),
                profile: (*profile).into(),
                memory_total_mib: *mib,
                ..Default::default()
            })
            .collect();
        self
    }

    /// The inventory as the agent might publish it: in any order.
    pub fn reversed(mut self) -> Self {
        self.gpus.reverse();
        self
    }

    pub fn build(self) -> GPUNode {
        let mut gpunode = GPUNode::new(&self.name, GPUNodeSpec {});
        gpunode.status = Some(GPUNodeStatus {
            gpus_total: self.gpus.len() as u32,
            gpus: self.gpus,
            ..Default::default()
        });
        gpunode
    }
}

/// A pending `Pod` with `schedulerName: wasmgpu`.
pub struct TestPod(Pod);

pub fn pod(namespace: &str, name: &str) -> TestPod {
    TestPod(Pod {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            creation_timestamp: Some(Time(Timestamp::from_millisecond(1_000).unwrap())),
            ..Default::default()
        },
        spec: Some(PodSpec {
            scheduler_name: Some("wasmgpu".into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        }),
    })
}

impl TestPod {
    fn spec(&mut self) -> &mut PodSpec {
        self.0.spec.as_mut().expect("spec")
    }

    pub fn resource(mut self, name: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert("wasmgpu.io/gpuresource".into(), name.into());
        self
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.0.metadata.uid = Some(uid.into());
        self
    }

    /// Bound to `node` holding `uuids` as the controller records it (the
    /// annotations a binding copies onto the pod), each taking `mib` with
    /// `sharing`, for the GPUResource the pod names.
    pub fn holds(mut self, node: &str, uuids: &[&str], sharing: Sharing, mib: u64) -> Self {
        let resource = self
            .0
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("wasmgpu.io/gpuresource").cloned())
            .unwrap_or_default();
        let allocation = wasmgpu_api::PodAllocation {
            resource,
            node: node.into(),
            sharing,
            devices: devices(uuids, mib),
            policy: PolicyRef {
                name: DEFAULT_POLICY.into(),
                digest: "sha256:00".into(),
            },
        };
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(allocation.annotations());
        self.bound(node)
    }

    /// Sets a raw annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// Joins gang `group` (a PodGroup in the pod's namespace).
    pub fn gang(mut self, group: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(wasmgpu_api::POD_GROUP_LABEL.into(), group.into());
        self
    }

    pub fn created_ms(mut self, ms: i64) -> Self {
        self.0.metadata.creation_timestamp = Some(Time(Timestamp::from_millisecond(ms).unwrap()));
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        self.spec().priority = Some(priority);
        self
    }

    pub fn scheduler(mut self, name: &str) -> Self {
        self.spec().scheduler_name = Some(name.into());
        self
    }

    pub fn node_selector(mut self, key: &str, value: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// Adds a required node affinity term (terms are ORed).
    pub fn affinity_term(mut self, term: NodeSelectorTerm) -> Self {
        let affinity = self.spec().affinity.get_or_insert_with(Affinity::default);
        let node_affinity = affinity
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        node_affinity
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(NodeSelector::default)
            .node_selector_terms
            .push(term);
        self
    }

    pub fn toleration(
        mut self,
        key: Option<&str>,
        operator: &str,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Self {
        self.spec()
            .tolerations
            .get_or_insert_with(Vec::new)
            .push(Toleration {
                key: key.map(Into::into),
                operator: Some(operator.into()),
                value: value.map(Into::into),
                effect: effect.map(Into::into),
                toleration_seconds: None,
            });
        self
    }

    pub fn bound(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.into());
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.0.status.get_or_insert_with(Default::default).phase = Some(phase.into());
        self
    }

    pub fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp =
            Some(Time(Timestamp::from_millisecond(5_000).unwrap()));
        self
    }

    /// A `spec.resourceClaims` entry naming the claim `claim`.
    pub fn claim(mut self, entry: &str, claim: &str) -> Self {
        self.spec().resource_claims.get_or_insert_default().push(
            k8s_openapi::api::core::v1::PodResourceClaim {
                name: entry.into(),
                resource_claim_name: Some(claim.into()),
                resource_claim_template_name: None,
            },
        );
        self
    }

    /// A `spec.resourceClaims` entry from the template `template`; `made`:
    /// the claim `pod.status.resourceClaimStatuses` records for it.
    pub fn claim_template(mut self, entry: &str, template: &str, made: Option<&str>) -> Self {
        self.spec().resource_claims.get_or_insert_default().push(
            k8s_openapi::api::core::v1::PodResourceClaim {
                name: entry.into(),
                resource_claim_name: None,
                resource_claim_template_name: Some(template.into()),
            },
        );
        if let Some(made) = made {
            let status = self.0.status.get_or_insert_default();
            status.resource_claim_statuses.get_or_insert_default().push(
                k8s_openapi::api::core::v1::PodResourceClaimStatus {
                    name: entry.into(),
                    resource_claim_name: Some(made.into()),
                },
            );
        }
        self
    }

    pub fn build(self) -> Pod {
        self.0
    }
}

/// A node selector term of match expressions: `(key, operator, values)`.
pub fn term(expressions: &[(&str, &str, &[&str])]) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(
            expressions
                .iter()
                .map(|(key, operator, values)| NodeSelectorRequirement {
                    key: (*key).into(),
                    operator: (*operator).into(),
                    values: Some(values.iter().map(|v| (*v).into()).collect()),
                })
                .collect(),
        ),
        match_fields: None,
    }
}

/// A `GPUResource`: one exclusive GPU of any model unless told otherwise.
pub struct TestResource(GPUResource);

pub fn gpuresource(namespace: &str, name: &str) -> TestResource {
    let mut resource = GPUResource::new(
        name,
        GPUResourceSpec {
            mig_profile: None,
            count: 1,
            model: None,
            memory_mib: 0,
            sharing: Sharing::Exclusive,
            policy: None,
        },
    );
    resource.metadata.namespace = Some(namespace.into());
    TestResource(resource)
}

impl TestResource {
    pub fn count(mut self, count: u32) -> Self {
        self.0.spec.count = count;
        self
    }

    pub fn model(mut self, glob: &str) -> Self {
        self.0.spec.model = Some(glob.into());
        self
    }

    pub fn memory(mut self, mib: u64) -> Self {
        self.0.spec.memory_mib = mib;
        self
    }

    pub fn mig_profile(mut self, profile: &str) -> Self {
        self.0.spec.mig_profile = Some(profile.into());
        self
    }

    pub fn shared(mut self, mib: u64) -> Self {
        self.0.spec.sharing = Sharing::Shared;
        self.0.spec.memory_mib = mib;
        self
    }

    pub fn policy(mut self, policy: &str) -> Self {
        self.0.spec.policy = Some(policy.into());
        self
    }

    /// Adds a ledger entry: `pod` (with UID `uid-<pod>`) holds `uuids` on
    /// `node`, each taking `mib`, held as the spec's sharing says.
    pub fn holds(mut self, pod: &str, node: &str, uuids: &[&str], mib: u64) -> Self {
        let sharing = self.0.spec.sharing;
        let status = self.0.status.get_or_insert_with(GPUResourceStatus::default);
        status.allocations.push(Allocation {
            pod: pod.into(),
            pod_uid: format!("uid-{pod}"),
            node: node.into(),
            sharing,
            devices: devices(uuids, mib),
            policy: PolicyRef {
                name: DEFAULT_POLICY.into(),
                digest: "sha256:00".into(),
            },
        });
        self
    }

    pub fn version(mut self, resource_version: &str) -> Self {
        self.0.metadata.resource_version = Some(resource_version.into());
        self
    }

    pub fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        self
    }

    pub fn build(self) -> GPUResource {
        self.0
    }
}

/// Devices for `uuids` (`GPU-<node>-<index>`), each taking `mib`.
pub fn devices(uuids: &[&str], mib: u64) -> Vec<Device> {
    uuids
        .iter()
        .map(|uuid| Device {
            uuid: (*uuid).into(),
            index: uuid
                .rsplit('-')
                .next()
                .and_then(|i| i.parse().ok())
                .unwrap_or(0),
            memory_mib: mib,
        })
        .collect()
}

/// A PodGroup `namespace/name` of `min_member`, with a schedule timeout.
pub fn podgroup(
    namespace: &str,
    name: &str,
    min_member: i32,
    timeout_s: Option<i32>,
) -> wasmgpu_api::PodGroup {
    let mut group = wasmgpu_api::PodGroup::new(
        name,
        wasmgpu_api::PodGroupSpec {
            min_member,
            schedule_timeout_seconds: timeout_s,
        },
    );
    group.metadata.namespace = Some(namespace.into());
    group
}
