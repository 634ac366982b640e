//! The NVML source: the node's real GPUs, through NVIDIA's management library.
//!
//! Every query that some GPUs do not support (`NotSupported`) leaves its fact
//! out instead of failing the read; a GPU that cannot be read at all (fallen
//! off the bus) is reported with a fault, so it is published unhealthy.
//! Critical XID and double-bit ECC events are read on a thread of their own.
//!
//! On a GPU with MIG enabled, the MIG devices the operator created are listed
//! with their UUID, profile and memory. The GPU/compute instance ids are left
//! out: the wrapper has no safe call for them, and this crate has no unsafe code.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender as Sender;

use k8s_openapi::jiff::Timestamp;
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet};

use super::source::{
    EventKind, GpuSource, HealthEvent, RawGpu, RawMigInstance, Reading, Signal, SourceError,
};
use wasmgpu_api::MigMode;

/// NVML's `NVML_NVLINK_MAX_LINKS`: links are numbered below it.
const NVLINK_MAX_LINKS: u32 = 18;
/// How long one wait for an event blocks.
const EVENT_WAIT_MS: u32 = 5_000;
/// NVML's value for an XID it does not know.
const UNKNOWN_XID: u64 = 999;
/// `nvmlDeviceGetMigMode` reports 1 for enabled.
const MIG_ENABLED: u32 = 1;

/// Reads GPUs through NVML.
pub struct NvmlSource {
    nvml: Arc<Nvml>,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource").finish_non_exhaustive()
    }
}

fn nvml_error(what: &str, error: NvmlError) -> SourceError {
    SourceError::Nvml {
        what: what.into(),
        error: error.to_string(),
    }
}

impl NvmlSource {
    /// Loads `libnvidia-ml.so.1` and initialises NVML.
    pub fn init() -> Result<Self, SourceError> {
        match Nvml::init() {
            Ok(nvml) => Ok(Self {
                nvml: Arc::new(nvml),
            }),
            Err(NvmlError::LibloadingError(error)) => {
                Err(SourceError::LibraryNotFound(error.to_string()))
            }
            Err(error) => Err(nvml_error("initialising", error)),
        }
    }
}

/// `Ok(None)` for a query the GPU does not support; other errors are logged
/// and leave the fact out too (one odd query must not hide the GPU).
fn optional<T>(result: Result<T, NvmlError>, index: u32, what: &str) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(NvmlError::NotSupported) => None,
        Err(error) => {
            tracing::warn!(index, what, %error, "NVML query failed");
            None
        }
    }
}

fn read_gpu(nvml: &Nvml, index: u32) -> RawGpu {
    let device = match nvml.device_by_index(index) {
        Ok(device) => device,
        Err(error) => return faulty(index, format!("unknown-{index}"), "opening", error),
    };
    let uuid = match device.uuid() {
        Ok(uuid) => uuid,
        Err(error) => return faulty(index, format!("unknown-{index}"), "reading the UUID", error),
    };
    match read_required(&device) {
        Ok((name, memory, pci_bus_id)) => {
            let mig_mode = optional(device.mig_mode(), index, "MIG mode").map(|m| {
                if m.current == MIG_ENABLED {
                    MigMode::Enabled
                } else {
                    MigMode::Disabled
                }
            });
            let mig_instances = if mig_mode == Some(MigMode::Enabled) {
                mig_instances(&device, index, memory.total)
            } else {
                Vec::new()
            };
            RawGpu {
                index,
                name,
                memory_total_bytes: memory.total,
                memory_used_bytes: memory.used,
                utilization_percent: optional(device.utilization_rates(), index, "utilization")
                    .map(|u| u.gpu),
                temperature_c: optional(
                    device.temperature(TemperatureSensor::Gpu),
                    index,
                    "temperature",
                )
                .map(|t| i32::try_from(t).unwrap_or(i32::MAX)),
                pci_bus_id,
                numa_node: optional(device.numa_node_id(), index, "NUMA node"),
                nvlink_remote_pci_bus_ids: nvlinks(&device),
                mig_mode,
                mig_instances,
                events: Vec::new(),
                fault: None,
                uuid,
            }
        }
        Err((what, error)) => faulty(index, uuid, what, error),
    }
}

type Required = (
    String,
    nvml_wrapper::struct_wrappers::device::MemoryInfo,
    String,
);

fn read_required(device: &Device<'_>) -> Result<Required, (&'static str, NvmlError)> {
    let name = device.name().map_err(|e| ("reading the name", e))?;
    let memory = device.memory_info().map_err(|e| ("reading memory", e))?;
    let pci = device.pci_info().map_err(|e| ("reading PCI info", e))?;
    Ok((name, memory, pci.bus_id))
}

// === MIG ===

/// The MIG devices of `device` (MIG enabled), whose total memory is
/// `parent_total_bytes`. A slot without a device (`NotFound`) is skipped; a
/// device that cannot be read is logged and left out.
fn mig_instances(device: &Device<'_>, index: u32, parent_total_bytes: u64) -> Vec<RawMigInstance> {
    let Some(slots) = optional(device.mig_device_count(), index, "MIG device count") else {
        return Vec::new();
    };
    let mut instances = Vec::new();
    for slot in 0..slots {
        let mig = match device.mig_device_by_index(slot) {
            Ok(mig) => mig,
            Err(NvmlError::NotFound) => continue,
            Err(error) => {
                tracing::warn!(index, slot, %error, "Cannot open MIG device");
                continue;
            }
        };
        match read_mig(&mig, index, parent_total_bytes) {
            Ok(instance) => instances.push(instance),
            Err((what, error)) => {
                tracing::warn!(index, slot, what, %error, "Cannot read MIG device; leaving it out");
            }
        }
    }
    instances
}

fn read_mig(
    mig: &Device<'_>,
    index: u32,
    parent_total_bytes: u64,
) -> Result<RawMigInstance, (&'static str, NvmlError)> {
    let uuid = mig.uuid().map_err(|e| ("reading the UUID", e))?;
    let memory = mig.memory_info().map_err(|e| ("reading memory", e))?;
    let from_name =
        optional(mig.name(), index, "MIG device name").and_then(|name| profile_from_name(&name));
    let profile = match from_name {
        Some(profile) => profile,
        None => {
            let attributes = mig
                .attributes()
                .map_err(|e| ("reading the attributes", e))?;
            profile_name(
                attributes.gpu_instance_slice_count,
                attributes.compute_instance_slice_count,
                attributes.memory_size_mb,
                parent_total_bytes,
            )
        }
    };
    Ok(RawMigInstance {
        uuid,
        profile,
        memory_total_bytes: memory.total,
        gpu_instance_id: None,
        compute_instance_id: None,
    })
}

/// The profile in a MIG device's name, as recent drivers spell it
/// (`NVIDIA A100-SXM4-80GB MIG 1g.10gb`, `… MIG 1c.2g.20gb`, `… MIG 1g.10gb+me`).
pub fn profile_from_name(name: &str) -> Option<String> {
    let (_, profile) = name.trim().rsplit_once(" MIG ")?;
    is_profile(profile).then(|| profile.to_owned())
}

/// `[<C>c.]<G>g.<GB>gb[+<attr>[,<attr>…]]`, counts and size decimal numbers.
pub fn is_profile(text: &str) -> bool {
    let (base, attributes) = match text.split_once('+') {
        Some((base, attributes)) => (base, Some(attributes)),
        None => (text, None),
    };
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = base.split('.').collect();
    let (compute, rest) = match parts.as_slice() {
        [c, g, m] => (Some(*c), [*g, *m]),
        [g, m] => (None, [*g, *m]),
        _ => return false,
    };
    let counted = |s: &str, unit: &str| s.strip_suffix(unit).is_some_and(number);
    compute.is_none_or(|c| counted(c, "c"))
        && counted(rest[0], "g")
        && counted(rest[1], "gb")
        && attributes.is_none_or(|a| {
            a.split(',')
                .all(|a| !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric()))
        })
}

/// The profile name NVIDIA's tools give a MIG device with `gi_slices` GPU
/// slices, `ci_slices` compute slices and `memory_mib` of memory, on a GPU
/// of `parent_total_bytes`: `1g.10gb`, or `1c.2g.20gb` when the compute
/// instance is smaller than its GPU instance.
///
/// The size is the instance's share of the GPU rounded up to an eighth, times
/// the GPU's memory in whole GB (rounded up), rounded: 9,728 MiB of an
/// 80 GB A100 is `10gb`, 4,864 MiB of a 40 GB one `5gb`.
pub fn profile_name(
    gi_slices: u32,
    ci_slices: u32,
    memory_mib: u64,
    parent_total_bytes: u64,
) -> String {
    let gb = mig_memory_gb(memory_mib, parent_total_bytes);
    if ci_slices == gi_slices || ci_slices == 0 {
        format!("{gi_slices}g.{gb}gb")
    } else {
        format!("{ci_slices}c.{gi_slices}g.{gb}gb")
    }
}

fn mig_memory_gb(memory_mib: u64, parent_total_bytes: u64) -> u64 {
    const MIB: u128 = 1024 * 1024;
    const GIB: u128 = 1024 * MIB;
    if parent_total_bytes == 0 {
        return memory_mib.div_ceil(1024);
    }
    let total = u128::from(parent_total_bytes);
    // ceil(share × 8): the share in eighths of the GPU.
    let eighths = (u128::from(memory_mib) * MIB * 8).div_ceil(total);
    let total_gb = total.div_ceil(GIB);
    // round(eighths × total_gb / 8), halves up.
    let gb = (eighths * total_gb + 4) / 8;
    u64::try_from(gb).unwrap_or(u64::MAX)
}

fn faulty(index: u32, uuid: String, what: &str, error: NvmlError) -> RawGpu {
    tracing::warn!(index, %uuid, what, %error, "Cannot read GPU");
    RawGpu {
        index,
        uuid,
        fault: Some(format!("NVML failed {what}: {error}")),
        ..RawGpu::default()
    }
}

/// The far-end PCI bus ids of the device's active NVLinks.
fn nvlinks(device: &Device<'_>) -> Vec<String> {
    let mut ends = Vec::new();
    for link in 0..NVLINK_MAX_LINKS {
        let link = device.link_wrapper_for(link);
        match link.is_active() {
            Ok(true) => match link.remote_pci_info() {
                Ok(pci) => ends.push(pci.bus_id),
                Err(error) => {
                    tracing::debug!(link = link.link(), %error, "No remote PCI info for NVLink");
                }
            },
            Ok(false) => {}
            // No NVLink on this GPU at all.
            Err(NvmlError::NotSupported) if link.link() == 0 => break,
            // Past the GPU's last link, or a link that cannot say.
            Err(_) => {}
        }
    }
    ends
}

fn cuda_version(nvml: &Nvml) -> Option<String> {
    let version = nvml.sys_cuda_driver_version().ok()?;
    Some(format!(
        "{}.{}",
        nvml_wrapper::cuda_driver_version_major(version),
        nvml_wrapper::cuda_driver_version_minor(version)
    ))
}

impl GpuSource for NvmlSource {
    fn describe(&self) -> String {
        "NVML".into()
    }

    fn read(&mut self) -> Result<Reading, SourceError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| nvml_error("counting devices", e))?;
        Ok(Reading {
            driver_version: self.nvml.sys_driver_version().ok(),
            cuda_version: cuda_version(&self.nvml),
            gpus: (0..count).map(|i| read_gpu(&self.nvml, i)).collect(),
        })
    }

    fn watch(&mut self, signals: Sender<Signal>) -> Result<(), SourceError> {
        let nvml = Arc::clone(&self.nvml);
        std::thread::Builder::new()
            .name("nvml-events".into())
            .spawn(move || watch_events(&nvml, &signals))
            .map_err(|error| SourceError::Watch {
                what: "NVML events".into(),
                error,
            })?;
        Ok(())
    }
}

/// Registers every GPU for critical events and forwards them until the
/// receiver goes away.
fn watch_events(nvml: &Nvml, signals: &Sender<Signal>) {
    let Some(set) = register_all(nvml) else {
        return;
    };
    loop {
        match set.wait(EVENT_WAIT_MS) {
            Ok(data) => {
                let uuid = match data.device.uuid() {
                    Ok(uuid) => uuid,
                    Err(error) => {
                        tracing::warn!(%error, "Event from a GPU without a readable UUID");
                        continue;
                    }
                };
                let kind = if data.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                    EventKind::Xid(match data.event_data {
                        Some(XidError::Value(xid)) => xid,
                        Some(XidError::Unknown) | None => UNKNOWN_XID,
                    })
                } else if data.event_type.contains(EventTypes::DOUBLE_BIT_ECC_ERROR) {
                    EventKind::DoubleBitEcc
                } else {
                    continue;
                };
                tracing::info!(%uuid, ?kind, "NVML event");
                let event = HealthEvent {
                    uuid,
                    kind,
                    at: Timestamp::now(),
                };
                if signals.send(Signal::Health(event)).is_err() {
                    return;
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(error) => {
                tracing::warn!(%error, "Waiting for NVML events failed");
                std::thread::sleep(Duration::from_millis(u64::from(EVENT_WAIT_MS)));
            }
        }
    }
}

fn register_all(nvml: &Nvml) -> Option<EventSet<'_>> {
    let wanted = EventTypes::CRITICAL_XID_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR;
    let count = match nvml.device_count() {
        Ok(count) => count,
        Err(error) => {
            tracing::warn!(%error, "Cannot count GPUs; no health events");
            return None;
        }
    };
    let mut set = match nvml.create_event_set() {
        Ok(set) => set,
        Err(error) => {
            tracing::warn!(%error, "Cannot create an NVML event set; no health events");
            return None;
        }
    };
    let mut registered: Vec<(u32, EventTypes)> = Vec::new();
    for index in 0..count {
        let Ok(device) = nvml.device_by_index(index) else {
            continue;
        };
        let events = match device.supported_event_types() {
            Ok(supported) => wanted & supported,
            Err(error) => {
                tracing::warn!(index, %error, "Cannot tell which events the GPU reports");
                continue;
            }
        };
        if events.is_empty() {
            tracing::warn!(index, "GPU reports no critical events");
            continue;
        }
        set = match device.register_events(events, set) {
            Ok(set) => {
                registered.push((index, events));
                set
            }
            Err(error) => {
                tracing::warn!(index, %error, "Cannot register for GPU events");
                // A failed registration releases the set: start a new one
                // with the GPUs registered so far.
                let mut fresh = nvml.create_event_set().ok()?;
                for &(index, events) in &registered {
                    let device = nvml.device_by_index(index).ok()?;
                    fresh = device.register_events(events, fresh).ok()?;
                }
                fresh
            }
        };
    }
    Some(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn profile_names_match_nvidia_smi() {
        // (GPU memory MiB, GI slices, CI slices, instance MiB, name)
        let cases = [
            (81920, 1, 1, 9728, "1g.10gb"), // A100 80GB
            (81920, 2, 2, 19968, "2g.20gb"),
            (81920, 3, 3, 40192, "3g.40gb"),
            (81920, 4, 4, 40192, "4g.40gb"),
            (81920, 7, 7, 80896, "7g.80gb"),
            (81920, 2, 1, 19968, "1c.2g.20gb"),
            (40960, 1, 1, 4864, "1g.5gb"), // A100 40GB
            (40960, 3, 3, 20096, "3g.20gb"),
            (81559, 1, 1, 9984, "1g.10gb"),   // H100 80GB
            (81559, 1, 1, 20096, "1g.20gb"),  // H100 1g.20gb (two memory slices)
            (143771, 1, 1, 16384, "1g.18gb"), // H200 141GB
            (143771, 7, 7, 143360, "7g.141gb"),
        ];
        for (gpu_mib, gi, ci, mib, want) in cases {
            assert_eq!(
                profile_name(gi, ci, mib, gpu_mib * MIB),
                want,
                "{mib} of {gpu_mib} MiB"
            );
        }
        // A parent of unknown size: the instance's own memory in GB, rounded up.
        assert_eq!(profile_name(1, 1, 9728, 0), "1g.10gb");
        assert_eq!(
            profile_name(u32::MAX, 1, u64::MAX, 1),
            format!("1c.{}g.{}gb", u32::MAX, u64::MAX)
        );
    }

    #[test]
    fn profiles_are_read_from_mig_device_names() {
        let cases = [
            ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", Some("1g.10gb")),
            ("NVIDIA H100 80GB HBM3 MIG 1c.2g.20gb", Some("1c.2g.20gb")),
            ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", Some("1g.10gb+me")),
            ("NVIDIA H200 MIG 3g.71gb ", Some("3g.71gb")),
            ("NVIDIA A100-SXM4-80GB", None),
            ("NVIDIA A100 MIG", None),
            ("NVIDIA A100 MIG 1g", None),
            ("NVIDIA A100 MIG 1g.10", None),
            ("NVIDIA A100 MIG xg.10gb", None),
            ("NVIDIA A100 MIG 1g.10gb+", None),
            ("NVIDIA A100 MIG 1g.10gb+m-e", None),
            ("NVIDIA A100 MIG 1c.1c.1g.10gb", None),
        ];
        for (name, want) in cases {
            assert_eq!(profile_from_name(name).as_deref(), want, "{name}");
        }
    }
}
