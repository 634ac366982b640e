//! The devices the plugin advertises (pure): one per GPU for exclusive use,
//! replicas `<uuid>::<k>` of each GPU for shared use, and one per MIG
//! instance (its `MIG-…` UUID).
//!
//! ```text
//!  GPU-a (81559 MiB, healthy)   ──▶ GPU-a, GPU-a::0 … GPU-a::78   Healthy
//!  GPU-b (81559 MiB, XID 79)    ──▶ GPU-b, GPU-b::0 … GPU-b::78   Unhealthy
//!  GPU-c (MIG: 2 instances)     ──▶ GPU-c, GPU-c::0 …, MIG-c0, MIG-c1
//! ```
//!
//! The kubelet only counts; the controller decides which pod gets which
//! GPU, and the plugin steers the kubelet to those IDs
//! ([`super::handoff`]). A GPU is therefore offered both whole and as
//! replicas: the controller never lets an exclusive and a shared pod meet on
//! one GPU, and the replicas are as many as the smallest share fits.

use super::proto::{self, Device, NumaNode, TopologyInfo};
use wasmgpu_api::{GPUNodeStatus, GpuInfo, Sharing};

/// Separates a GPU's UUID from the replica number in a shared device ID.
pub const REPLICA_SEPARATOR: &str = "::";

/// How the GPUs are advertised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceOptions {
    /// The smallest share of a shared GPU, MiB: a GPU gets
    /// `memory / min_share_mib` replicas (at least one).
    pub min_share_mib: u64,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        Self {
            min_share_mib: 1024,
        }
    }
}

/// The device ID of `uuid` held whole.
pub fn exclusive_id(uuid: &str) -> String {
    uuid.to_owned()
}

/// The device ID of replica `k` of the shared GPU `uuid`.
pub fn replica_id(uuid: &str, k: u64) -> String {
    format!("{uuid}{REPLICA_SEPARATOR}{k}")
}

/// The GPU and the way it is held that a device ID stands for.
pub fn parse_id(id: &str) -> (&str, Sharing) {
    match id.split_once(REPLICA_SEPARATOR) {
        Some((uuid, _)) => (uuid, Sharing::Shared),
        None => (id, Sharing::Exclusive),
    }
}

/// How many replicas a GPU is advertised with.
pub fn replicas(gpu: &GpuInfo, options: DeviceOptions) -> u64 {
    (gpu.memory_total_mib / options.min_share_mib.max(1)).max(1)
}

/// The devices of a node's GPUs, in GPU order: each GPU whole, then its
/// replicas, then its MIG instances, all with the GPU's health and NUMA
/// node. A MIG instance is handed over by its UUID like a whole GPU (CDI
/// `nvidia.com/gpu=MIG-…`); the controller never hands out a GPU and its
/// instances together.
pub fn advertised(status: &GPUNodeStatus, options: DeviceOptions) -> Vec<Device> {
    let mut devices = Vec::new();
    for gpu in &status.gpus {
        let health = if gpu.healthy {
            proto::HEALTHY
        } else {
            proto::UNHEALTHY
        };
        let topology = gpu.numa_node.map(|node| TopologyInfo {
            nodes: vec![NumaNode { id: node.into() }],
        });
        let device = |id: String| Device {
            id,
            health: health.to_owned(),
            topology: topology.clone(),
        };
        devices.push(device(exclusive_id(&gpu.uuid)));
        for k in 0..replicas(gpu, options) {
            devices.push(device(replica_id(&gpu.uuid, k)));
        }
        for instance in &gpu.mig_instances {
            devices.push(device(exclusive_id(&instance.uuid)));
        }
    }
    devices
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(uuid: &str, mib: u64, healthy: bool) -> GpuInfo {
        GpuInfo {
            uuid: uuid.into(),
            memory_total_mib: mib,
            healthy,
            numa_node: Some(1),
            ..Default::default()
        }
    }

    #[test]
    fn each_gpu_is_offered_whole_and_as_replicas_with_its_health() {
        let status = GPUNodeStatus {
            gpus: vec![gpu("GPU-a", 4096, true), gpu("GPU-b", 2500, false)],
            ..Default::default()
        };
        let devices = advertised(&status, DeviceOptions::default());
        let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "GPU-a", "GPU-a::0", "GPU-a::1", "GPU-a::2", "GPU-a::3", "GPU-b", "GPU-b::0",
                "GPU-b::1"
            ]
        );
        assert!(devices[..5].iter().all(|d| d.health == proto::HEALTHY));
        assert!(devices[5..].iter().all(|d| d.health == proto::UNHEALTHY));
        assert_eq!(devices[0].topology.as_ref().unwrap().nodes[0].id, 1);
    }

    #[test]
    fn mig_instances_are_offered_by_their_uuid_with_their_gpus_health() {
        let mut parent = gpu("GPU-c", 2048, false);
        parent.mig_instances = ["MIG-c0", "MIG-c1"]
            .iter()
            .map(|uuid| wasmgpu_api::MigInstanceInfo {
                uuid: uuid.to_string(),
                profile: "1g.10gb".into(),
                memory_total_mib: 9728,
                ..Default::default()
            })
            .collect();
        let status = GPUNodeStatus {
            gpus: vec![parent],
            ..Default::default()
        };
        let devices = advertised(&status, DeviceOptions::default());
        let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["GPU-c", "GPU-c::0", "GPU-c::1", "MIG-c0", "MIG-c1"]);
        assert!(devices.iter().all(|d| d.health == proto::UNHEALTHY));
        assert_eq!(parse_id("MIG-c1"), ("MIG-c1", Sharing::Exclusive));
    }

    #[test]
    fn a_gpu_smaller_than_the_smallest_share_still_has_one_replica() {
        let options = DeviceOptions {
            min_share_mib: 8192,
        };
        assert_eq!(replicas(&gpu("GPU-a", 4096, true), options), 1);
        assert_eq!(replicas(&gpu("GPU-a", 81559, true), options), 9);
    }

    #[test]
    fn ids_parse_back_to_their_gpu() {
        assert_eq!(parse_id("GPU-a"), ("GPU-a", Sharing::Exclusive));
        assert_eq!(
            parse_id(&replica_id("GPU-a", 7)),
            ("GPU-a", Sharing::Shared)
        );
    }
}
