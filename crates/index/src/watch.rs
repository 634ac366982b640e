//! One interface for every watched kind, so that a single generic watch
//! loop can feed the index.

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};

use crate::index::Index;
use wasmgpu_api::{GPUNode, GPUResource, GPUTenant, PodGroup};

/// How watch events of kind `K` reach the index. A watcher's `Apply` and
/// `InitApply` objects go to `apply` (or are gathered for `reset` at
/// `InitDone`), `Delete` objects to `delete`. None of these fail.
pub trait IndexResource<K> {
    /// The object was added or changed.
    fn apply(&mut self, object: &K);
    /// The object was deleted.
    fn delete(&mut self, object: &K);
    /// These are all the objects of the kind (after a list or relist).
    fn reset(&mut self, objects: &[K]);
}

impl IndexResource<Node> for Index {
    fn apply(&mut self, node: &Node) {
        self.apply_node(node);
    }

    fn delete(&mut self, node: &Node) {
        if let Some(name) = &node.metadata.name {
            self.delete_node(name);
        }
    }

    fn reset(&mut self, nodes: &[Node]) {
        self.reset_nodes(nodes);
    }
}

impl IndexResource<GPUNode> for Index {
    fn apply(&mut self, gpunode: &GPUNode) {
        self.apply_gpunode(gpunode);
    }

    fn delete(&mut self, gpunode: &GPUNode) {
        if let Some(name) = &gpunode.metadata.name {
            self.delete_gpunode(name);
        }
    }

    fn reset(&mut self, gpunodes: &[GPUNode]) {
        self.reset_gpunodes(gpunodes);
    }
}

impl IndexResource<GPUResource> for Index {
    fn apply(&mut self, resource: &GPUResource) {
        self.apply_gpuresource(resource);
    }

    fn delete(&mut self, resource: &GPUResource) {
        let meta = &resource.metadata;
        if let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) {
            self.delete_gpuresource(ns, name);
        }
    }

    fn reset(&mut self, resources: &[GPUResource]) {
        self.reset_gpuresources(resources);
    }
}

impl IndexResource<Pod> for Index {
    fn apply(&mut self, pod: &Pod) {
        self.apply_pod(pod);
    }

    fn delete(&mut self, pod: &Pod) {
        let meta = &pod.metadata;
        if let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) {
            self.delete_pod(ns, name);
        }
    }

    fn reset(&mut self, pods: &[Pod]) {
        self.reset_pods(pods);
    }
}

impl IndexResource<PodGroup> for Index {
    fn apply(&mut self, group: &PodGroup) {
        self.apply_podgroup(group);
    }

    fn delete(&mut self, group: &PodGroup) {
        let meta = &group.metadata;
        if let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) {
            self.delete_podgroup(ns, name);
        }
    }

    fn reset(&mut self, groups: &[PodGroup]) {
        self.reset_podgroups(groups);
    }
}

impl IndexResource<k8s_openapi::api::policy::v1::PodDisruptionBudget> for Index {
    fn apply(&mut self, budget: &k8s_openapi::api::policy::v1::PodDisruptionBudget) {
        self.apply_budget(budget);
    }

    fn delete(&mut self, budget: &k8s_openapi::api::policy::v1::PodDisruptionBudget) {
        let meta = &budget.metadata;
        if let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) {
            self.delete_budget(ns, name);
        }
    }

    fn reset(&mut self, budgets: &[k8s_openapi::api::policy::v1::PodDisruptionBudget]) {
        self.reset_budgets(budgets);
    }
}

impl IndexResource<GPUTenant> for Index {
    fn apply(&mut self, tenant: &GPUTenant) {
        self.apply_gputenant(tenant);
    }

    fn delete(&mut self, tenant: &GPUTenant) {
        if let Some(name) = &tenant.metadata.name {
            self.delete_gputenant(name);
        }
    }

    fn reset(&mut self, tenants: &[GPUTenant]) {
        self.reset_gputenants(tenants);
    }
}

impl IndexResource<Namespace> for Index {
    fn apply(&mut self, namespace: &Namespace) {
        self.apply_namespace(namespace);
    }

    fn delete(&mut self, namespace: &Namespace) {
        if let Some(name) = &namespace.metadata.name {
            self.delete_namespace(name);
        }
    }

    fn reset(&mut self, namespaces: &[Namespace]) {
        self.reset_namespaces(namespaces);
    }
}

impl IndexResource<ResourceSlice> for Index {
    fn apply(&mut self, slice: &ResourceSlice) {
        self.apply_resourceslice(slice);
    }

    fn delete(&mut self, slice: &ResourceSlice) {
        if let Some(name) = &slice.metadata.name {
            self.delete_resourceslice(name);
        }
    }

    fn reset(&mut self, slices: &[ResourceSlice]) {
        self.reset_resourceslices(slices);
    }
}

impl IndexResource<ResourceClaim> for Index {
    fn apply(&mut self, claim: &ResourceClaim) {
        self.apply_resourceclaim(claim);
    }

    fn delete(&mut self, claim: &ResourceClaim) {
        let meta = &claim.metadata;
        if let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) {
            self.delete_resourceclaim(ns, name);
        }
    }

    fn reset(&mut self, claims: &[ResourceClaim]) {
        self.reset_resourceclaims(claims);
    }
}

impl IndexResource<DeviceClass> for Index {
    fn apply(&mut self, class: &DeviceClass) {
        self.apply_deviceclass(class);
    }

    fn delete(&mut self, class: &DeviceClass) {
        if let Some(name) = &class.metadata.name {
            self.delete_deviceclass(name);
        }
    }

    fn reset(&mut self, classes: &[DeviceClass]) {
        self.reset_deviceclasses(classes);
    }
}

impl IndexResource<DeviceTaintRule> for Index {
    fn apply(&mut self, rule: &DeviceTaintRule) {
        self.apply_devicetaintrule(rule);
    }

    fn delete(&mut self, rule: &DeviceTaintRule) {
        if let Some(name) = &rule.metadata.name {
            self.delete_devicetaintrule(name);
        }
    }

    fn reset(&mut self, rules: &[DeviceTaintRule]) {
        self.reset_devicetaintrules(rules);
    }
}
