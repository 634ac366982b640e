//! The NVML source: the node's real GPUs, through NVIDIA's management library.
//!
//! Every query that some GPUs do not support (`NotSupported`) leaves its fact
//! out instead of failing the read; a GPU that cannot be read at all (fallen
//! off the bus) is reported with a fault, so it is published unhealthy.
//! Critical XID and double-bit ECC events are read on a thread of their own.

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

use super::source::{EventKind, GpuSource, HealthEvent, RawGpu, Reading, Signal, SourceError};
use crate::api::MigMode;

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
        Ok((name, memory, pci_bus_id)) => RawGpu {
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
            mig_mode: optional(device.mig_mode(), index, "MIG mode").map(|m| {
                if m.current == MIG_ENABLED {
                    MigMode::Enabled
                } else {
                    MigMode::Disabled
                }
            }),
            events: Vec::new(),
            fault: None,
            uuid,
        },
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
