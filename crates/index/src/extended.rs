//! Extended resources backed by DRA (KEP-5004): a wasmgpu pod asking
//! `nvidia.com/gpu: 2` where a DeviceClass maps that name
//! (`spec.extendedResourceName`, or implicitly
//! `deviceclass.resource.kubernetes.io/<class>`) gets one ResourceClaim
//! made for it, exactly as kube-scheduler makes it, and is then placed as
//! any DRA pod.
//!
//! ```text
//!  pod (no claims, no GPUResource) ── requests of mapped names
//!     ▼  Index::extended_claims
//!  claim  <pod>-extended-resources-XXXXX   (generateName; the pod its
//!         controller owner; annotation resource.kubernetes.io/
//!         extended-resource-claim: "true"; one request per container and
//!         resource: container-<i>-request-<ridx>, i over init containers
//!         then containers, ridx the resource's place among the container's
//!         sorted request names; short-lived init containers reuse the
//!         long-lived ones' requests, the largest of theirs kept)
//!     ▼  the controller creates it (or finds it again after a restart: the
//!        annotation and the pod as controller owner)
//!  pod.status.extendedResourceClaimStatus {requestMappings, resourceClaimName}
//!     ▼
//!  the claim is one of the pod's claims: allocated and bound as any DRA pod
//! ```
//!
//! The claim is made before the pod is placed (kube-scheduler makes it while
//! binding): the policy then sees it as any other claim, and a controller
//! that stops half-way finds it again.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ContainerExtendedResourceRequest;
use k8s_openapi::api::resource::v1::{
    DeviceClaim, DeviceRequest, ExactDeviceRequest, ResourceClaim, ResourceClaimSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::facts::containers::ContainerRequests;
use crate::facts::pod::PodFacts;
use crate::index::Index;
use crate::key::ObjectKey;

/// The annotation that marks the claim made for a pod's extended resources.
pub const EXTENDED_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/extended-resource-claim";

/// The claim's requests and the pod's request mappings for the resources of
/// `classes` (resource name → DeviceClass), as kube-scheduler computes them
/// (`createRequestsAndMappings`): resources in name order; per resource,
/// one request per long-lived container asking for it, and one for the
/// short-lived init containers (the largest of theirs, after what the
/// long-lived containers after each already give it); requests sorted by
/// name.
pub(crate) fn requests_and_mappings(
    containers: &[ContainerRequests],
    classes: &BTreeMap<String, String>,
) -> (Vec<DeviceRequest>, Vec<ContainerExtendedResourceRequest>) {
    let mut requests: Vec<DeviceRequest> = Vec::new();
    let mut mappings = Vec::new();
    for (resource, class) in classes {
        let mut long_lived: Vec<Option<DeviceRequest>> = vec![None; containers.len()];
        let mut long_mappings = Vec::new();
        for (i, c) in containers
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.short_lived)
        {
            let (request, mapped) = request_for(i, c, resource, class, &[]);
            long_lived[i] = request;
            long_mappings.extend(mapped);
        }
        let mut largest: Option<DeviceRequest> = None;
        let mut short_names: Vec<String> = Vec::new();
        let mut short_mappings = Vec::new();
        for (i, c) in containers.iter().enumerate().filter(|(_, c)| c.short_lived) {
            let (request, mapped) = request_for(i, c, resource, class, &long_lived[i..]);
            if let Some(request) = request {
                short_names.push(request.name.clone());
                if largest.as_ref().is_none_or(|l| count(l) < count(&request)) {
                    largest = Some(request);
                }
            }
            short_mappings.extend(mapped);
        }
        if let Some(largest) = &largest
            && short_names.len() > 1
        {
            for m in &mut short_mappings {
                if short_names.contains(&m.request_name) {
                    m.request_name = largest.name.clone();
                }
            }
        }
        requests.extend(largest);
        requests.extend(long_lived.into_iter().flatten());
        mappings.extend(long_mappings);
        mappings.extend(short_mappings);
    }
    requests.sort_by(|a, b| a.name.cmp(&b.name));
    (requests, mappings)
}

/// A request's count.
fn count(request: &DeviceRequest) -> i64 {
    request.exactly.as_ref().and_then(|e| e.count).unwrap_or(0)
}

/// Container `i`'s request for `resource` (none when `reusable` requests,
/// of long-lived containers after it, give it enough), and its mappings.
fn request_for(
    i: usize,
    container: &ContainerRequests,
    resource: &str,
    class: &str,
    reusable: &[Option<DeviceRequest>],
) -> (Option<DeviceRequest>, Vec<ContainerExtendedResourceRequest>) {
    let Some(&wanted) = container.extended.get(resource) else {
        return (None, Vec::new());
    };
    let mapping = |request: &str| ContainerExtendedResourceRequest {
        container_name: container.name.clone(),
        resource_name: resource.to_owned(),
        request_name: request.to_owned(),
    };
    let mut mappings = Vec::new();
    let mut sum = 0;
    for r in reusable.iter().flatten() {
        sum += count(r);
        mappings.push(mapping(&r.name));
        if sum >= wanted {
            return (None, mappings);
        }
    }
    let ridx = container
        .keys
        .iter()
        .position(|k| k == resource)
        .unwrap_or(0);
    let name = format!("container-{i}-request-{ridx}");
    mappings.push(mapping(&name));
    let request = DeviceRequest {
        name,
        exactly: Some(ExactDeviceRequest {
            device_class_name: class.to_owned(),
            allocation_mode: Some("ExactCount".into()),
            count: Some(wanted - sum),
            ..Default::default()
        }),
        first_available: None,
    };
    (Some(request), mappings)
}

/// A pod's claim for its extended resources: to create, or found made
/// before (after a restart), and the status that names it on the pod.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtendedClaim {
    /// The pod.
    pub pod: ObjectKey,
    /// Its UID.
    pub uid: String,
    /// The claim made for it earlier, by name; `None`: create `claim`.
    pub made: Option<String>,
    /// The claim to create (`generateName`, owner, annotation, requests).
    pub claim: ResourceClaim,
    /// `status.extendedResourceClaimStatus.requestMappings`.
    pub mappings: Vec<ContainerExtendedResourceRequest>,
}

// === impl Index ===

impl Index {
    /// The claims to make (or record again) for unplaced pods asking for
    /// extended resources a DeviceClass maps, whose status names no claim
    /// yet.
    pub fn extended_claims(&self) -> Vec<ExtendedClaim> {
        self.key_to_pod
            .iter()
            .filter(|(_, p)| p.unplaced() && p.extended_claim.is_none())
            .filter_map(|(key, pod)| {
                let classes = self.extended_classes(pod);
                if classes.is_empty() {
                    return None;
                }
                let (requests, mappings) = requests_and_mappings(&pod.containers, &classes);
                Some(ExtendedClaim {
                    pod: key.clone(),
                    uid: pod.uid.clone(),
                    made: self.extended_claim_made(key, &pod.uid),
                    claim: extended_claim(key, &pod.uid, requests),
                    mappings,
                })
            })
            .collect()
    }

    /// The DeviceClass of each extended resource `pod` asks for that one
    /// maps.
    pub(crate) fn extended_classes(&self, pod: &PodFacts) -> BTreeMap<String, String> {
        pod.containers
            .iter()
            .flat_map(|c| c.extended.keys())
            .filter_map(|r| Some((r.clone(), self.dra.class_for_extended(r)?.to_owned())))
            .collect()
    }

    /// The claim made for pod `key` (UID `uid`) earlier: marked by the
    /// annotation, the pod its controller owner.
    fn extended_claim_made(&self, key: &ObjectKey, uid: &str) -> Option<String> {
        self.dra.claims_in(&key.namespace).find_map(|claim| {
            let meta = &claim.metadata;
            let marked = meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(EXTENDED_CLAIM_ANNOTATION))
                .is_some_and(|v| v == "true");
            let owned = meta
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.name == key.name && o.uid == uid && o.controller == Some(true));
            (marked && owned && meta.deletion_timestamp.is_none())
                .then(|| meta.name.clone())
                .flatten()
        })
    }
}

/// The claim kube-scheduler makes for pod `key` (UID `uid`) with `requests`.
fn extended_claim(key: &ObjectKey, uid: &str, requests: Vec<DeviceRequest>) -> ResourceClaim {
    ResourceClaim {
        metadata: ObjectMeta {
            namespace: Some(key.namespace.clone()),
            generate_name: Some(format!("{}-extended-resources-", key.name)),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: key.name.clone(),
                uid: uid.to_owned(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            annotations: Some([(EXTENDED_CLAIM_ANNOTATION.to_owned(), "true".to_owned())].into()),
            ..Default::default()
        },
        spec: Some(ResourceClaimSpec {
            devices: Some(DeviceClaim {
                requests: Some(requests),
                ..Default::default()
            }),
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each mapping as (container, request).
    fn mapped(mappings: &[ContainerExtendedResourceRequest]) -> Vec<(&str, &str)> {
        mappings
            .iter()
            .map(|m| (m.container_name.as_str(), m.request_name.as_str()))
            .collect()
    }

    fn container(name: &str, short_lived: bool, requests: &[(&str, i64)]) -> ContainerRequests {
        let mut keys: Vec<String> = requests.iter().map(|(k, _)| (*k).to_owned()).collect();
        keys.push("cpu".into());
        keys.sort();
        ContainerRequests {
            name: name.into(),
            short_lived,
            keys,
            extended: requests
                .iter()
                .map(|(k, n)| ((*k).to_owned(), *n))
                .collect(),
        }
    }

    fn names(requests: &[DeviceRequest]) -> Vec<(String, i64)> {
        requests
            .iter()
            .map(|r| (r.name.clone(), count(r)))
            .collect()
    }

    #[test]
    fn requests_are_named_by_container_and_sorted_resource_index() {
        let classes = BTreeMap::from([("nvidia.com/gpu".to_owned(), "gpu.nvidia.com".to_owned())]);
        // keys of b: cpu, example.com/x, nvidia.com/gpu → ridx 2.
        let containers = [
            container("a", false, &[("nvidia.com/gpu", 2)]),
            container("b", false, &[("nvidia.com/gpu", 1), ("example.com/x", 1)]),
        ];
        let (requests, mappings) = requests_and_mappings(&containers, &classes);
        assert_eq!(
            names(&requests),
            [
                ("container-0-request-1".to_owned(), 2),
                ("container-1-request-2".to_owned(), 1)
            ]
        );
        let exactly = requests[0].exactly.as_ref().unwrap();
        assert_eq!(exactly.device_class_name, "gpu.nvidia.com");
        assert_eq!(exactly.allocation_mode.as_deref(), Some("ExactCount"));
        assert_eq!(
            mapped(&mappings),
            [
                ("a", "container-0-request-1"),
                ("b", "container-1-request-2")
            ]
        );
    }

    #[test]
    fn short_lived_init_containers_reuse_later_requests_and_keep_their_largest() {
        let classes = BTreeMap::from([("nvidia.com/gpu".to_owned(), "gpu.nvidia.com".to_owned())]);
        // init i0 wants 1 (the app's 2 serve it), init i1 wants 4 (2 more
        // than the app's), init i2 wants 3 (1 more): one short-lived
        // request, the largest (i1's 2), named for all of them.
        let containers = [
            container("i0", true, &[("nvidia.com/gpu", 1)]),
            container("i1", true, &[("nvidia.com/gpu", 4)]),
            container("i2", true, &[("nvidia.com/gpu", 3)]),
            container("app", false, &[("nvidia.com/gpu", 2)]),
        ];
        let (requests, mappings) = requests_and_mappings(&containers, &classes);
        assert_eq!(
            names(&requests),
            [
                ("container-1-request-1".to_owned(), 2),
                ("container-3-request-1".to_owned(), 2)
            ]
        );
        assert_eq!(
            mapped(&mappings),
            [
                ("app", "container-3-request-1"),
                ("i0", "container-3-request-1"),
                ("i1", "container-3-request-1"),
                ("i1", "container-1-request-1"),
                ("i2", "container-3-request-1"),
                ("i2", "container-1-request-1"),
            ]
        );
    }
}
