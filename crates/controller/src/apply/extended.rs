//! The claims of pods asking for extended resources a DeviceClass maps
//! (KEP-5004), made as kube-scheduler makes them: the claim first (or the
//! one made before a restart, found again), then
//! `pod.status.extendedResourceClaimStatus` naming it. From then on the pod
//! is a DRA pod like any other ([`wasmgpu_index::ExtendedClaim`]).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, Patch, PostParams};
use serde_json::json;

use super::{Applier, ApplyError, merge_params};
use crate::events::{Reason, pod_ref};
use wasmgpu_index::ExtendedClaim;

impl Applier {
    /// Makes (or finds made) each pod's extended-resource claim and records
    /// it in the pod's status. A failure is logged; the next round tries
    /// again (a claim made meanwhile is found by its annotation and owner).
    pub async fn make_extended_claims(&self, claims: Vec<ExtendedClaim>) {
        for claim in claims {
            if let Err(error) = self.make_extended_claim(&claim).await {
                tracing::warn!(pod = %claim.pod, error_kind = error.kind(), %error, "Cannot make the claim for the pod's extended resources; retrying next round");
            }
        }
    }

    async fn make_extended_claim(&self, wanted: &ExtendedClaim) -> Result<(), ApplyError> {
        let writer = &self.writer;
        let pod = &wanted.pod;
        let (name, made) = match &wanted.made {
            Some(name) => (name.clone(), false),
            None => {
                let claims: Api<ResourceClaim> =
                    Api::namespaced(writer.client.clone(), &pod.namespace);
                let created = writer
                    .timed(
                        "extended claim",
                        claims.create(&PostParams::default(), &wanted.claim),
                    )
                    .await?;
                writer.shared.index().apply_resourceclaim(&created);
                (created.metadata.name.unwrap_or_default(), true)
            }
        };
        let patch = json!({
            "metadata": {"uid": wanted.uid},
            "status": {"extendedResourceClaimStatus": {
                "requestMappings": wanted.mappings,
                "resourceClaimName": name,
            }},
        });
        let pods: Api<Pod> = Api::namespaced(writer.client.clone(), &pod.namespace);
        let written = writer
            .timed(
                "extended claim status",
                pods.patch_status(&pod.name, &merge_params(), &Patch::Merge(&patch)),
            )
            .await?;
        writer.shared.index().apply_pod(&written);
        tracing::info!(%pod, claim = %name, made, "Extended resources asked through a ResourceClaim");
        writer.events.normal(
            pod_ref(pod, Some(&wanted.uid)),
            Reason::ExtendedResourceClaim,
            "Claim",
            format!(
                "ResourceClaim {name} {} for the pod's extended resources ({}); recorded in status.extendedResourceClaimStatus",
                if made { "made" } else { "found" },
                wanted
                    .mappings
                    .iter()
                    .map(|m| format!("{} {} → {}", m.container_name, m.resource_name, m.request_name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        Ok(())
    }
}
