//! Index tests: small chainable builders for the objects watches deliver,
//! then `apply_*` and assertions on what comes out.

mod dra;
mod dra_claims;
mod eligibility;
mod gangs;
mod holdings;
mod incremental;
mod layout;
mod ledger;
mod problems;
mod snapshot;
mod tenants;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Index;
use wasmgpu_api::{GPUNode, GPUNodeSpec, PolicyRef, Sharing};
use wasmgpu_contract::types::Snapshot;

pub(super) use crate::testing::*;

/// An index whose pods have been listed (empty), so ledgers are judged.
pub(super) fn index() -> Index {
    let mut index = Index::new(DEFAULT_POLICY);
    index.reset_pods(&[]);
    index
}

/// Adds a Ready node named `name` with `gpus` H100s.
pub(super) fn add_gpu_node(index: &mut Index, name: &str, gpus: u32) {
    index.apply_node(&node(name).build());
    index.apply_gpunode(&gpunode(name).with_gpus(gpus).build());
}

/// The names of a request's eligible nodes in a snapshot.
pub(super) fn eligible_names(snapshot: &Snapshot, pod: &str) -> Vec<String> {
    let request = snapshot
        .pending
        .iter()
        .find(|r| r.pod == pod)
        .unwrap_or_else(|| panic!("{pod} is not pending in {snapshot:#?}"));
    wasmgpu_contract::bits::indices(&snapshot.eligible_sets[request.eligible_set as usize])
        .map(|i| snapshot.nodes[i as usize].name.clone())
        .collect()
}

/// The snapshot of the default policy.
pub(super) fn default_snapshot(index: &Index) -> Snapshot {
    index.snapshot(DEFAULT_POLICY, 1, 0).snapshot
}

/// The snapshot of the default policy with what the host keeps (labels,
/// UUIDs).
pub(super) fn default_host(index: &Index) -> wasmgpu_contract::HostSnapshot {
    index.snapshot(DEFAULT_POLICY, 1, 0)
}

/// The GPU whose UUID is `uuid` in a host snapshot.
pub(super) fn gpu_by_uuid<'a>(
    host: &'a wasmgpu_contract::HostSnapshot,
    uuid: &str,
) -> &'a wasmgpu_contract::types::Gpu {
    host.nodes
        .iter()
        .zip(&host.snapshot.nodes)
        .find_map(|(names, node)| {
            let g = names.uuids.iter().position(|u| u == uuid)?;
            Some(&node.gpus[g])
        })
        .unwrap_or_else(|| panic!("no GPU {uuid}"))
}

/// The pod holding GPU `uuid` exclusively, as the holdings read it.
pub(super) fn holder(index: &Index, uuid: &str) -> Option<String> {
    let holdings = index.holdings();
    let gpus = holdings.gpus();
    let (node, _) = gpus.keys().find(|(_, u)| *u == uuid)?;
    let owner = holdings.exclusive_owner(node, uuid);
    assert_eq!(owner.is_some(), gpus[&(*node, uuid)].exclusive);
    owner.map(ToString::to_string)
}
