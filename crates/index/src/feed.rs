//! How watched objects enter the index: `apply_*` (added or changed),
//! `delete_*`, and `reset_*` after a relist, one set per kind. None fails:
//! an object without a name, or another scheduler's pod, is skipped.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use wasmgpu_api::{GPUNode, GPUResource, PodGroup};

use crate::facts::gang::GangFacts;
use crate::facts::node::NodeFacts;
use crate::facts::pod::PodFacts;
use crate::facts::resource::{ResourceState, is_older, resource_key};
use crate::index::Index;
use crate::inventory::{self, NodeInventory};
use crate::key::ObjectKey;

impl Index {
    /// Records a PodGroup (added or changed).
    pub fn apply_podgroup(&mut self, group: &PodGroup) {
        let meta = &group.metadata;
        let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) else {
            return;
        };
        self.key_to_gang
            .insert(ObjectKey::new(namespace, name), GangFacts::of(group));
    }

    /// Forgets a PodGroup.
    pub fn delete_podgroup(&mut self, namespace: &str, name: &str) {
        self.key_to_gang.remove(&ObjectKey::new(namespace, name));
    }

    /// Replaces every PodGroup (after a relist).
    pub fn reset_podgroups(&mut self, groups: &[wasmgpu_api::PodGroup]) {
        self.key_to_gang.clear();
        groups.iter().for_each(|g| self.apply_podgroup(g));
    }

    /// Records a Node (added or changed).
    pub fn apply_node(&mut self, node: &Node) {
        let Some(name) = node.metadata.name.clone() else {
            tracing::info!("Ignoring Node without a name");
            return;
        };
        self.name_to_node.insert(name, NodeFacts::from_node(node));
    }

    /// Forgets a Node (and what its GPUNode listed).
    pub fn delete_node(&mut self, name: &str) {
        self.name_to_node.remove(name);
        self.node_to_lost_inventory.remove(name);
    }

    /// Replaces every Node (after a relist).
    pub fn reset_nodes(&mut self, nodes: &[Node]) {
        self.name_to_node.clear();
        nodes.iter().for_each(|node| self.apply_node(node));
        let nodes = &self.name_to_node;
        self.node_to_lost_inventory
            .retain(|name, _| nodes.contains_key(name));
    }

    /// Records a GPUNode's inventory; one without status has none yet.
    pub fn apply_gpunode(&mut self, gpunode: &GPUNode) {
        let Some(name) = gpunode.metadata.name.clone() else {
            tracing::info!("Ignoring GPUNode without a name");
            return;
        };
        match NodeInventory::from_gpunode(gpunode) {
            Some(inventory) => {
                self.node_to_agent_inventory.insert(name.clone(), inventory);
            }
            None => {
                self.node_to_agent_inventory.remove(&name);
            }
        };
        self.refresh_inventory(&name);
    }

    /// Forgets a GPUNode's inventory. Until the agent publishes it again,
    /// the node takes no pods, its GPUs held by pods stay held, and pods
    /// that only it could hold wait.
    pub fn delete_gpunode(&mut self, name: &str) {
        self.node_to_agent_inventory.remove(name);
        self.refresh_inventory(name);
    }

    /// Merges a node's inventories again after one of them changed. A node
    /// left with none keeps what it listed as lost (see
    /// `node_to_lost_inventory`).
    fn refresh_inventory(&mut self, name: &str) {
        let agent = self.node_to_agent_inventory.get(name);
        match inventory::merge(agent, self.dra.node(name)) {
            Some(inventory) => {
                self.node_to_lost_inventory.remove(name);
                self.node_to_inventory
                    .insert(name.to_string(), inventory.laid_out());
            }
            None => {
                if let Some(inventory) = self.node_to_inventory.remove(name)
                    && self.name_to_node.contains_key(name)
                {
                    self.node_to_lost_inventory
                        .insert(name.to_string(), inventory);
                }
            }
        }
    }

    /// Replaces every GPUNode (after a relist).
    pub fn reset_gpunodes(&mut self, gpunodes: &[GPUNode]) {
        let names: Vec<String> = self.node_to_agent_inventory.keys().cloned().collect();
        let listed: std::collections::HashSet<&str> = gpunodes
            .iter()
            .filter_map(|g| g.metadata.name.as_deref())
            .collect();
        for name in names.iter().filter(|n| !listed.contains(n.as_str())) {
            self.delete_gpunode(name);
        }
        gpunodes
            .iter()
            .for_each(|gpunode| self.apply_gpunode(gpunode));
    }

    /// Records a ResourceSlice (added or changed): the GPUs a DRA driver
    /// publishes, by the pool rules (see the `dra` module).
    pub fn apply_resourceslice(&mut self, slice: &ResourceSlice) {
        for node in self.dra.apply_slice(slice) {
            self.refresh_inventory(&node);
        }
    }

    /// Forgets a ResourceSlice.
    pub fn delete_resourceslice(&mut self, name: &str) {
        for node in self.dra.delete_slice(name) {
            self.refresh_inventory(&node);
        }
    }

    /// Replaces every ResourceSlice (after a relist).
    pub fn reset_resourceslices(&mut self, slices: &[ResourceSlice]) {
        for node in self.dra.reset_slices(slices) {
            self.refresh_inventory(&node);
        }
    }

    /// Records a ResourceClaim: the devices its allocation holds are held,
    /// whoever allocated them (kube-scheduler's claims too).
    pub fn apply_resourceclaim(&mut self, claim: &ResourceClaim) {
        self.dra.apply_claim(claim);
    }

    /// Forgets a ResourceClaim: its devices are free.
    pub fn delete_resourceclaim(&mut self, namespace: &str, name: &str) {
        self.dra.delete_claim(namespace, name);
    }

    /// Replaces every ResourceClaim (after a relist).
    pub fn reset_resourceclaims(&mut self, claims: &[ResourceClaim]) {
        self.dra.reset_claims(claims);
    }

    /// Records a DeviceClass: the selectors DRA requests naming it apply
    /// (compiled once here) and the configuration allocations copy.
    pub fn apply_deviceclass(&mut self, class: &DeviceClass) {
        self.dra.apply_class(class);
    }

    /// Forgets a DeviceClass.
    pub fn delete_deviceclass(&mut self, name: &str) {
        self.dra.delete_class(name);
    }

    /// Replaces every DeviceClass (after a relist).
    pub fn reset_deviceclasses(&mut self, classes: &[DeviceClass]) {
        self.dra.reset_classes(classes);
    }

    /// Records a DeviceTaintRule: the taint it puts on the devices it
    /// selects keeps them from claims that do not tolerate it.
    pub fn apply_devicetaintrule(&mut self, rule: &DeviceTaintRule) {
        self.dra.apply_taint_rule(rule);
    }

    /// Forgets a DeviceTaintRule.
    pub fn delete_devicetaintrule(&mut self, name: &str) {
        self.dra.delete_taint_rule(name);
    }

    /// Replaces every DeviceTaintRule (after a relist).
    pub fn reset_devicetaintrules(&mut self, rules: &[DeviceTaintRule]) {
        self.dra.reset_taint_rules(rules);
    }

    /// Records a GPUResource as a watch delivers it: its spec (checked) and
    /// its ledger. A version older than one the controller wrote (see
    /// [`Index::record_write`]) is ignored.
    pub fn apply_gpuresource(&mut self, resource: &GPUResource) {
        let Some(key) = resource_key(resource) else {
            tracing::info!("Ignoring GPUResource without a namespace or name");
            return;
        };
        if let Some(written) = self.key_to_written_version.get(&key) {
            if is_older(resource.metadata.resource_version.as_deref(), written) {
                tracing::debug!(resource = %key, "Ignoring a version older than the one written");
                return;
            }
            self.key_to_written_version.remove(&key);
        }
        self.store_gpuresource(key, resource);
    }

    /// Records a GPUResource the controller has just written (the object
    /// the API server returned), ahead of the watch.
    pub fn record_write(&mut self, resource: &GPUResource) {
        let Some(key) = resource_key(resource) else {
            return;
        };
        match &resource.metadata.resource_version {
            Some(version) => self
                .key_to_written_version
                .insert(key.clone(), version.clone()),
            None => self.key_to_written_version.remove(&key),
        };
        self.store_gpuresource(key, resource);
    }

    fn store_gpuresource(&mut self, key: ObjectKey, resource: &GPUResource) {
        let spec_error = resource.spec.check().err();
        if let Some(error) = &spec_error {
            tracing::info!(resource = %key, %error, "Ignoring GPUResource spec");
        }
        let state = ResourceState::of(resource, spec_error);
        self.key_to_resource.insert(key, state);
    }

    /// Forgets a GPUResource (its pods keep the GPUs they hold).
    pub fn delete_gpuresource(&mut self, namespace: &str, name: &str) {
        let key = ObjectKey::new(namespace, name);
        self.key_to_written_version.remove(&key);
        self.key_to_resource.remove(&key);
    }

    /// Replaces every GPUResource (after a relist).
    pub fn reset_gpuresources(&mut self, resources: &[GPUResource]) {
        self.key_to_resource.clear();
        self.key_to_written_version.clear();
        resources.iter().for_each(|r| self.apply_gpuresource(r));
    }

    /// Records a pod; pods of other schedulers are not kept.
    pub fn apply_pod(&mut self, pod: &Pod) {
        let meta = &pod.metadata;
        let (Some(ns), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
            tracing::info!("Ignoring Pod without a namespace or name");
            return;
        };
        let key = ObjectKey::new(ns, name);
        self.store_pod(key.clone(), PodFacts::from_pod(pod));
        self.resolve_in_flight(&key);
    }

    /// Forgets a pod; the GPUs it held are free.
    pub fn delete_pod(&mut self, namespace: &str, name: &str) {
        let key = ObjectKey::new(namespace, name);
        self.store_pod(key.clone(), None);
        self.preemption_backoffs.forget(&key);
        self.resolve_in_flight(&key);
    }

    /// Keeps `facts` as pod `key`'s (`None`: forgets the pod), and what
    /// bound pods hold and the pods counted per GPUResource with them.
    fn store_pod(&mut self, key: ObjectKey, facts: Option<PodFacts>) {
        match facts {
            Some(facts) => {
                let old = self.key_to_pod.get(&key);
                self.bound_use.replace(&key, old, Some(&facts));
                self.pod_tally.replace(&key.namespace, old, Some(&facts));
                self.key_to_pod.insert(key, facts);
            }
            None => {
                if let Some(old) = self.key_to_pod.remove(&key) {
                    self.bound_use.replace(&key, Some(&old), None);
                    self.pod_tally.replace(&key.namespace, Some(&old), None);
                }
            }
        }
    }

    /// Replaces every pod (after a relist). From the first call on, ledger
    /// entries of unknown pods are stale (see [`Index::releases`]).
    pub fn reset_pods(&mut self, pods: &[Pod]) {
        self.key_to_pod.clear();
        self.bound_use.clear();
        self.pod_tally.clear();
        pods.iter().for_each(|pod| self.apply_pod(pod));
        let in_flight: Vec<ObjectKey> = self.key_to_in_flight.keys().cloned().collect();
        in_flight.iter().for_each(|pod| self.resolve_in_flight(pod));
        self.pods_listed = true;
    }

    /// Records that `pod`'s preemption was blocked at `now_ms` (a victim's
    /// eviction refused): it may not preempt again for the returned time,
    /// doubling with each blocked attempt (see the `backoff` module).
    pub fn preemption_blocked(&mut self, pod: &ObjectKey, now_ms: u64) -> std::time::Duration {
        std::time::Duration::from_millis(self.preemption_backoffs.block(pod, now_ms))
    }
}
