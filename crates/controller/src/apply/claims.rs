//! A DRA pod's claims, written before its binding as kube-scheduler writes
//! them (PreBind): add the finalizer `resource.kubernetes.io/delete-protection`;
//! then one status update setting `allocation` and adding the pod to
//! `reservedFor`. The writes start from the claim as the watch showed it
//! when the round decided (no read), and carry its `resourceVersion`, so a
//! claim another writer changed meanwhile is never overwritten: the server
//! answers 409, and the writer reads the claim and tries once more from
//! what it finds.
//!
//! ```text
//!  claim as watched (else GET)
//!     │ ─ recreated / deleting / allocated by another ─▶ NotBound
//!     │                                   (the GPUs are free again)
//!     ├─ finalizer missing ─▶ update (resourceVersion)
//!     ├─ a device another claim holds by now (the watch) ─▶ NotBound
//!     └─ status: allocation (ours, or already ours) + reservedFor ∪ pod
//!          409 ─▶ GET, once more from the top (gone ─▶ NotBound)
//!          other 4xx ─▶ NotBound · timeout, 5xx ─▶ Unknown (sent again:
//!          it finds its own allocation and goes on)
//! ```
//!
//! A crash after the status update leaves the claim allocated and reserved
//! for the pod: the next round pins the pod to that node and binds it. If
//! the binding then certainly fails (the pod is gone), [`Writer::undo_claims`]
//! takes the pod out of `reservedFor` and, when no one else is reserved,
//! clears the allocation it wrote, so no claim stays allocated for a pod that
//! will not run.

use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimConsumerReference};
use kube::api::{Api, PostParams};
use wasmgpu_api::CLAIM_DELETE_PROTECTION;
use wasmgpu_index::{ClaimWrite, PendingBinding};

use super::{ApplyError, Outcome, Writer};

// === impl Writer ===

impl Writer {
    /// Writes every claim of a DRA pod's binding; `Err` with what became of
    /// the binding when one cannot be written.
    pub(super) async fn write_claims(&self, binding: &PendingBinding) -> Result<(), Outcome> {
        for write in &binding.claims {
            self.write_claim(binding, write).await?;
        }
        Ok(())
    }

    /// One claim's writes. The first try starts from the copy the decision
    /// saw (no read); a conflict (409: the claim changed since) reads the
    /// claim and tries once more from what the server has, as
    /// kube-scheduler's PreBind does.
    async fn write_claim(
        &self,
        binding: &PendingBinding,
        write: &ClaimWrite,
    ) -> Result<(), Outcome> {
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &write.claim.namespace);
        let seen = write
            .seen
            .as_deref()
            .filter(|c| c.metadata.resource_version.is_some());
        if let Some(seen) = seen {
            match self.write_from(&api, seen.clone(), binding, write).await {
                Err(Written::Conflict(_)) => {}
                other => return other.map_err(Written::outcome),
            }
        }
        let claim = match self.timed("claim", api.get_opt(&write.claim.name)).await {
            Ok(Some(claim)) => claim,
            Ok(None) => {
                return Err(Outcome::NotBound(format!(
                    "ResourceClaim {} is gone",
                    write.claim
                )));
            }
            Err(error) => return Err(unknown(&write.claim, &error)),
        };
        self.write_from(&api, claim, binding, write)
            .await
            .map_err(Written::outcome)
    }

    /// The finalizer (if missing) and the status update, from `claim` as
    /// last known; each write carries its `resourceVersion`.
    async fn write_from(
        &self,
        api: &Api<ResourceClaim>,
        mut claim: ResourceClaim,
        binding: &PendingBinding,
        write: &ClaimWrite,
    ) -> Result<(), Written> {
        let name = &write.claim.name;
        still_writable(&claim, write).map_err(|e| Written::Failed(Outcome::NotBound(e)))?;
        let finalizers = claim.metadata.finalizers.get_or_insert_default();
        if write.allocation.is_some() && !finalizers.iter().any(|f| f == CLAIM_DELETE_PROTECTION) {
            finalizers.push(CLAIM_DELETE_PROTECTION.to_string());
            claim = self
                .timed("claim", api.replace(name, &PostParams::default(), &claim))
                .await
                .map_err(|e| Written::of(&write.claim, &e))?;
        }
        let allocating = claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .is_none();
        if allocating {
            let taken = self.shared.index().taken_meanwhile(write);
            if let Some(reason) = taken {
                return Err(Written::Failed(Outcome::NotBound(reason)));
            }
        }
        reserve(&mut claim, write, binding);
        self.timed(
            "claim-status",
            api.replace_status(name, &PostParams::default(), &claim),
        )
        .await
        .map_err(|e| Written::of(&write.claim, &e))?;
        tracing::debug!(pod = %binding.pod, claim = %write.claim, allocated = write.allocation.is_some(), "Claim written");
        Ok(())
    }

    /// Takes the pod out of its claims' `reservedFor` after its binding
    /// certainly failed, and clears the allocations this binding wrote that
    /// no one else is reserved for. Best effort: what fails is logged (the
    /// resourceclaim controller of kube-controller-manager does the same
    /// for pods that are gone).
    pub(super) async fn undo_claims(&self, binding: &PendingBinding) {
        for write in &binding.claims {
            if let Err(error) = self.undo_claim(binding, write).await {
                tracing::warn!(pod = %binding.pod, claim = %write.claim, error_kind = error.kind(), %error, "Cannot release the claim of a pod that was not bound");
            }
        }
    }

    async fn undo_claim(
        &self,
        binding: &PendingBinding,
        write: &ClaimWrite,
    ) -> Result<(), ApplyError> {
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &write.claim.namespace);
        let Some(mut claim) = self.timed("claim", api.get_opt(&write.claim.name)).await? else {
            return Ok(());
        };
        if claim.metadata.uid.as_deref() != Some(write.uid.as_str()) {
            return Ok(());
        }
        let Some(status) = claim.status.as_mut() else {
            return Ok(());
        };
        let reserved = status.reserved_for.get_or_insert_default();
        let before = reserved.len();
        reserved.retain(|r| r.uid != binding.uid);
        let ours = match (&write.allocation, &status.allocation) {
            (Some(ours), Some(theirs)) => same_devices(ours, theirs),
            _ => false,
        };
        let clear = ours && reserved.is_empty();
        if reserved.len() == before && !clear {
            return Ok(());
        }
        if clear {
            status.allocation = None;
            status.reserved_for = None;
            status.devices = None;
        }
        let claim = self
            .timed(
                "claim-status",
                api.replace_status(&write.claim.name, &PostParams::default(), &claim),
            )
            .await?;
        if clear {
            let mut claim = claim;
            if let Some(finalizers) = claim.metadata.finalizers.as_mut() {
                finalizers.retain(|f| f != CLAIM_DELETE_PROTECTION);
            }
            self.timed(
                "claim",
                api.replace(&write.claim.name, &PostParams::default(), &claim),
            )
            .await?;
        }
        tracing::info!(pod = %binding.pod, claim = %write.claim, deallocated = clear, "Released the claim of a pod that was not bound");
        Ok(())
    }
}

/// Whether two allocations hold the same devices for the same requests.
fn same_devices(
    a: &k8s_openapi::api::resource::v1::AllocationResult,
    b: &k8s_openapi::api::resource::v1::AllocationResult,
) -> bool {
    let results = |x: &k8s_openapi::api::resource::v1::AllocationResult| {
        let mut r: Vec<(String, String, String, String)> = x
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .map(|r| {
                (
                    r.request.clone(),
                    r.driver.clone(),
                    r.pool.clone(),
                    r.device.clone(),
                )
            })
            .collect();
        r.sort();
        r
    };
    results(a) == results(b)
}

/// Why a claim's write did not go through.
enum Written {
    /// The server refused it for a changed claim (409): read the claim and
    /// decide again.
    Conflict(Outcome),
    /// What became of the binding.
    Failed(Outcome),
}

impl Written {
    /// A write refused by the server (4xx) did not happen: the binding is
    /// decided again. Anything else may have.
    fn of(claim: &wasmgpu_index::ObjectKey, error: &ApplyError) -> Self {
        match error {
            ApplyError::Api(kube::Error::Api(status)) if (400..500).contains(&status.code) => {
                let refused = Outcome::NotBound(format!("writing ResourceClaim {claim}: {error}"));
                if status.code == 409 {
                    Self::Conflict(refused)
                } else {
                    Self::Failed(refused)
                }
            }
            _ => Self::Failed(unknown(claim, error)),
        }
    }

    fn outcome(self) -> Outcome {
        match self {
            Self::Conflict(outcome) | Self::Failed(outcome) => outcome,
        }
    }
}

fn unknown(claim: &wasmgpu_index::ObjectKey, error: &ApplyError) -> Outcome {
    Outcome::Unknown(format!("writing ResourceClaim {claim}: {error}"))
}
/// Whether `claim` is still the one decided on and allocated as `write`
/// expects: same UID, not being deleted, not allocated otherwise meanwhile.
/// The error says why the binding cannot go on.
fn still_writable(claim: &ResourceClaim, write: &ClaimWrite) -> Result<(), String> {
    if claim.metadata.uid.as_deref() != Some(write.uid.as_str()) {
        return Err(format!("ResourceClaim {} was recreated", write.claim));
    }
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(format!("ResourceClaim {} is being deleted", write.claim));
    }
    let current = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
    match (&write.allocation, current) {
        (Some(ours), Some(theirs)) if !same_devices(ours, theirs) => {
            return Err(format!(
                "ResourceClaim {} was allocated meanwhile by another writer",
                write.claim
            ));
        }
        (None, None) => {
            return Err(format!(
                "ResourceClaim {} is no longer allocated",
                write.claim
            ));
        }
        _ => {}
    }
    Ok(())
}

/// Writes `write`'s allocation (unless the claim has one) and reserves the
/// claim for `binding`'s pod, into `claim`'s status.
fn reserve(claim: &mut ResourceClaim, write: &ClaimWrite, binding: &PendingBinding) {
    let status = claim.status.get_or_insert_default();
    if status.allocation.is_none() {
        status.allocation = write.allocation.clone();
    }
    let reserved = status.reserved_for.get_or_insert_default();
    if !reserved.iter().any(|r| r.uid == binding.uid) {
        reserved.push(ResourceClaimConsumerReference {
            api_group: None,
            resource: "pods".into(),
            name: binding.pod.name.clone(),
            uid: binding.uid.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::resource::v1::{
        AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult,
        ResourceClaimStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use wasmgpu_api::{PodAllocation, PolicyRef};
    use wasmgpu_index::ObjectKey;

    fn allocation(device: &str) -> AllocationResult {
        AllocationResult {
            devices: Some(DeviceAllocationResult {
                results: Some(vec![DeviceRequestAllocationResult {
                    request: "gpu".into(),
                    driver: "gpu.nvidia.com".into(),
                    pool: "node-a".into(),
                    device: device.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn claim(uid: &str, allocated: Option<&str>) -> ResourceClaim {
        ResourceClaim {
            metadata: ObjectMeta {
                name: Some("c".into()),
                namespace: Some("ml".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            status: allocated.map(|d| ResourceClaimStatus {
                allocation: Some(allocation(d)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn write(allocating: Option<&str>) -> ClaimWrite {
        ClaimWrite {
            claim: ObjectKey::new("ml", "c"),
            uid: "u1".into(),
            allocation: allocating.map(allocation),
            seen: None,
        }
    }

    #[test]
    fn a_claim_changed_since_the_decision_stops_the_binding_with_the_reason() {
        assert_eq!(
            still_writable(&claim("u1", None), &write(Some("gpu-0"))),
            Ok(())
        );
        assert_eq!(
            still_writable(&claim("u1", Some("gpu-0")), &write(Some("gpu-0"))),
            Ok(()),
            "our own allocation, written before a crash"
        );
        assert_eq!(
            still_writable(&claim("u1", Some("gpu-0")), &write(None)),
            Ok(())
        );
        let refused = |claim: ResourceClaim, write: ClaimWrite| {
            still_writable(&claim, &write).expect_err("refused")
        };
        assert!(refused(claim("u2", None), write(Some("gpu-0"))).contains("recreated"));
        let mut deleting = claim("u1", None);
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(refused(deleting, write(Some("gpu-0"))).contains("being deleted"));
        assert!(
            refused(claim("u1", Some("gpu-1")), write(Some("gpu-0")))
                .contains("allocated meanwhile by another writer")
        );
        assert!(refused(claim("u1", None), write(None)).contains("no longer allocated"));
    }

    #[test]
    fn reserving_keeps_an_allocation_already_there_and_adds_the_pod_once() {
        let binding = PendingBinding {
            pod: ObjectKey::new("ml", "p"),
            uid: "pod-uid".into(),
            allocation: PodAllocation {
                resource: String::new(),
                node: "node-a".into(),
                sharing: Default::default(),
                devices: vec![],
                policy: PolicyRef {
                    name: "binpack".into(),
                    digest: String::new(),
                },
            },
            claims: vec![],
        };
        let mut c = claim("u1", Some("gpu-1"));
        reserve(&mut c, &write(Some("gpu-0")), &binding);
        reserve(&mut c, &write(Some("gpu-0")), &binding);
        let status = c.status.expect("status");
        assert!(same_devices(
            status.allocation.as_ref().unwrap(),
            &allocation("gpu-1")
        ));
        let reserved = status.reserved_for.expect("reserved");
        assert_eq!(reserved.len(), 1);
        assert_eq!(
            (reserved[0].name.as_str(), reserved[0].uid.as_str()),
            ("p", "pod-uid")
        );
        let mut fresh = claim("u1", None);
        reserve(&mut fresh, &write(Some("gpu-0")), &binding);
        assert!(same_devices(
            fresh.status.unwrap().allocation.as_ref().unwrap(),
            &allocation("gpu-0")
        ));
    }
}
