//! The conversion on recorded values: what NVML reports on real boards
//! (memory in bytes, PCI bus ids in NVML's and sysfs' spellings, NVLink far
//! ends that are GPUs or NVSwitches) and the example inventories.

use std::collections::BTreeSet;

use super::*;
use crate::file;
use crate::source::EventKind;
use crate::source::HealthEvent;
use crate::source::RawMigInstance;
use wasmgpu_api::MigMode;

const GIB: u64 = 1024 * 1024 * 1024;

/// A GPU as NVML reported it.
fn recorded(index: u32, bus: &str, links: &[&str]) -> RawGpu {
    RawGpu {
        index,
        uuid: format!("GPU-{index}"),
        name: "NVIDIA A100-SXM4-40GB".into(),
        memory_total_bytes: 40 * GIB,
        memory_used_bytes: 1_003_159_552, // 956.6 MiB: rounds down
        utilization_percent: Some(0),
        temperature_c: Some(29),
        pci_bus_id: bus.into(),
        numa_node: Some(index / 2),
        nvlink_remote_pci_bus_ids: links.iter().map(|l| (*l).to_owned()).collect(),
        mig_mode: Some(MigMode::Disabled),
        mig_instances: Vec::new(),
        events: Vec::new(),
        fault: None,
    }
}

fn status_of(reading: &Reading, rules: &HealthRules, faults: &Faults) -> GPUNodeStatus {
    to_status(
        reading,
        Context {
            source: "NVML",
            read_error: None,
            rules,
            faults,
            now: "2026-11-30T12:00:00Z".parse().unwrap(),
        },
    )
}

fn peers_of(status: &GPUNodeStatus, index: u32) -> Vec<&str> {
    status.gpus[index as usize]
        .nvlink_peers
        .iter()
        .map(String::as_str)
        .collect()
}

fn condition<'a>(status: &'a GPUNodeStatus, type_: &str) -> &'a Condition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"))
}

/// Four A100s linked pairwise (4 links per pair), listed out of order, with
/// far ends spelt as sysfs does.
fn a100_mesh() -> Reading {
    let buses = [
        "00000000:07:00.0",
        "00000000:0F:00.0",
        "00000000:47:00.0",
        "00000000:4E:00.0",
    ];
    let sysfs = [
        "0000:07:00.0",
        "0000:0f:00.0",
        "0000:47:00.0",
        "0000:4e:00.0",
    ];
    let mut gpus: Vec<RawGpu> = (0..4)
        .map(|i| {
            let links: Vec<&str> = (0..4)
                .filter(|&j| j != i)
                .flat_map(|j| [sysfs[j]; 4])
                .collect();
            recorded(i as u32, buses[i], &links)
        })
        .collect();
    gpus.reverse();
    Reading {
        driver_version: Some("550.144.03".into()),
        cuda_version: Some("12.4".into()),
        gpus,
    }
}

#[test]
fn direct_nvlinks_resolve_to_peer_uuids_whatever_the_spelling() {
    let status = status_of(&a100_mesh(), &HealthRules::default(), &Faults::default());
    assert_eq!(
        status.gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert_eq!(peers_of(&status, 0), ["GPU-1", "GPU-2", "GPU-3"]);
    assert_eq!(peers_of(&status, 3), ["GPU-0", "GPU-1", "GPU-2"]);
}

#[test]
fn gpus_behind_the_same_nvswitches_are_peers_and_other_ends_are_not_gpus() {
    let switches = ["00000000:05:00.0", "00000000:06:00.0"];
    let mut gpus: Vec<RawGpu> = (0..4)
        .map(|i| recorded(i, &format!("00000000:{:02X}:00.0", 0x18 + i), &switches))
        .collect();
    // GPU 4 has no NVLink; GPU 5 links to itself (a loopback) and to a switch
    // no other GPU uses.
    gpus.push(recorded(4, "00000000:9A:00.0", &[]));
    gpus.push(recorded(
        5,
        "00000000:AB:00.0",
        &["00000000:AB:00.0", "00000000:0A:00.0"],
    ));
    let reading = Reading {
        gpus,
        ..Reading::default()
    };
    let status = status_of(&reading, &HealthRules::default(), &Faults::default());
    assert_eq!(peers_of(&status, 0), ["GPU-1", "GPU-2", "GPU-3"]);
    assert_eq!(peers_of(&status, 2), ["GPU-0", "GPU-1", "GPU-3"]);
    assert!(peers_of(&status, 4).is_empty());
    assert!(peers_of(&status, 5).is_empty());
}

#[test]
fn bus_ids_normalize_to_nvmls_spelling() {
    assert_eq!(normalize_bus_id("0000:1b:00.0"), "00000000:1B:00.0");
    assert_eq!(normalize_bus_id("00000000:1B:00.0"), "00000000:1B:00.0");
    assert_eq!(normalize_bus_id(" 0001:af:00.1 "), "00000001:AF:00.1");
    assert_eq!(normalize_bus_id("weird"), "WEIRD");
}

#[test]
fn facts_convert_to_the_published_units_and_summary() {
    let status = status_of(&a100_mesh(), &HealthRules::default(), &Faults::default());
    let gpu = &status.gpus[1];
    assert_eq!(gpu.memory_total_mib, 40960);
    assert_eq!(gpu.memory_used_mib, 956);
    assert_eq!(gpu.numa_node, Some(0));
    assert_eq!(gpu.pci_bus_id, "00000000:0F:00.0");
    assert_eq!(gpu.mig_mode, Some(MigMode::Disabled));
    assert!(gpu.healthy);
    assert_eq!(status.gpus_total, 4);
    assert_eq!(status.gpus_healthy, 4);
    assert_eq!(status.model.as_deref(), Some("NVIDIA A100-SXM4-40GB"));
    assert_eq!(status.driver_version.as_deref(), Some("550.144.03"));
    assert_eq!(status.cuda_version.as_deref(), Some("12.4"));
    assert_eq!(status.last_updated, None);
    let ready = condition(&status, conditions::READY);
    assert_eq!(
        (
            ready.status.as_str(),
            ready.reason.as_str(),
            ready.message.as_str()
        ),
        ("True", REASON_READ, "4 GPUs read from NVML")
    );
    let healthy = condition(&status, conditions::GPUS_HEALTHY);
    assert_eq!(
        (healthy.status.as_str(), healthy.reason.as_str()),
        ("True", REASON_ALL_HEALTHY)
    );
}

#[test]
fn the_most_common_model_names_the_node() {
    let mut reading = a100_mesh();
    reading.gpus[0].name = "NVIDIA H100 80GB HBM3".into();
    let status = status_of(&reading, &HealthRules::default(), &Faults::default());
    assert_eq!(status.model.as_deref(), Some("NVIDIA A100-SXM4-40GB"));
    reading.gpus[1].name = "NVIDIA H100 80GB HBM3".into();
    // Two of each: the model of the lowest index wins.
    let status = status_of(&reading, &HealthRules::default(), &Faults::default());
    let lowest = status.gpus[0].model.clone();
    assert_eq!(status.model, Some(lowest));
}

#[test]
fn critical_events_and_faults_make_gpus_unhealthy_and_application_xids_do_not() {
    let mut reading = a100_mesh();
    let at = |s: &str| s.parse().unwrap();
    // GPU 3 (listed first): an application XID only.
    reading.gpus[0].events.push(HealthEvent {
        uuid: "GPU-3".into(),
        kind: EventKind::Xid(31),
        at: at("2026-11-30T10:00:00Z"),
    });
    // GPU 2: could not be read.
    reading.gpus[1].fault = Some("NVML failed reading memory: GPU is lost".into());
    let rules = HealthRules::default();
    let mut faults = Faults::default();
    // GPU 1: an XID 79 through NVML events, after an ignored XID 13.
    assert!(!faults.record(
        &rules,
        HealthEvent {
            uuid: "GPU-1".into(),
            kind: EventKind::Xid(13),
            at: at("2026-11-30T11:00:00Z"),
        }
    ));
    assert!(faults.record(
        &rules,
        HealthEvent {
            uuid: "GPU-1".into(),
            kind: EventKind::Xid(79),
            at: at("2026-11-30T11:30:00Z"),
        }
    ));
    let status = status_of(&reading, &rules, &faults);
    let health: Vec<(bool, Option<&str>)> = status
        .gpus
        .iter()
        .map(|g| (g.healthy, g.unhealthy_reason.as_deref()))
        .collect();
    assert_eq!(
        health,
        [
            (true, None),
            (false, Some("XID 79 at 2026-11-30T11:30:00Z")),
            (false, Some("NVML failed reading memory: GPU is lost")),
            (true, None),
        ]
    );
    assert_eq!(status.gpus_healthy, 2);
    let healthy = condition(&status, conditions::GPUS_HEALTHY);
    assert_eq!(
        (healthy.status.as_str(), healthy.reason.as_str()),
        ("False", REASON_UNHEALTHY)
    );
    assert_eq!(
        healthy.message,
        "GPU 1 (GPU-1): XID 79 at 2026-11-30T11:30:00Z; \
         GPU 2 (GPU-2): NVML failed reading memory: GPU is lost"
    );

    // With nothing ignored, the XID 31 counts too.
    let strict = status_of(&reading, &HealthRules::ignoring([]), &faults);
    assert_eq!(strict.gpus_healthy, 1);
    assert_eq!(
        strict.gpus[3].unhealthy_reason.as_deref(),
        Some("XID 31 at 2026-11-30T10:00:00Z")
    );
}

#[test]
fn a_failed_read_and_an_empty_node_show_in_the_conditions() {
    let rules = HealthRules::default();
    let faults = Faults::default();
    let status = to_status(
        &a100_mesh(),
        Context {
            source: "inventory node.yaml",
            read_error: Some("invalid inventory node.yaml: gpus[0]: missing field `uuid`"),
            rules: &rules,
            faults: &faults,
            now: Timestamp::UNIX_EPOCH,
        },
    );
    assert_eq!(status.gpus_total, 4);
    let ready = condition(&status, conditions::READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", REASON_READ_FAILED)
    );
    assert!(
        ready.message.contains("missing field `uuid`"),
        "{}",
        ready.message
    );

    let empty = status_of(&Reading::default(), &rules, &faults);
    assert_eq!((empty.gpus_total, empty.model.as_deref()), (0, None));
    let healthy = condition(&empty, conditions::GPUS_HEALTHY);
    assert_eq!(
        (healthy.status.as_str(), healthy.reason.as_str()),
        ("False", REASON_NO_GPUS)
    );
}

fn example(name: &str) -> GPUNodeStatus {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/inventory/").to_owned() + name;
    let text = std::fs::read_to_string(&path).unwrap();
    let reading =
        file::parse(&text, Timestamp::UNIX_EPOCH).unwrap_or_else(|e| panic!("{path}: {e}"));
    status_of(&reading, &HealthRules::default(), &Faults::default())
}

#[test]
fn the_example_inventories_describe_the_nodes_they_say() {
    let h100 = example("h100-nvlink-8.yaml");
    assert_eq!((h100.gpus_total, h100.gpus_healthy), (8, 8));
    assert_eq!(h100.model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    for gpu in &h100.gpus {
        let peers: BTreeSet<&str> = gpu.nvlink_peers.iter().map(String::as_str).collect();
        assert_eq!(peers.len(), 7, "GPU {}", gpu.index);
        assert!(!peers.contains(gpu.uuid.as_str()));
    }

    let a100 = example("a100-4.yaml");
    assert_eq!(a100.gpus_total, 4);
    assert!(a100.gpus.iter().all(|g| g.nvlink_peers.len() == 3));
    assert_eq!(a100.gpus[1].memory_used_mib, 30720);

    let mig = example("mig.yaml");
    let modes: Vec<Option<MigMode>> = mig.gpus.iter().map(|g| g.mig_mode).collect();
    assert_eq!(modes, [Some(MigMode::Enabled), Some(MigMode::Disabled)]);
    assert_eq!(mig.gpus[0].nvlink_peers, [mig.gpus[1].uuid.clone()]);
    let profiles: Vec<&str> = mig.gpus[0]
        .mig_instances
        .iter()
        .map(|m| m.profile.as_str())
        .collect();
    assert_eq!(profiles, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]);
    assert!(mig.gpus[1].mig_instances.is_empty());
    assert_eq!(mig.mig_instances_total, 4);
    // The example's instances fit their GPU, and their profiles are the ones
    // NVIDIA's tools derive from their memory.
    let gpu = &mig.gpus[0];
    let used: u64 = gpu.mig_instances.iter().map(|m| m.memory_total_mib).sum();
    assert!(used <= gpu.memory_total_mib, "{used}");
    for m in &gpu.mig_instances {
        let slices: u32 = m.profile[..1].parse().unwrap();
        let derived = crate::nvml::profile_name(
            slices,
            slices,
            m.memory_total_mib,
            gpu.memory_total_mib * 1024 * 1024,
        );
        assert_eq!(derived, m.profile, "{}", m.uuid);
    }
}

/// A GPU with MIG enabled and `profiles.len()` instances, as NVML reported
/// them (memory in bytes).
fn with_mig(mut gpu: RawGpu, profiles: &[(&str, u64)]) -> RawGpu {
    gpu.mig_mode = Some(MigMode::Enabled);
    gpu.mig_instances = profiles
        .iter()
        .enumerate()
        .map(|(i, (profile, bytes))| RawMigInstance {
            uuid: format!("MIG-{}-{i}", gpu.index),
            profile: (*profile).into(),
            memory_total_bytes: *bytes,
            gpu_instance_id: None,
            compute_instance_id: None,
        })
        .collect();
    gpu
}

#[test]
fn mig_instances_are_published_under_their_gpu_in_mib() {
    // 4864 MiB and a few bytes: rounds down, as GPU memory does.
    let reading = Reading {
        gpus: vec![
            with_mig(
                recorded(0, "00000000:07:00.0", &[]),
                &[
                    ("3g.20gb", 20096 * 1024 * 1024),
                    ("1g.5gb", 4864 * 1024 * 1024 + 17),
                ],
            ),
            recorded(1, "00000000:0F:00.0", &[]),
            with_mig(
                recorded(2, "00000000:47:00.0", &[]),
                &[("7g.40gb", 40320 * 1024 * 1024)],
            ),
        ],
        ..Reading::default()
    };
    let status = status_of(&reading, &HealthRules::default(), &Faults::default());
    assert_eq!(status.mig_instances_total, 3);
    assert_eq!(
        status.gpus[0].mig_instances,
        [
            MigInstanceInfo {
                uuid: "MIG-0-0".into(),
                profile: "3g.20gb".into(),
                memory_total_mib: 20096,
                gpu_instance_id: None,
                compute_instance_id: None,
            },
            MigInstanceInfo {
                uuid: "MIG-0-1".into(),
                profile: "1g.5gb".into(),
                memory_total_mib: 4864,
                gpu_instance_id: None,
                compute_instance_id: None,
            },
        ]
    );
    assert!(status.gpus[1].mig_instances.is_empty());
    assert_eq!(status.gpus[2].mig_instances[0].profile, "7g.40gb");
    // Counted as GPUs: the instances do not add to gpusTotal.
    assert_eq!((status.gpus_total, status.gpus_healthy), (3, 3));
}

#[test]
fn an_unhealthy_gpu_takes_its_mig_instances_with_it() {
    let mut gpu = with_mig(
        recorded(0, "00000000:07:00.0", &[]),
        &[
            ("1g.5gb", 4864 * 1024 * 1024),
            ("1g.5gb", 4864 * 1024 * 1024),
        ],
    );
    gpu.events.push(HealthEvent {
        uuid: gpu.uuid.clone(),
        kind: EventKind::Xid(79),
        at: "2026-11-30T14:03:58Z".parse().unwrap(),
    });
    let reading = Reading {
        gpus: vec![gpu, recorded(1, "00000000:0F:00.0", &[])],
        ..Reading::default()
    };
    let status = status_of(&reading, &HealthRules::default(), &Faults::default());
    assert!(!status.gpus[0].healthy);
    assert_eq!(status.gpus[0].mig_instances.len(), 2);
    let healthy = condition(&status, conditions::GPUS_HEALTHY);
    assert_eq!(
        healthy.message,
        "GPU 0 (GPU-0) (and its 2 MIG instances): XID 79 at 2026-11-30T14:03:58Z"
    );
}

/// What NVML read on a real H200 (driver 580, in a VM: no NUMA node, no
/// NVLink, MIG disabled), recorded with `tests/gpu/nvml-check.sh`, where it
/// agreed with nvidia-smi.
#[test]
fn a_reading_recorded_on_an_h200_converts_as_nvidia_smi_reports_it() {
    let reading: Reading =
        serde_json::from_str(include_str!("recorded/h200-nvml.json")).expect("recorded reading");
    let status = status_of(&reading, &HealthRules::default(), &Faults::default());
    assert_eq!(status.gpus_total, 1);
    assert_eq!(status.gpus_healthy, 1);
    assert_eq!(status.model.as_deref(), Some("NVIDIA H200"));
    assert_eq!(status.driver_version.as_deref(), Some("580.159.04"));
    let gpu = &status.gpus[0];
    assert_eq!(gpu.uuid, "GPU-e49b075d-1144-01af-ce1e-c86c03f94d43");
    assert_eq!(gpu.memory_total_mib, 143_771, "nvidia-smi's memory.total");
    assert_eq!(gpu.pci_bus_id, "00000000:00:06.0");
    assert_eq!(gpu.numa_node, None);
    assert!(gpu.nvlink_peers.is_empty());
    assert_eq!(condition(&status, "Ready").message, "1 GPU read from NVML");
}
