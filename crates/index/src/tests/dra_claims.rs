//! DRA pods: claims read as asks (by name and from templates), their
//! candidates from CEL selectors and taints, constraints, claims allocated
//! already pinning the pod, bad input as a reason on the pod, and the
//! allocation a binding writes.

use k8s_openapi::api::resource::v1::{
    CELDeviceSelector, DeviceClaim, DeviceClass, DeviceClassSpec, DeviceConstraint, DeviceRequest,
    DeviceSelector, DeviceSubRequest, DeviceTaint, DeviceTaintRule, DeviceTaintRuleSpec,
    DeviceTaintSelector, DeviceToleration, ExactDeviceRequest, ResourceClaim, ResourceClaimSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use wasmgpu_contract::types::{Ask, Claim};

use super::*;
use crate::claim_writes::Chosen;
use crate::dra::tests::{allocated_claim, h100_slice, nvidia_gpu, slice};
use crate::key::ObjectKey;
use crate::problem::Problem;

const DRIVER: &str = "gpu.nvidia.com";

fn selector(expression: &str) -> DeviceSelector {
    DeviceSelector {
        cel: Some(CELDeviceSelector {
            expression: expression.into(),
        }),
    }
}

/// NVIDIA's DeviceClass `gpu.nvidia.com`.
fn gpu_class() -> DeviceClass {
    DeviceClass {
        metadata: ObjectMeta {
            name: Some(DRIVER.into()),
            ..Default::default()
        },
        spec: Some(DeviceClassSpec {
            selectors: Some(vec![selector(
                "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            )]),
            ..Default::default()
        }),
    }
}

fn exactly(name: &str, count: i64, selectors: &[&str]) -> DeviceRequest {
    DeviceRequest {
        name: name.into(),
        exactly: Some(ExactDeviceRequest {
            device_class_name: DRIVER.into(),
            count: Some(count),
            selectors: Some(selectors.iter().map(|s| selector(s)).collect()),
            ..Default::default()
        }),
        first_available: None,
    }
}

fn claim(name: &str, requests: Vec<DeviceRequest>) -> ResourceClaim {
    ResourceClaim {
        metadata: ObjectMeta {
            namespace: Some("ml".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-claim-{name}")),
            ..Default::default()
        },
        spec: Some(ResourceClaimSpec {
            devices: Some(DeviceClaim {
                requests: Some(requests),
                ..Default::default()
            }),
        }),
        status: None,
    }
}

/// An index with an 8×H100 node published only by DRA, and the class.
fn dra_index() -> Index {
    let mut index = index();
    index.apply_node(&node("node-a").build());
    index.apply_resourceslice(&h100_slice("node-a", 8));
    index.apply_deviceclass(&gpu_class());
    index
}

fn claims_of(index: &Index, pod: &str) -> (Vec<Claim>, wasmgpu_contract::HostSnapshot) {
    let host = default_host(index);
    let request = host
        .snapshot
        .pending
        .iter()
        .find(|r| r.pod == pod)
        .unwrap_or_else(|| panic!("{pod} pending: {:?}", index.problems()));
    let Ask::Claims(claims) = &request.ask else {
        panic!("{pod} asks through claims");
    };
    (claims.clone(), host)
}

/// The claims' `namespace/name`s, as the binding's writes take them.
fn names(claims: &[Claim]) -> Vec<&str> {
    claims.iter().map(|c| c.name.as_str()).collect()
}

fn candidate_uuids(host: &wasmgpu_contract::HostSnapshot, set: u32) -> Vec<String> {
    host.snapshot.candidate_sets[set as usize]
        .iter()
        .map(|r| host.nodes[r.node as usize].uuids[r.gpu as usize].clone())
        .collect()
}

fn problem_of(index: &Index, pod: &str) -> String {
    index
        .problems()
        .iter()
        .find(|p| matches!(p, Problem::UnusableClaim { pod: k, .. } if k.to_string() == pod))
        .map(ToString::to_string)
        .unwrap_or_else(|| panic!("a problem for {pod}: {:?}", index.problems()))
}

#[test]
fn a_claim_by_name_reaches_the_policy_with_the_devices_its_selectors_match() {
    let mut index = dra_index();
    // Two of the eight GPUs are smaller: the selector keeps them out.
    let mut small = slice(
        DRIVER,
        "node-b",
        1,
        1,
        vec![nvidia_gpu(
            "gpu-0",
            "GPU-b-0",
            "NVIDIA A100-PCIE-40GB",
            "40Gi",
        )],
    );
    small.metadata.name = Some("node-b-slice".into());
    index.apply_node(&node("node-b").build());
    index.apply_resourceslice(&small);
    index.apply_resourceclaim(&claim(
        "train",
        vec![exactly(
            "gpus",
            2,
            &["device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('79Gi')) >= 0"],
        )],
    ));
    index.apply_pod(&pod("ml", "p").claim("gpus", "train").build());
    let (claims, host) = claims_of(&index, "ml/p");
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].name, "ml/train");
    let alternative = &claims[0].requests[0].alternatives[0];
    assert_eq!(alternative.count, 2);
    let uuids = candidate_uuids(&host, alternative.candidates);
    assert_eq!(uuids.len(), 8, "{uuids:?}");
    assert!(uuids.iter().all(|u| u.starts_with("GPU-node-a-")));
    assert_eq!(host.resources, vec![None], "no GPUResource");
}

#[test]
fn a_claim_from_a_template_is_found_through_the_pod_status() {
    let mut index = dra_index();
    index.apply_pod(&pod("ml", "p").claim_template("gpus", "two", None).build());
    assert!(problem_of(&index, "ml/p").contains("ResourceClaimTemplate two is not made yet"));

    let mut made = claim("p-gpus-x1", vec![exactly("gpus", 1, &[])]);
    made.metadata.owner_references = Some(vec![OwnerReference {
        kind: "Pod".into(),
        name: "p".into(),
        uid: "uid-p".into(),
        api_version: "v1".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    index.apply_resourceclaim(&made);
    index.apply_pod(
        &pod("ml", "p")
            .claim_template("gpus", "two", Some("p-gpus-x1"))
            .build(),
    );
    let (claims, _) = claims_of(&index, "ml/p");
    assert_eq!(claims[0].name, "ml/p-gpus-x1");

    // A claim the pod does not own is not taken for it.
    made.metadata.owner_references = None;
    index.apply_resourceclaim(&made);
    assert!(problem_of(&index, "ml/p").contains("not owned by this pod"));
}

#[test]
fn first_available_lists_each_alternative_in_order() {
    let mut index = dra_index();
    let request = DeviceRequest {
        name: "gpu".into(),
        exactly: None,
        first_available: Some(vec![
            DeviceSubRequest {
                name: "big".into(),
                device_class_name: DRIVER.into(),
                count: Some(4),
                selectors: Some(vec![selector(
                    "device.attributes['resource.kubernetes.io'].numaNode == 1",
                )]),
                ..Default::default()
            },
            DeviceSubRequest {
                name: "any".into(),
                device_class_name: DRIVER.into(),
                count: Some(1),
                ..Default::default()
            },
        ]),
    };
    index.apply_resourceclaim(&claim("c", vec![request]));
    index.apply_pod(&pod("ml", "p").claim("gpu", "c").build());
    let (claims, host) = claims_of(&index, "ml/p");
    let alternatives = &claims[0].requests[0].alternatives;
    assert_eq!(alternatives.len(), 2);
    assert_eq!(alternatives[0].subrequest.as_deref(), Some("big"));
    assert_eq!(alternatives[0].count, 4);
    assert_eq!(
        candidate_uuids(&host, alternatives[0].candidates),
        (4..8)
            .map(|i| format!("GPU-node-a-{i}"))
            .collect::<Vec<_>>()
    );
    assert_eq!(candidate_uuids(&host, alternatives[1].candidates).len(), 8);
}

#[test]
fn match_attribute_values_are_numbers_equal_for_equal_values() {
    let mut index = dra_index();
    let mut c = claim("c", vec![exactly("a", 1, &[]), exactly("b", 1, &[])]);
    c.spec
        .as_mut()
        .unwrap()
        .devices
        .as_mut()
        .unwrap()
        .constraints = Some(vec![DeviceConstraint {
        requests: Some(vec!["a".into(), "b".into()]),
        match_attribute: Some("resource.kubernetes.io/numaNode".into()),
        distinct_attribute: None,
    }]);
    index.apply_resourceclaim(&c);
    index.apply_pod(&pod("ml", "p").claim("c", "c").build());
    let (claims, host) = claims_of(&index, "ml/p");
    let constraint = &claims[0].constraints[0];
    assert_eq!(constraint.requests, vec![0, 1]);
    assert!(!constraint.distinct);
    assert_eq!(constraint.values.len(), 8);
    let value_of = |i: usize| {
        let uuid = format!("GPU-node-a-{i}");
        constraint
            .values
            .iter()
            .find(|v| host.nodes[v.device.node as usize].uuids[v.device.gpu as usize] == uuid)
            .unwrap()
            .value
    };
    assert_eq!(value_of(0), value_of(3));
    assert_eq!(value_of(4), value_of(7));
    assert_ne!(value_of(0), value_of(4));
}

#[test]
fn all_wants_every_matching_device_of_the_node() {
    let mut index = dra_index();
    let mut request = exactly("all", 1, &[]);
    let e = request.exactly.as_mut().unwrap();
    e.allocation_mode = Some("All".into());
    e.count = None;
    index.apply_resourceclaim(&claim("c", vec![request]));
    index.apply_pod(&pod("ml", "p").claim("c", "c").build());
    let (claims, _) = claims_of(&index, "ml/p");
    assert_eq!(claims[0].requests[0].alternatives[0].count, 8);
}

#[test]
fn a_tainted_device_is_a_candidate_only_when_tolerated() {
    let mut index = dra_index();
    let mut tainted = h100_slice("node-a", 2);
    // The same slice, now with two devices.
    tainted.metadata.name = h100_slice("node-a", 8).metadata.name;
    tainted.spec.devices.as_mut().unwrap()[0].taints = Some(vec![DeviceTaint {
        key: "example.com/broken".into(),
        value: None,
        effect: "NoSchedule".into(),
        time_added: None,
    }]);
    index.apply_resourceslice(&tainted);
    let mut tolerant = exactly("g", 1, &[]);
    tolerant.exactly.as_mut().unwrap().tolerations = Some(vec![DeviceToleration {
        key: Some("example.com/broken".into()),
        operator: Some("Exists".into()),
        ..Default::default()
    }]);
    index.apply_resourceclaim(&claim("plain", vec![exactly("g", 1, &[])]));
    index.apply_resourceclaim(&claim("tolerant", vec![tolerant]));
    index.apply_pod(&pod("ml", "p").claim("g", "plain").build());
    index.apply_pod(&pod("ml", "q").claim("g", "tolerant").build());
    let (plain, host) = claims_of(&index, "ml/p");
    assert_eq!(
        candidate_uuids(&host, plain[0].requests[0].alternatives[0].candidates),
        ["GPU-node-a-1"]
    );
    let (tolerant, host) = claims_of(&index, "ml/q");
    assert_eq!(
        candidate_uuids(&host, tolerant[0].requests[0].alternatives[0].candidates).len(),
        2
    );

    // The allocation carries the request's tolerations, as kube-scheduler's.
    let tolerations = |pod: &str, claims: &[Claim], uuid: &str| {
        let chosen = [Chosen {
            claim: 0,
            request: "g".into(),
            uuid,
        }];
        let writes = index
            .claim_writes(
                &ObjectKey::new("ml", pod),
                &names(claims),
                &chosen,
                "node-a",
            )
            .unwrap();
        let allocation = writes[0].allocation.clone().unwrap();
        allocation.devices.unwrap().results.unwrap()[0]
            .tolerations
            .clone()
    };
    let copied = tolerations("q", &tolerant, "GPU-node-a-0").expect("tolerations");
    assert_eq!(copied[0].key.as_deref(), Some("example.com/broken"));
    assert_eq!(tolerations("p", &plain, "GPU-node-a-1"), None);
}

/// A DeviceTaintRule tainting `device` (all devices of the driver when
/// `None`) with `effect`.
fn taint_rule(name: &str, device: Option<&str>, effect: &str) -> DeviceTaintRule {
    DeviceTaintRule {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: DeviceTaintRuleSpec {
            device_selector: Some(DeviceTaintSelector {
                driver: Some("gpu.nvidia.com".into()),
                pool: device.map(|_| "node-a".into()),
                device: device.map(Into::into),
            }),
            taint: DeviceTaint {
                key: "example.com/drain".into(),
                value: Some("maintenance".into()),
                effect: effect.into(),
                time_added: None,
            },
        },
        status: None,
    }
}

#[test]
fn a_device_a_taint_rule_taints_is_a_candidate_only_when_tolerated() {
    let mut index = dra_index();
    index.apply_devicetaintrule(&taint_rule("drain-gpu-0", Some("gpu-0"), "NoSchedule"));
    // Effect None only reports: the device stays a candidate.
    index.apply_devicetaintrule(&taint_rule("note-gpu-1", Some("gpu-1"), "None"));
    let mut tolerant = exactly("g", 8, &[]);
    tolerant.exactly.as_mut().unwrap().tolerations = Some(vec![DeviceToleration {
        key: Some("example.com/drain".into()),
        operator: Some("Equal".into()),
        value: Some("maintenance".into()),
        ..Default::default()
    }]);
    index.apply_resourceclaim(&claim("plain", vec![exactly("g", 1, &[])]));
    index.apply_resourceclaim(&claim("tolerant", vec![tolerant]));
    index.apply_pod(&pod("ml", "p").claim("g", "plain").build());
    index.apply_pod(&pod("ml", "q").claim("g", "tolerant").build());
    let candidates = |index: &Index, pod: &str| {
        let (claims, host) = claims_of(index, pod);
        candidate_uuids(&host, claims[0].requests[0].alternatives[0].candidates)
    };
    let plain = candidates(&index, "ml/p");
    assert_eq!(plain.len(), 7);
    assert!(!plain.contains(&"GPU-node-a-0".to_owned()), "{plain:?}");
    assert_eq!(candidates(&index, "ml/q").len(), 8);

    // A rule over the whole driver: only the tolerant claim has devices;
    // the other waits as a claim no node could hold.
    index.apply_devicetaintrule(&taint_rule("drain-all", None, "NoExecute"));
    assert_eq!(candidates(&index, "ml/q").len(), 8);
    let pending: Vec<String> = default_host(&index)
        .snapshot
        .pending
        .into_iter()
        .map(|r| r.pod)
        .collect();
    assert_eq!(
        pending,
        ["ml/q"],
        "a claim whose devices are all tainted waits"
    );
    assert!(
        index.problems().iter().any(|p| matches!(
            p,
            Problem::UnsatisfiableClaim { pod, claim, reason }
                if pod.to_string() == "ml/p"
                    && claim == "ml/plain"
                    && reason.contains("taints it does not tolerate (example.com/drain=maintenance:NoExecute, example.com/drain=maintenance:NoSchedule)")
        )),
        "{:?}",
        index.problems()
    );

    // Rules deleted: every device is back.
    index.delete_devicetaintrule("drain-all");
    index.delete_devicetaintrule("drain-gpu-0");
    assert_eq!(candidates(&index, "ml/p").len(), 8);
    index.reset_devicetaintrules(&[taint_rule("drain-gpu-0", Some("gpu-0"), "NoSchedule")]);
    assert_eq!(candidates(&index, "ml/p").len(), 7);
}

#[test]
fn bad_input_is_a_reason_on_the_pod_naming_the_field() {
    let mut index = dra_index();
    index.apply_pod(&pod("ml", "missing").claim("g", "nope").build());
    assert!(
        problem_of(&index, "ml/missing")
            .contains("ResourceClaim ml/nope (spec.resourceClaims[\"g\"]) does not exist")
    );

    let mut no_class = exactly("g", 1, &[]);
    no_class.exactly.as_mut().unwrap().device_class_name = "mig.nvidia.com".into();
    index.apply_resourceclaim(&claim("no-class", vec![no_class]));
    index.apply_pod(&pod("ml", "no-class").claim("g", "no-class").build());
    assert!(
        problem_of(&index, "ml/no-class")
            .contains("spec.devices.requests[0] (\"g\") names DeviceClass \"mig.nvidia.com\", which does not exist")
    );

    index.apply_resourceclaim(&claim(
        "bad-cel",
        vec![exactly("g", 1, &["device.attributes["])],
    ));
    index.apply_pod(&pod("ml", "bad-cel").claim("g", "bad-cel").build());
    let text = problem_of(&index, "ml/bad-cel");
    assert!(
        text.contains("selectors[0] \"device.attributes[\" does not compile"),
        "{text}"
    );

    index.apply_resourceclaim(&claim(
        "fails",
        vec![exactly(
            "g",
            1,
            &["device.attributes['gpu.nvidia.com'].nothing == 1"],
        )],
    ));
    index.apply_pod(&pod("ml", "fails").claim("g", "fails").build());
    let text = problem_of(&index, "ml/fails");
    assert!(
        text.contains("cannot be evaluated on device gpu.nvidia.com/node-a/gpu-"),
        "{text}"
    );

    let mut admin = exactly("g", 1, &[]);
    admin.exactly.as_mut().unwrap().admin_access = Some(true);
    index.apply_resourceclaim(&claim("admin", vec![admin]));
    index.apply_pod(&pod("ml", "admin").claim("g", "admin").build());
    assert!(problem_of(&index, "ml/admin").contains("adminAccess is not supported"));
}

#[test]
fn a_claim_allocated_already_pins_the_pod_to_its_node() {
    let mut index = dra_index();
    index.apply_node(&node("node-b").build());
    index.apply_resourceslice(&h100_slice("node-b", 8));
    let mut shared = allocated_claim("ml", "shared", "node-b", &[("gpu-0", false)]);
    shared
        .status
        .as_mut()
        .unwrap()
        .allocation
        .as_mut()
        .unwrap()
        .node_selector = Some(crate::claim_writes::on_node("node-b"));
    index.apply_resourceclaim(&shared);
    index.apply_pod(&pod("ml", "p").claim("s", "shared").build());
    let (claims, host) = claims_of(&index, "ml/p");
    assert!(claims.is_empty(), "nothing left to allocate");
    assert_eq!(eligible_names(&host.snapshot, "ml/p"), ["node-b"]);
    // Its binding only reserves the claim for the pod.
    let writes = index
        .claim_writes(&ObjectKey::new("ml", "p"), &[], &[], "node-b")
        .unwrap();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].claim, ObjectKey::new("ml", "shared"));
    assert_eq!(writes[0].allocation, None);
}

#[test]
fn the_allocation_written_names_the_devices_the_node_and_the_class_config() {
    let mut index = dra_index();
    let mut class = gpu_class();
    class.spec.as_mut().unwrap().config = Some(vec![
        k8s_openapi::api::resource::v1::DeviceClassConfiguration {
            opaque: Some(k8s_openapi::api::resource::v1::OpaqueDeviceConfiguration {
                driver: DRIVER.into(),
                parameters: k8s_openapi::apimachinery::pkg::runtime::RawExtension(
                    serde_json::json!({"sharing": "none"}),
                ),
            }),
        },
    ]);
    index.apply_deviceclass(&class);
    index.apply_resourceclaim(&claim("c", vec![exactly("gpus", 2, &[])]));
    index.apply_pod(&pod("ml", "p").claim("gpus", "c").build());
    let (claims, _) = claims_of(&index, "ml/p");
    let chosen = [
        Chosen {
            claim: 0,
            request: "gpus".into(),
            uuid: "GPU-node-a-2",
        },
        Chosen {
            claim: 0,
            request: "gpus".into(),
            uuid: "GPU-node-a-5",
        },
    ];
    let writes = index
        .claim_writes(
            &ObjectKey::new("ml", "p"),
            &names(&claims),
            &chosen,
            "node-a",
        )
        .unwrap();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].uid, "uid-claim-c");
    let allocation = writes[0].allocation.as_ref().unwrap();
    let devices = allocation.devices.as_ref().unwrap();
    let results: Vec<(&str, &str, &str, &str)> = devices
        .results
        .iter()
        .flatten()
        .map(|r| {
            (
                r.request.as_str(),
                r.driver.as_str(),
                r.pool.as_str(),
                r.device.as_str(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            ("gpus", DRIVER, "node-a", "gpu-2"),
            ("gpus", DRIVER, "node-a", "gpu-5")
        ]
    );
    let config = devices.config.as_ref().unwrap();
    assert_eq!(config.len(), 1);
    assert_eq!(config[0].source, "FromClass");
    assert_eq!(
        config[0].requests.as_deref(),
        Some(&["gpus".to_string()][..])
    );
    let selector = allocation.node_selector.as_ref().unwrap();
    let fields = selector.node_selector_terms[0]
        .match_fields
        .as_ref()
        .unwrap();
    assert_eq!(
        fields[0].values.as_deref(),
        Some(&["node-a".to_string()][..])
    );

    // Once allocated (by anyone), it is not allocated again.
    let mut allocated = allocated_claim("ml", "c", "node-a", &[("gpu-2", false)]);
    allocated.spec = claim("c", vec![exactly("gpus", 2, &[])]).spec;
    index.apply_resourceclaim(&allocated);
    let again = index.claim_writes(
        &ObjectKey::new("ml", "p"),
        &names(&claims),
        &chosen,
        "node-a",
    );
    assert!(again.unwrap_err().contains("allocated meanwhile"));
}

#[test]
fn a_device_another_claim_took_since_the_round_is_not_written() {
    let mut index = dra_index();
    index.apply_resourceclaim(&claim("c", vec![exactly("gpus", 2, &[])]));
    index.apply_pod(&pod("ml", "p").claim("gpus", "c").build());
    let (claims, _) = claims_of(&index, "ml/p");
    let chosen = ["GPU-node-a-2", "GPU-node-a-5"].map(|uuid| Chosen {
        claim: 0,
        request: "gpus".into(),
        uuid,
    });
    let writes = index
        .claim_writes(
            &ObjectKey::new("ml", "p"),
            &names(&claims),
            &chosen,
            "node-a",
        )
        .unwrap();
    assert_eq!(index.taken_meanwhile(&writes[0]), None);

    // Another scheduler allocates gpu-5 before the write: it is not written.
    index.apply_resourceclaim(&allocated_claim(
        "other",
        "theirs",
        "node-a",
        &[("gpu-5", false)],
    ));
    let why = index.taken_meanwhile(&writes[0]).expect("gpu-5 is taken");
    assert_eq!(
        why,
        "device gpu.nvidia.com/node-a/gpu-5 was allocated to ResourceClaim other/theirs meanwhile"
    );

    // A result with adminAccess monitors the device without holding it.
    index.apply_resourceclaim(&allocated_claim(
        "other",
        "theirs",
        "node-a",
        &[("gpu-5", true)],
    ));
    assert_eq!(index.taken_meanwhile(&writes[0]), None);

    // The claim's own allocation (a write sent again) is not another's.
    index.apply_resourceclaim(&allocated_claim("ml", "c", "node-a", &[("gpu-2", false)]));
    assert_eq!(index.taken_meanwhile(&writes[0]), None);

    // Taken again, then the other claim deleted: free again.
    index.apply_resourceclaim(&allocated_claim(
        "other",
        "theirs",
        "node-a",
        &[("gpu-5", false)],
    ));
    assert!(index.taken_meanwhile(&writes[0]).is_some());
    index.delete_resourceclaim("other", "theirs");
    assert_eq!(index.taken_meanwhile(&writes[0]), None);
}

#[test]
fn a_claim_no_node_could_ever_hold_is_kept_from_the_policy_with_the_reason() {
    let mut index = dra_index();
    // More than any node has.
    index.apply_resourceclaim(&claim("nine", vec![exactly("gpus", 9, &[])]));
    index.apply_pod(&pod("ml", "nine").claim("gpus", "nine").build());
    // Devices exist, but only on a node the pod may not run on.
    index.apply_resourceclaim(&claim("one", vec![exactly("gpus", 1, &[])]));
    index.apply_pod(
        &pod("ml", "elsewhere")
            .claim("gpus", "one")
            .node_selector("zone", "x")
            .build(),
    );
    // All eight held by another claim: it waits for them, and is sent.
    index.apply_resourceclaim(&claim("eight", vec![exactly("gpus", 8, &[])]));
    let all: Vec<(String, bool)> = (0..8).map(|i| (format!("gpu-{i}"), true)).collect();
    let all: Vec<(&str, bool)> = all.iter().map(|(d, e)| (d.as_str(), *e)).collect();
    index.apply_resourceclaim(&allocated_claim("other", "held", "node-a", &all));
    index.apply_pod(&pod("ml", "waits").claim("gpus", "eight").build());

    let host = default_host(&index);
    let pending: Vec<&str> = host
        .snapshot
        .pending
        .iter()
        .map(|r| r.pod.as_str())
        .collect();
    assert_eq!(pending, ["ml/waits"]);
    let unsatisfiable: Vec<String> = index
        .problems()
        .iter()
        .filter(|p| matches!(p, Problem::UnsatisfiableClaim { .. }))
        .map(ToString::to_string)
        .collect();
    assert_eq!(unsatisfiable.len(), 2, "{unsatisfiable:?}");
    assert!(
        unsatisfiable.iter().any(|p| p.contains("ml/nine")
            && p.contains("ResourceClaim ml/nine")
            && p.contains("the 8 that match")),
        "{unsatisfiable:?}"
    );
    assert!(
        unsatisfiable
            .iter()
            .any(|p| p.contains("ml/elsewhere") && p.contains("matches no device")),
        "{unsatisfiable:?}"
    );
}

#[test]
fn a_device_with_binding_conditions_is_left_to_kube_scheduler() {
    let mut index = dra_index();
    let mut slice = h100_slice("node-a", 2);
    slice.metadata.name = h100_slice("node-a", 8).metadata.name;
    let device = &mut slice.spec.devices.as_mut().unwrap()[0];
    device.binding_conditions = Some(vec!["dra.example.com/attached".into()]);
    device.binding_failure_conditions = Some(vec!["dra.example.com/failed".into()]);
    index.apply_resourceslice(&slice);
    index.apply_resourceclaim(&claim("c", vec![exactly("g", 1, &[])]));
    index.apply_pod(&pod("ml", "p").claim("g", "c").build());
    let (claims, host) = claims_of(&index, "ml/p");
    assert_eq!(
        candidate_uuids(&host, claims[0].requests[0].alternatives[0].candidates),
        ["GPU-node-a-1"]
    );
}

/// `ml/victim` (priority-low, bound on node-a) holds `GPU-node-a-2` through
/// its claim `v`; `ml/urgent` asks 1 GPU through claim `c` and is
/// nominated for that GPU.
fn dra_nomination() -> Index {
    let mut index = dra_index();
    let mut held = allocated_claim("ml", "v", "node-a", &[("gpu-2", false)]);
    held.metadata.uid = Some("uid-claim-v".into());
    held.status.as_mut().unwrap().reserved_for = Some(vec![
        k8s_openapi::api::resource::v1::ResourceClaimConsumerReference {
            resource: "pods".into(),
            name: "victim".into(),
            uid: "uid-victim".into(),
            ..Default::default()
        },
    ]);
    index.apply_resourceclaim(&held);
    index.apply_pod(
        &pod("ml", "victim")
            .uid("uid-victim")
            .claim("gpus", "v")
            .holds("node-a", &["GPU-node-a-2"], Sharing::Exclusive, H100_MIB)
            .build(),
    );
    index.apply_resourceclaim(&claim("c", vec![exactly("gpus", 1, &[])]));
    let nomination = wasmgpu_api::Nomination {
        uid: "uid-urgent".into(),
        allocation: wasmgpu_api::PodAllocation {
            resource: String::new(),
            node: "node-a".into(),
            sharing: Sharing::Exclusive,
            devices: devices(&["GPU-node-a-2"], H100_MIB),
            policy: PolicyRef {
                name: DEFAULT_POLICY.into(),
                digest: "sha256:00".into(),
            },
        },
        victims: vec![wasmgpu_api::Victim {
            namespace: "ml".into(),
            name: "victim".into(),
            uid: "uid-victim".into(),
        }],
        claims: vec![wasmgpu_api::NominatedClaim {
            name: "c".into(),
            uid: "uid-claim-c".into(),
            devices: vec![wasmgpu_api::NominatedDevice {
                request: "gpus".into(),
                uuid: "GPU-node-a-2".into(),
            }],
        }],
    };
    let (key, value) = nomination.annotation();
    index.apply_pod(
        &pod("ml", "urgent")
            .uid("uid-urgent")
            .claim("gpus", "c")
            .annotation(&key, &value)
            .build(),
    );
    index
}

#[test]
fn a_dra_preemptor_gets_its_claims_written_once_the_victims_claims_let_the_devices_go() {
    let mut index = dra_nomination();
    let urgent = ObjectKey::new("ml", "urgent");
    let nominated_gpu_held = |index: &Index| {
        let host = default_host(index);
        let node = host
            .snapshot
            .nodes
            .iter()
            .position(|n| n.name == "node-a")
            .unwrap();
        let g = host.nodes[node]
            .uuids
            .iter()
            .position(|u| u == "GPU-node-a-2");
        host.snapshot.nodes[node].gpus[g.unwrap()].held
    };
    // The victim is still there: evicted, nothing bound.
    assert_eq!(index.evictions().len(), 1);
    assert!(index.bindings_to_finish().is_empty());
    // The victim gone, its claim still allocated: the preemptor waits,
    // and nobody else gets the device meanwhile.
    index.delete_pod("ml", "victim");
    assert!(index.bindings_to_finish().is_empty());
    assert!(index.stale_nominations().is_empty());
    assert!(nominated_gpu_held(&index));
    // The claim deallocated (by the resourceclaim controller): the
    // preemptor's claim gets the nominated device, then the binding.
    let mut released = allocated_claim("ml", "v", "node-a", &[]);
    released.metadata.uid = Some("uid-claim-v".into());
    released.status = None;
    index.apply_resourceclaim(&released);
    assert!(nominated_gpu_held(&index), "still the preemptor's");
    let bindings = index.bindings_to_finish();
    assert_eq!(bindings.len(), 1, "{bindings:?}");
    assert_eq!(bindings[0].pod, urgent);
    assert_eq!(bindings[0].claims.len(), 1);
    assert_eq!(bindings[0].claims[0].claim, ObjectKey::new("ml", "c"));
    let allocation = bindings[0].claims[0].allocation.as_ref().unwrap();
    let results = allocation
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap();
    let devices: Vec<(&str, &str)> = results
        .iter()
        .map(|r| (r.request.as_str(), r.device.as_str()))
        .collect();
    assert_eq!(devices, [("gpus", "gpu-2")]);
    // What the nomination records of these writes, read back.
    let recorded = index.nominated_claims(&bindings[0].claims);
    assert_eq!(recorded[0].devices[0].uuid, "GPU-node-a-2");

    // The claim recreated meanwhile: the nomination is stale.
    let mut again = claim("c", vec![exactly("gpus", 1, &[])]);
    again.metadata.uid = Some("uid-claim-c-2".into());
    index.apply_resourceclaim(&again);
    assert!(index.bindings_to_finish().is_empty());
    let stale = index.stale_nominations();
    assert_eq!(stale.len(), 1);
    assert_eq!(stale[0].0, urgent);
    assert!(stale[0].1.contains("recreated"), "{}", stale[0].1);
}

#[test]
fn a_pod_sharing_a_claim_with_another_is_no_victim() {
    let mut index = dra_nomination();
    let evictable = |index: &Index, pod: &str| {
        let snapshot = default_snapshot(index);
        snapshot
            .running
            .iter()
            .find(|r| r.pod == pod)
            .unwrap()
            .evictable
    };
    index.apply_pod(
        &pod("ml", "alone")
            .uid("uid-alone")
            .holds("node-a", &["GPU-node-a-4"], Sharing::Exclusive, H100_MIB)
            .build(),
    );
    assert!(evictable(&index, "ml/alone"));
    let mut shared = allocated_claim("ml", "s", "node-a", &[("gpu-5", false)]);
    shared.status.as_mut().unwrap().reserved_for = Some(
        ["uid-one", "uid-two"]
            .iter()
            .map(
                |uid| k8s_openapi::api::resource::v1::ResourceClaimConsumerReference {
                    resource: "pods".into(),
                    name: uid.trim_start_matches("uid-").into(),
                    uid: (*uid).into(),
                    ..Default::default()
                },
            )
            .collect(),
    );
    index.apply_resourceclaim(&shared);
    index.apply_pod(
        &pod("ml", "one")
            .uid("uid-one")
            .claim("gpus", "s")
            .holds("node-a", &["GPU-node-a-5"], Sharing::Exclusive, H100_MIB)
            .build(),
    );
    assert!(
        !evictable(&index, "ml/one"),
        "its device stays held by ml/two"
    );
}
