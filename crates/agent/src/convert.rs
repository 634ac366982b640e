//! The pure conversion from what a source read to a `GPUNode` status.
//!
//! ```text
//!  Reading (raw facts) ─┐
//!  Faults (events)  ────┼─▶ to_status ─▶ GPUNodeStatus
//!  HealthRules ─────────┘     NVLink: remote PCI bus id ─▶ peer UUID
//!                             memory: bytes ─▶ MiB
//!                             health: first critical event, or a read fault
//!                             MIG instances: copied, sharing their GPU's health
//! ```
//!
//! A MIG instance has no health of its own: NVML reports critical events for
//! the GPU, and an instance of an unhealthy GPU is unhealthy (the controller
//! offers no instance of a GPU published with `healthy: false`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::health::{self, Faults, HealthRules};
use super::source::{RawGpu, Reading};
use wasmgpu_api::{GPUNodeStatus, GpuInfo, MigInstanceInfo, conditions};

/// `Ready` reason: the source was read.
pub const REASON_READ: &str = "GPUsRead";
/// `Ready` reason: the last read failed; the GPUs are those of the last good read.
pub const REASON_READ_FAILED: &str = "ReadFailed";
/// `GPUsHealthy` reason: every GPU is healthy.
pub const REASON_ALL_HEALTHY: &str = "AllHealthy";
/// `GPUsHealthy` reason: at least one GPU is unhealthy.
pub const REASON_UNHEALTHY: &str = "Unhealthy";
/// `GPUsHealthy` reason: the node reports no GPU.
pub const REASON_NO_GPUS: &str = "NoGPUs";

const MIB: u64 = 1024 * 1024;

/// What the agent knows besides the reading itself.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// The source, for the `Ready` message (`NVML`, `inventory FILE`).
    pub source: &'a str,
    /// Why the latest read failed, when it did (`reading` is then the last good one).
    pub read_error: Option<&'a str>,
    /// Which events are critical.
    pub rules: &'a HealthRules,
    /// Faults seen through the source's events.
    pub faults: &'a Faults,
    /// Stamped on conditions that change (the publisher keeps the earlier
    /// time of conditions that did not).
    pub now: Timestamp,
}

/// The status to publish for `reading`; `lastUpdated` is left for the publisher.
pub fn to_status(reading: &Reading, cx: Context<'_>) -> GPUNodeStatus {
    let peers = nvlink_peers(&reading.gpus);
    let mut gpus: Vec<GpuInfo> = reading
        .gpus
        .iter()
        .map(|raw| {
            let mut info = gpu_info(raw, cx);
            if let Some(peers) = peers.get(raw.uuid.as_str()) {
                info.nvlink_peers = peers.iter().map(|p| (*p).to_owned()).collect();
            }
            info
        })
        .collect();
    gpus.sort_by_key(|g| g.index);
    let gpus_healthy = gpus.iter().filter(|g| g.healthy).count() as u32;
    let conditions = vec![
        ready_condition(reading, cx),
        healthy_condition(&gpus, cx.now),
    ];
    GPUNodeStatus {
        driver_version: reading.driver_version.clone(),
        cuda_version: reading.cuda_version.clone(),
        gpus_total: gpus.len() as u32,
        gpus_healthy,
        mig_instances_total: gpus.iter().map(|g| g.mig_instances.len() as u32).sum(),
        model: most_common_model(&gpus),
        gpus,
        last_updated: None,
        conditions,
    }
}

fn gpu_info(raw: &RawGpu, cx: Context<'_>) -> GpuInfo {
    let unhealthy_reason = match &raw.fault {
        Some(fault) => Some(fault.clone()),
        None => cx
            .rules
            .first_critical(raw.events.iter().chain(cx.faults.get(&raw.uuid)))
            .map(health::describe),
    };
    GpuInfo {
        uuid: raw.uuid.clone(),
        index: raw.index,
        model: raw.name.clone(),
        memory_total_mib: raw.memory_total_bytes / MIB,
        memory_used_mib: raw.memory_used_bytes / MIB,
        utilization_percent: raw.utilization_percent.map(|u| u.min(100)),
        temperature_c: raw.temperature_c,
        pci_bus_id: raw.pci_bus_id.clone(),
        numa_node: raw.numa_node,
        nvlink_peers: Vec::new(),
        mig_mode: raw.mig_mode,
        mig_instances: raw
            .mig_instances
            .iter()
            .map(|m| MigInstanceInfo {
                uuid: m.uuid.clone(),
                profile: m.profile.clone(),
                memory_total_mib: m.memory_total_bytes / MIB,
                gpu_instance_id: m.gpu_instance_id,
                compute_instance_id: m.compute_instance_id,
            })
            .collect(),
        healthy: unhealthy_reason.is_none(),
        unhealthy_reason,
    }
}

/// For each GPU (by UUID), the UUIDs of the other GPUs it reaches over
/// NVLink, sorted, each once: directly (the link's far end is that GPU's PCI
/// bus id) or through an NVSwitch (both GPUs have links to the same far end
/// and that end is no GPU of the node).
pub fn nvlink_peers(gpus: &[RawGpu]) -> BTreeMap<&str, BTreeSet<&str>> {
    let bus_to_uuid: BTreeMap<String, &str> = gpus
        .iter()
        .map(|g| (normalize_bus_id(&g.pci_bus_id), g.uuid.as_str()))
        .collect();
    let mut peers: BTreeMap<&str, BTreeSet<&str>> = gpus
        .iter()
        .map(|g| (g.uuid.as_str(), BTreeSet::new()))
        .collect();
    let mut switch_to_gpus: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for gpu in gpus {
        for end in &gpu.nvlink_remote_pci_bus_ids {
            let end = normalize_bus_id(end);
            match bus_to_uuid.get(&end) {
                Some(&peer) if peer != gpu.uuid => {
                    peers.entry(gpu.uuid.as_str()).or_default().insert(peer);
                    peers.entry(peer).or_default().insert(gpu.uuid.as_str());
                }
                Some(_) => {}
                None => {
                    switch_to_gpus
                        .entry(end)
                        .or_default()
                        .insert(gpu.uuid.as_str());
                }
            }
        }
    }
    for members in switch_to_gpus.values() {
        for &a in members {
            for &b in members {
                if a != b {
                    peers.entry(a).or_default().insert(b);
                }
            }
        }
    }
    peers
}

/// One spelling per PCI address: NVML writes `00000000:1B:00.0` for a
/// device and may write `0000:1b:00.0` elsewhere (as sysfs does).
pub fn normalize_bus_id(bus: &str) -> String {
    let bus = bus.trim();
    match bus.split_once(':') {
        Some((domain, rest)) => match u32::from_str_radix(domain, 16) {
            Ok(domain) => format!("{domain:08X}:{}", rest.to_ascii_uppercase()),
            Err(_) => bus.to_ascii_uppercase(),
        },
        None => bus.to_ascii_uppercase(),
    }
}

/// The model most GPUs have (the lowest index breaks ties).
fn most_common_model(gpus: &[GpuInfo]) -> Option<String> {
    let mut count: BTreeMap<&str, (usize, std::cmp::Reverse<u32>)> = BTreeMap::new();
    for gpu in gpus {
        let entry = count
            .entry(&gpu.model)
            .or_insert((0, std::cmp::Reverse(gpu.index)));
        entry.0 += 1;
    }
    count
        .into_iter()
        .max_by_key(|(_, key)| *key)
        .map(|(model, _)| model.to_owned())
}

fn ready_condition(reading: &Reading, cx: Context<'_>) -> Condition {
    match cx.read_error {
        None => condition(
            conditions::READY,
            true,
            REASON_READ,
            format!(
                "{} GPU{} read from {}",
                reading.gpus.len(),
                if reading.gpus.len() == 1 { "" } else { "s" },
                cx.source
            ),
            cx.now,
        ),
        Some(error) => condition(
            conditions::READY,
            false,
            REASON_READ_FAILED,
            format!("{error}; showing the last good read"),
            cx.now,
        ),
    }
}

fn healthy_condition(gpus: &[GpuInfo], now: Timestamp) -> Condition {
    let unhealthy: Vec<String> = gpus
        .iter()
        .filter(|g| !g.healthy)
        .map(|g| {
            let instances = match g.mig_instances.len() {
                0 => String::new(),
                1 => " (and its MIG instance)".into(),
                n => format!(" (and its {n} MIG instances)"),
            };
            format!(
                "GPU {} ({}){instances}: {}",
                g.index,
                g.uuid,
                g.unhealthy_reason.as_deref().unwrap_or("unhealthy")
            )
        })
        .collect();
    if gpus.is_empty() {
        condition(
            conditions::GPUS_HEALTHY,
            false,
            REASON_NO_GPUS,
            "the node reports no GPU".into(),
            now,
        )
    } else if unhealthy.is_empty() {
        condition(
            conditions::GPUS_HEALTHY,
            true,
            REASON_ALL_HEALTHY,
            format!("all {} GPUs are healthy", gpus.len()),
            now,
        )
    } else {
        condition(
            conditions::GPUS_HEALTHY,
            false,
            REASON_UNHEALTHY,
            unhealthy.join("; "),
            now,
        )
    }
}

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        last_transition_time: Time(now),
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests;
