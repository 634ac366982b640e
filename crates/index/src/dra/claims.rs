//! What the index keeps of ResourceClaims and DeviceClasses.

use std::sync::Arc;

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceClassConfiguration, ResourceClaim};

use super::cel::{self, Selector};
use super::pools::DeviceId;

/// A ResourceClaim as watched (shared with the writes decided on it), and
/// the devices its allocation holds.
#[derive(Clone, Debug)]
pub(crate) struct ClaimFacts {
    pub claim: Arc<ResourceClaim>,
    /// Every allocated device but those with `adminAccess`.
    pub held: Vec<DeviceId>,
}

impl ClaimFacts {
    pub fn of(claim: &ResourceClaim) -> Self {
        Self {
            held: allocated_devices(claim),
            claim: Arc::new(claim.clone()),
        }
    }

    pub fn uid(&self) -> &str {
        self.claim.metadata.uid.as_deref().unwrap_or("")
    }

    pub fn allocated(&self) -> bool {
        self.claim
            .status
            .as_ref()
            .is_some_and(|s| s.allocation.is_some())
    }

    /// Where an allocated claim's devices are (`allocation.nodeSelector`).
    pub fn node_selector(&self) -> Option<&NodeSelector> {
        self.claim
            .status
            .as_ref()?
            .allocation
            .as_ref()?
            .node_selector
            .as_ref()
    }

    /// The UIDs of the pods it is reserved for.
    pub fn reserved_for(&self) -> impl Iterator<Item = &str> {
        self.claim
            .status
            .iter()
            .flat_map(|s| s.reserved_for.iter().flatten())
            .map(|r| r.uid.as_str())
    }

    pub fn deleting(&self) -> bool {
        self.claim.metadata.deletion_timestamp.is_some()
    }
}

/// The devices a claim's allocation holds: every result but those with
/// `adminAccess` (which monitor a device without holding it).
fn allocated_devices(claim: &ResourceClaim) -> Vec<DeviceId> {
    let results = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref());
    results
        .into_iter()
        .flatten()
        .filter(|r| r.admin_access != Some(true))
        .map(|r| DeviceId {
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
        })
        .collect()
}

/// A DeviceClass: its selectors compiled (or why one does not compile),
/// its configuration copied into allocations.
#[derive(Clone, Debug)]
pub(crate) struct ClassFacts {
    pub selectors: Vec<Result<Selector, (String, String)>>,
    pub config: Vec<DeviceClassConfiguration>,
    /// `spec.extendedResourceName`: the extended resource (such as
    /// `nvidia.com/gpu`) a pod may ask for to get devices of this class.
    pub extended_resource_name: Option<String>,
}

impl ClassFacts {
    pub fn of(class: &DeviceClass) -> Self {
        let spec = class.spec.as_ref();
        let selectors = spec
            .and_then(|s| s.selectors.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|s| s.cel.as_ref())
            .map(|c| cel::compile(&c.expression).map_err(|e| (c.expression.clone(), e)))
            .collect();
        Self {
            selectors,
            config: spec.and_then(|s| s.config.clone()).unwrap_or_default(),
            extended_resource_name: spec
                .and_then(|s| s.extended_resource_name.clone())
                .filter(|n| !n.is_empty()),
        }
    }
}
