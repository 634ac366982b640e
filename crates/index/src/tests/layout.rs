//! Node records and GPU states read from the layouts made when an
//! inventory changes (`layout`) against those made afresh from the
//! inventory and the holdings, the way every round made them before: after
//! every step of random sequences of
//! GPUNodes republished (GPUs added and removed, health, MIG, NVLink,
//! models), Nodes relabelled and cordoned, slices published and
//! withdrawn, interleaved with the pod, binding and claim steps of
//! `incremental`.

use std::collections::BTreeMap;

use super::incremental::{Rng, random_cluster, step};
use super::*;
use wasmgpu_contract::bits;

/// One GPU of a node record with the snapshot's tables resolved: model
/// and MIG profile by name, the rest as sent.
type Plain = (
    String,
    Option<(u32, String)>,
    String,
    wasmgpu_contract::types::Gpu,
);

/// The node records of `index`'s snapshot for the default policy, by node,
/// GPU by GPU with its UUID; every label the host keeps.
fn records(index: &Index) -> BTreeMap<String, (Vec<Plain>, BTreeMap<String, String>)> {
    let host = index.snapshot(DEFAULT_POLICY, 1, 0);
    let snapshot = &host.snapshot;
    snapshot
        .nodes
        .iter()
        .zip(&host.nodes)
        .map(|(node, kept)| {
            let gpus = node
                .gpus
                .iter()
                .zip(kept.uuids.iter())
                .map(|(gpu, uuid)| {
                    let mut gpu = gpu.clone();
                    let model = snapshot.models[gpu.model as usize].clone();
                    let mig = gpu
                        .mig
                        .map(|m| (m.parent, snapshot.mig_profiles[m.profile as usize].clone()));
                    gpu.model = 0;
                    if let Some(m) = &mut gpu.mig {
                        m.profile = 0;
                    }
                    (model, mig, uuid.clone(), gpu)
                })
                .collect();
            (node.name.clone(), (gpus, (*kept.labels).clone()))
        })
        .collect()
}

/// The same records made afresh from each candidate's inventory and the
/// holdings read now.
fn afresh(index: &Index) -> BTreeMap<String, (Vec<Plain>, BTreeMap<String, String>)> {
    let holdings = index.holdings();
    let mut records = BTreeMap::new();
    for (name, facts) in &index.name_to_node {
        let Some(inventory) = index.node_to_inventory.get(name) else {
            continue;
        };
        if !facts.schedulable() {
            continue;
        }
        let on_node = holdings.on_node(name);
        let use_of = |uuid: &str| {
            let held = on_node.gpu(uuid).unwrap_or_default();
            (held.exclusive, held.shared_mib, held.shared_owners)
        };
        let index_of: BTreeMap<&str, u32> = inventory
            .gpus
            .iter()
            .map(|g| (g.uuid.as_str(), g.index))
            .collect();
        let mut gpus = Vec::new();
        for gpu in inventory.gpus.iter() {
            let position = gpus.len() as u32;
            let (held, shared_mib, shared_owners) = use_of(&gpu.uuid);
            let held = held || inventory.unpublished.contains(&gpu.uuid);
            gpus.push((
                gpu.model.clone(),
                None,
                gpu.uuid.clone(),
                wasmgpu_contract::types::Gpu {
                    index: gpu.index,
                    model: 0,
                    memory_mib: gpu.memory_total_mib,
                    allocated_mib: if held {
                        gpu.memory_total_mib
                    } else {
                        shared_mib.min(gpu.memory_total_mib)
                    },
                    held,
                    shared_owners,
                    numa_node: gpu.numa_node,
                    nvlink: bits::nvlink_of(
                        gpu.nvlink_peers
                            .iter()
                            .filter_map(|p| index_of.get(p.as_str()).copied()),
                    ),
                    healthy: gpu.healthy,
                    mig: None,
                    published_by: inventory.publisher(&gpu.uuid),
                },
            ));
            for instance in &gpu.mig_instances {
                let (held, _, _) = use_of(&instance.uuid);
                gpus.push((
                    gpu.model.clone(),
                    Some((position, instance.profile.clone())),
                    instance.uuid.clone(),
                    wasmgpu_contract::types::Gpu {
                        index: gpu.index,
                        model: 0,
                        memory_mib: instance.memory_total_mib,
                        allocated_mib: if held { instance.memory_total_mib } else { 0 },
                        held,
                        shared_owners: 0,
                        numa_node: gpu.numa_node,
                        nvlink: 0,
                        healthy: gpu.healthy,
                        mig: Some(wasmgpu_contract::types::MigInstance {
                            parent: position,
                            profile: 0,
                        }),
                        published_by: inventory.publisher(&instance.uuid),
                    },
                ));
            }
        }
        let uuids: Vec<String> = gpus.iter().map(|g| g.2.clone()).collect();
        let (_, blocked) = inventory.counters.for_snapshot(&uuids, |uuid| {
            let (exclusive, _, shared_owners) = use_of(uuid);
            exclusive || shared_owners > 0
        });
        for (gpu, _) in gpus.iter_mut().zip(&blocked).filter(|(_, b)| **b) {
            gpu.3.held = true;
            gpu.3.allocated_mib = gpu.3.memory_mib;
        }
        records.insert(name.clone(), (gpus, (*facts.labels).clone()));
    }
    records
}

/// GPU states per node counted from each inventory GPU by GPU, as each
/// round counted them before they were read from the layouts; sorted.
fn states_afresh(index: &Index) -> Vec<(String, String, &'static str, u32)> {
    let holdings = index.holdings();
    let mut states: BTreeMap<(String, String, &'static str), u32> = BTreeMap::new();
    for (node, inventory) in &index.node_to_inventory {
        let on_node = holdings.on_node(node);
        for gpu in inventory.gpus.iter() {
            if inventory.unpublished.contains(&gpu.uuid) {
                continue;
            }
            let held = |uuid: &str| on_node.holds(uuid);
            let state = if !gpu.healthy {
                "unhealthy"
            } else if held(&gpu.uuid) || gpu.mig_instances.iter().any(|m| held(&m.uuid)) {
                "allocated"
            } else {
                "free"
            };
            *states
                .entry((node.clone(), gpu.model.clone(), state))
                .or_default() += 1;
        }
    }
    states
        .into_iter()
        .map(|((node, model, state), count)| (node, model, state, count))
        .collect()
}

/// A node step: `n0` or `n1` republished, relabelled or cordoned, or its
/// GPUNode deleted.
fn node_step(rng: &mut Rng, index: &mut Index) -> String {
    let name = *rng.pick(&["n0", "n1"]);
    match rng.below(10) {
        0..=5 => {
            let mut gpunode = gpunode(name).with_gpus(2 + rng.below(3) as u32);
            if rng.chance(30) {
                gpunode = gpunode.model("NVIDIA A100-SXM4-40GB", 40_960);
            }
            if rng.chance(50) {
                gpunode = gpunode.nvlinked();
            }
            if rng.chance(30) {
                gpunode = gpunode.unhealthy(rng.below(2) as u32);
            }
            if rng.chance(50) {
                const SPLITS: [&[(&str, u64)]; 2] = [
                    &[("3g.40gb", 40_000), ("3g.40gb", 40_000)],
                    &[("1g.10gb", 9_984)],
                ];
                let profiles = *rng.pick(&SPLITS);
                gpunode = gpunode.mig(1, profiles);
            }
            if rng.chance(20) {
                gpunode = gpunode.reversed();
            }
            index.apply_gpunode(&gpunode.build());
            format!("republish gpunode {name}")
        }
        6..=7 => {
            let zone = *rng.pick(&["a", "b"]);
            let mut node = node(name).label("zone", zone);
            if rng.chance(20) {
                node = node.cordoned();
            }
            index.apply_node(&node.build());
            format!("relabel node {name}")
        }
        8 => {
            index.delete_gpunode(name);
            format!("delete gpunode {name}")
        }
        _ => {
            let name = "n2";
            if rng.chance(60) {
                index.apply_resourceslice(&crate::dra::tests::h100_slice(
                    name,
                    1 + rng.below(3) as u32,
                ));
                "republish n2's slice".into()
            } else {
                let slice = crate::dra::tests::h100_slice(name, 2);
                index.delete_resourceslice(&slice.metadata.name.unwrap_or_default());
                "withdraw n2's slice".into()
            }
        }
    }
}

#[test]
fn records_laid_out_on_change_are_those_made_afresh_each_round() {
    let mut compared = 0;
    for seed in 1..=40u64 {
        let mut rng = Rng::seeded(seed);
        let mut index = random_cluster();
        let mut pods = BTreeMap::new();
        let mut done = Vec::new();
        for _ in 0..300 {
            done.push(if rng.chance(25) {
                node_step(&mut rng, &mut index)
            } else {
                step(&mut rng, &mut index, &mut pods)
            });
            for (name, inventory) in &index.node_to_inventory {
                assert_eq!(
                    inventory.layout,
                    inventory.layout(),
                    "seed {seed}: {name}'s layout is its inventory's, after {:?}",
                    &done[done.len().saturating_sub(5)..]
                );
            }
            let mut states: Vec<_> = index
                .gpu_states()
                .into_iter()
                .map(|s| (s.node, s.model, s.state, s.count))
                .collect();
            states.sort();
            assert_eq!(states, states_afresh(&index), "seed {seed}: GPU states");
            let (kept, fresh) = (records(&index), afresh(&index));
            compared += kept.values().map(|r| r.0.len()).sum::<usize>();
            assert_eq!(
                kept,
                fresh,
                "seed {seed}, after {} steps, the last: {:?}",
                done.len(),
                &done[done.len().saturating_sub(5)..]
            );
        }
    }
    // GPUs compared, not empty snapshots.
    assert!(compared > 10_000, "{compared}");
}
