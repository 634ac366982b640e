//! What the kubelet gives a container for its granted GPUs (pure): CDI
//! device names by default, or NVIDIA's `volume-mounts` list for nodes
//! without CDI. Never `NVIDIA_VISIBLE_DEVICES=all`.

use std::collections::HashMap;

use super::handoff::Grant;
use super::proto::{CdiDevice, ContainerAllocateResponse, Mount};
use wasmgpu_api::Sharing;

/// The CDI kind `nvidia-ctk cdi generate` names GPUs with.
pub const CDI_KIND: &str = "nvidia.com/gpu";
/// Where the `volume-mounts` strategy lists the devices in the container.
pub const VOLUME_MOUNTS_DIR: &str = "/var/run/nvidia-container-devices";

/// How the granted GPUs reach the container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Strategy {
    /// CDI device names `nvidia.com/gpu=<uuid>` (containerd ≥ 1.7, CRI-O ≥
    /// 1.23 with CDI enabled, and the toolkit's CDI spec on the node).
    #[default]
    Cdi,
    /// One mount of `/dev/null` per GPU under
    /// `/var/run/nvidia-container-devices/<uuid>`, read by the NVIDIA
    /// container runtime when `accept-nvidia-visible-devices-as-volume-mounts`
    /// is true.
    VolumeMounts,
}

/// How Allocate answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResponseOptions {
    /// How the GPUs reach the container.
    pub strategy: Strategy,
    /// Set `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` from the share for shared
    /// GPUs (only effective where an MPS control daemon serves the node).
    pub mps_memory_limit: bool,
}

/// The CDI name of a GPU.
pub fn cdi_name(uuid: &str) -> String {
    format!("{CDI_KIND}={uuid}")
}

/// The answer for one container's grant.
pub fn container_response(grant: &Grant, options: ResponseOptions) -> ContainerAllocateResponse {
    let mut uuids: Vec<&str> = Vec::new();
    for (uuid, _) in &grant.gpus {
        if !uuids.contains(&uuid.as_str()) {
            uuids.push(uuid);
        }
    }
    let mut response = ContainerAllocateResponse::default();
    match options.strategy {
        Strategy::Cdi => {
            response.cdi_devices = uuids
                .iter()
                .map(|uuid| CdiDevice {
                    name: cdi_name(uuid),
                })
                .collect();
        }
        Strategy::VolumeMounts => {
            response.envs = HashMap::from([(
                "NVIDIA_VISIBLE_DEVICES".to_string(),
                VOLUME_MOUNTS_DIR.to_string(),
            )]);
            response.mounts = uuids
                .iter()
                .map(|uuid| Mount {
                    container_path: format!("{VOLUME_MOUNTS_DIR}/{uuid}"),
                    host_path: "/dev/null".into(),
                    read_only: true,
                })
                .collect();
        }
    }
    if options.mps_memory_limit && grant.sharing == Sharing::Shared {
        // Ordinals as the container sees its GPUs: in the order given.
        let limits = grant
            .gpus
            .iter()
            .enumerate()
            .map(|(ordinal, (_, mib))| format!("{ordinal}={mib}M"))
            .collect::<Vec<_>>()
            .join(",");
        response
            .envs
            .insert("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), limits);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deviceplugin::handoff::PodRef;

    fn grant(sharing: Sharing, gpus: &[(&str, u64)]) -> Grant {
        Grant {
            pod: PodRef {
                namespace: "ml".into(),
                name: "a".into(),
                uid: "u".into(),
            },
            ids: gpus.iter().map(|(u, _)| u.to_string()).collect(),
            gpus: gpus.iter().map(|(u, m)| (u.to_string(), *m)).collect(),
            sharing,
        }
    }

    #[test]
    fn cdi_names_the_granted_gpus_and_sets_no_visible_devices() {
        let response = container_response(
            &grant(Sharing::Exclusive, &[("GPU-a", 80), ("GPU-b", 80)]),
            ResponseOptions::default(),
        );
        let names: Vec<&str> = response
            .cdi_devices
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(names, ["nvidia.com/gpu=GPU-a", "nvidia.com/gpu=GPU-b"]);
        assert!(response.envs.is_empty(), "{:?}", response.envs);
        assert!(response.mounts.is_empty());
    }

    #[test]
    fn volume_mounts_list_each_gpu() {
        let response = container_response(
            &grant(Sharing::Exclusive, &[("GPU-a", 80)]),
            ResponseOptions {
                strategy: Strategy::VolumeMounts,
                mps_memory_limit: false,
            },
        );
        assert_eq!(
            response.mounts[0].container_path,
            "/var/run/nvidia-container-devices/GPU-a"
        );
        assert_eq!(
            response.envs["NVIDIA_VISIBLE_DEVICES"],
            "/var/run/nvidia-container-devices"
        );
        assert!(response.cdi_devices.is_empty());
    }

    #[test]
    fn mps_limit_comes_from_the_share_of_shared_gpus_only() {
        let options = ResponseOptions {
            strategy: Strategy::Cdi,
            mps_memory_limit: true,
        };
        let shared = container_response(&grant(Sharing::Shared, &[("GPU-a", 8192)]), options);
        assert_eq!(shared.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=8192M");
        let exclusive = container_response(&grant(Sharing::Exclusive, &[("GPU-a", 80)]), options);
        assert!(exclusive.envs.is_empty());
    }
}
