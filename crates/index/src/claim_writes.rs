//! What binding a DRA pod writes to its claims, as kube-scheduler writes it:
//! each claim the policy allocated gets `status.allocation` (the devices as
//! results, the DeviceClass's and the claim's configuration, a node
//! selector naming the node) and the pod in `status.reservedFor`, in one
//! status update; a claim allocated already only gets the pod reserved.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationConfiguration, DeviceAllocationResult, DeviceRequest,
    DeviceRequestAllocationResult, DeviceToleration, ResourceClaim,
};

use crate::dra::DeviceId;
use crate::facts::binding::ClaimWrite;
use crate::index::Index;
use crate::key::ObjectKey;

/// A device chosen for one request: the result's request name
/// (`request` or `request/subrequest`) and the device's UUID.
pub struct Chosen<'a> {
    /// The claim, as a position in the pod's pending claims.
    pub claim: usize,
    /// `request` or `request/subrequest`.
    pub request: String,
    /// The device's UUID on the node.
    pub uuid: &'a str,
}

// === impl Index ===

impl Index {
    /// The claim writes of a DRA pod placed on `node`: one allocation per
    /// pending claim (`claims`, by `namespace/name`, with the devices
    /// `chosen`), and a
    /// reservation for each of its claims allocated already. An error when
    /// a claim or device is no longer what the round saw.
    pub fn claim_writes(
        &self,
        pod: &ObjectKey,
        claims: &[&str],
        chosen: &[Chosen<'_>],
        node: &str,
    ) -> Result<Vec<ClaimWrite>, String> {
        let mut writes = Vec::new();
        for (c, &name) in claims.iter().enumerate() {
            let key =
                ObjectKey::parse(name).ok_or_else(|| format!("{name:?} is not namespace/name"))?;
            let facts = self
                .dra
                .claim(&key)
                .ok_or_else(|| format!("ResourceClaim {key} is gone"))?;
            if facts.allocated() {
                return Err(format!("ResourceClaim {key} was allocated meanwhile"));
            }
            let requests = requests_of(&facts.claim);
            let mut results = Vec::new();
            for choice in chosen.iter().filter(|ch| ch.claim == c) {
                let gpu = self.dra.device_on(node, choice.uuid).ok_or_else(|| {
                    format!("device {} on {node} is no longer published", choice.uuid)
                })?;
                results.push(DeviceRequestAllocationResult {
                    request: choice.request.clone(),
                    driver: gpu.id.driver.clone(),
                    pool: gpu.id.pool.clone(),
                    device: gpu.id.device.clone(),
                    // As kube-scheduler does: the request's tolerations at
                    // allocation, so the taint eviction controller honours
                    // them.
                    tolerations: chosen_request(&requests, &choice.request)
                        .map(|r| r.tolerations.to_vec())
                        .filter(|t| !t.is_empty()),
                    ..Default::default()
                });
            }
            writes.push(ClaimWrite {
                claim: key,
                uid: facts.uid().to_string(),
                seen: Some(Arc::clone(&facts.claim)),
                allocation: Some(AllocationResult {
                    devices: Some(DeviceAllocationResult {
                        config: Some(self.allocation_config(&facts.claim, &results)),
                        results: Some(results),
                    }),
                    node_selector: Some(on_node(node)),
                    allocation_timestamp: None,
                }),
            });
        }
        writes.extend(self.reservations(pod));
        Ok(writes)
    }

    /// Why `write`'s allocation can no longer be written: one of its
    /// devices is in another claim's allocation, as the watch shows it now.
    /// Nothing serialises two schedulers: kube-scheduler may have allocated
    /// the device between the round that chose it and this write. `None`
    /// when none of its devices is held by another claim (or it writes no
    /// allocation).
    pub fn taken_meanwhile(&self, write: &ClaimWrite) -> Option<String> {
        let results = write
            .allocation
            .as_ref()?
            .devices
            .as_ref()?
            .results
            .as_ref()?;
        results.iter().find_map(|result| {
            let id = DeviceId {
                driver: result.driver.clone(),
                pool: result.pool.clone(),
                device: result.device.clone(),
            };
            let other = self
                .dra
                .holders_of(&id)
                .iter()
                .find(|claim| **claim != write.claim)?;
            Some(format!(
                "device {id} was allocated to ResourceClaim {other} meanwhile"
            ))
        })
    }

    /// The pod's claims allocated already and not reserved for it yet.
    fn reservations(&self, pod: &ObjectKey) -> Vec<ClaimWrite> {
        let Some(facts) = self.key_to_pod.get(pod) else {
            return Vec::new();
        };
        facts
            .claim_names()
            .map(|name| ObjectKey::new(&pod.namespace, name))
            .filter_map(|key| {
                let claim = self.dra.claim(&key)?;
                let reserved = claim.reserved_for().any(|uid| uid == facts.uid);
                (claim.allocated() && !reserved).then(|| ClaimWrite {
                    uid: claim.uid().to_string(),
                    claim: key,
                    allocation: None,
                    seen: Some(Arc::clone(&claim.claim)),
                })
            })
            .collect()
    }

    /// The configuration an allocation carries: each DeviceClass's for the
    /// requests allocated from it (`FromClass`), then the claim's own
    /// (`FromClaim`), as kube-scheduler copies them.
    fn allocation_config(
        &self,
        claim: &ResourceClaim,
        results: &[DeviceRequestAllocationResult],
    ) -> Vec<DeviceAllocationConfiguration> {
        let devices = claim.spec.as_ref().and_then(|s| s.devices.as_ref());
        let requests = requests_of(claim);
        let mut config = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        for result in results {
            if seen.contains(&result.request.as_str()) {
                continue;
            }
            seen.push(&result.request);
            let Some(class) =
                chosen_request(&requests, &result.request).and_then(|r| self.dra.class(r.class))
            else {
                continue;
            };
            config.extend(class.config.iter().filter_map(|c| {
                Some(DeviceAllocationConfiguration {
                    source: "FromClass".into(),
                    requests: Some(vec![result.request.clone()]),
                    opaque: Some(c.opaque.clone()?),
                })
            }));
        }
        config.extend(
            devices
                .and_then(|d| d.config.as_ref())
                .into_iter()
                .flatten()
                .map(|c| DeviceAllocationConfiguration {
                    source: "FromClaim".into(),
                    requests: c.requests.clone(),
                    opaque: c.opaque.clone(),
                }),
        );
        config
    }
}

/// A claim's requests.
fn requests_of(claim: &ResourceClaim) -> Vec<&DeviceRequest> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.requests.as_ref())
        .into_iter()
        .flatten()
        .collect()
}

/// What a result's request (`name`, or `name/subrequest` for an entry of
/// `firstAvailable`) asked with: its DeviceClass and tolerations.
struct ChosenRequest<'a> {
    class: &'a str,
    tolerations: &'a [DeviceToleration],
}

fn chosen_request<'a>(requests: &[&'a DeviceRequest], request: &str) -> Option<ChosenRequest<'a>> {
    let (name, sub) = match request.split_once('/') {
        Some((name, sub)) => (name, Some(sub)),
        None => (request, None),
    };
    let r = requests.iter().find(|r| r.name == name)?;
    match sub {
        None => r.exactly.as_ref().map(|e| ChosenRequest {
            class: &e.device_class_name,
            tolerations: e.tolerations.as_deref().unwrap_or_default(),
        }),
        Some(sub) => r
            .first_available
            .iter()
            .flatten()
            .find(|s| s.name == sub)
            .map(|s| ChosenRequest {
                class: &s.device_class_name,
                tolerations: s.tolerations.as_deref().unwrap_or_default(),
            }),
    }
}

/// A node selector that matches `node` alone.
pub(crate) fn on_node(node: &str) -> NodeSelector {
    NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.into()]),
            }]),
            match_expressions: None,
        }],
    }
}
