//! The samples under `deploy/samples/` are valid, and every sample pod would
//! wait for a policy on a node with eight H100s.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus, Pod};
use serde::Deserialize;
use serde_json::Value;
use wasmgpu::api::{GPUNode, GPUNodeSpec, GPUNodeStatus, GPUResource, GpuInfo};
use wasmgpu::index::Index;

const NAMESPACE: &str = "wasmgpu-samples";

/// Every document of every YAML file in `deploy/samples/`, except the
/// kustomization.
fn documents() -> Vec<Value> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/samples");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("deploy/samples")
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    paths.sort();
    paths
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            serde_norway::Deserializer::from_str(&text)
                .map(|doc| {
                    Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn gpu_node() -> (Node, GPUNode) {
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "gpu-node-1" },
    }))
    .unwrap();
    let node = Node {
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..node
    };
    let mut gpunode = GPUNode::new("gpu-node-1", GPUNodeSpec {});
    gpunode.status = Some(GPUNodeStatus {
        gpus: (0..8)
            .map(|index| GpuInfo {
                uuid: format!("GPU-{index}"),
                index,
                model: "NVIDIA H100 80GB HBM3".into(),
                memory_total_mib: 81559,
                healthy: true,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    });
    (node, gpunode)
}

#[test]
fn samples_are_valid_and_their_pods_wait_for_gpus() {
    let mut index = Index::new("binpack");
    let (node, gpunode) = gpu_node();
    index.apply_node(&node);
    index.apply_gpunode(&gpunode);
    let (mut resources, mut pods, mut pod_objects) = (0, Vec::new(), Vec::new());
    for doc in documents() {
        match doc["kind"].as_str() {
            Some("GPUResource") => {
                let mut resource: GPUResource = serde_json::from_value(doc).expect("a GPUResource");
                resource.spec.check().expect("a valid spec");
                resource.metadata.namespace = Some(NAMESPACE.into());
                index.apply_gpuresource(&resource);
                resources += 1;
            }
            Some("Pod") => {
                let mut pod: Pod = serde_json::from_value(doc).expect("a Pod");
                pod.metadata.namespace = Some(NAMESPACE.into());
                pods.push(format!(
                    "{NAMESPACE}/{}",
                    pod.metadata.name.clone().unwrap()
                ));
                pod_objects.push(pod);
            }
            Some("Namespace") => {}
            other => panic!("unexpected kind {other:?}"),
        }
    }
    index.reset_pods(&pod_objects);
    assert_eq!(resources, 3);
    assert!(index.problems().is_empty(), "{:?}", index.problems());
    let mut waiting: Vec<String> = index
        .snapshots(1, 0)
        .values()
        .flat_map(|s| s.snapshot.pending.iter().map(|r| r.pod.clone()))
        .collect();
    waiting.sort();
    pods.sort();
    assert_eq!(waiting, pods);
}
