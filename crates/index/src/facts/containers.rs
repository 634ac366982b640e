//! What a pod's containers ask for, as the extended-resource mapping
//! (KEP-5004, [`crate::extended`]) reads it: each container's request names
//! and the extended resources among them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;

use crate::dra::quantity;

/// The prefix of a DeviceClass's implicit extended resource name.
pub(crate) const IMPLICIT_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// One container's resource requests, as the mapping reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ContainerRequests {
    pub name: String,
    /// A regular (not restartable) init container: it runs alone and its
    /// devices serve the containers after it.
    pub short_lived: bool,
    /// Every request name, sorted (a resource's index among them names its
    /// request).
    pub keys: Vec<String>,
    /// The extended resources it asks for, with their counts.
    pub extended: BTreeMap<String, i64>,
}

/// Whether `name` may be backed by DRA: an extended resource name (a
/// domain-qualified name outside `kubernetes.io/`, not a quota's
/// `requests.`), or a DeviceClass's implicit name.
pub(crate) fn is_dra_extended(name: &str) -> bool {
    let extended =
        name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.");
    extended || name.starts_with(IMPLICIT_PREFIX)
}

/// The containers of `spec` (init containers first), each with its
/// requests; empty when none asks for an extended resource.
pub(crate) fn containers_of(spec: &PodSpec) -> Vec<ContainerRequests> {
    let init = spec.init_containers.iter().flatten().map(|c| (c, true));
    let all: Vec<ContainerRequests> = init
        .chain(spec.containers.iter().map(|c| (c, false)))
        .map(|(c, is_init)| {
            let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            let mut keys: Vec<String> = requests
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect();
            keys.sort();
            let extended = requests
                .into_iter()
                .flatten()
                .filter(|(k, _)| is_dra_extended(k))
                .filter_map(|(k, q)| Some((k.clone(), i64::try_from(quantity::parse(&q.0)?).ok()?)))
                .filter(|(_, n)| *n > 0)
                .collect();
            ContainerRequests {
                name: c.name.clone(),
                short_lived: is_init && c.restart_policy.as_deref() != Some("Always"),
                keys,
                extended,
            }
        })
        .collect();
    if all.iter().all(|c| c.extended.is_empty()) {
        return Vec::new();
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_names_are_domain_qualified_or_implicit() {
        assert!(is_dra_extended("nvidia.com/gpu"));
        assert!(is_dra_extended(
            "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
        ));
        assert!(!is_dra_extended("cpu"));
        assert!(!is_dra_extended("hugepages-2Mi"));
        assert!(!is_dra_extended("kubernetes.io/something"));
    }
}
