//! Errors users can act on, and objects the index skips.

use super::*;
use crate::key::ObjectKey;
use crate::problem::{Problem, Subject};

#[test]
fn a_pod_without_annotation_or_with_a_missing_resource_is_reported() {
    let mut index = index();
    add_gpu_node(&mut index, "n", 8);
    index.apply_pod(&pod("ml", "bare").build());
    index.apply_pod(&pod("ml", "typo").resource("trainr").build());
    let problems = index.problems();
    assert_eq!(
        problems,
        [
            Problem::NoResourceAnnotation {
                pod: ObjectKey::new("ml", "bare")
            },
            Problem::MissingResource {
                pod: ObjectKey::new("ml", "typo"),
                resource: ObjectKey::new("ml", "trainr"),
            },
        ]
    );
    assert_eq!(
        problems[1].subject(),
        Subject::Pod(&ObjectKey::new("ml", "typo"))
    );
    assert_eq!(
        problems[1].to_string(),
        "pod ml/typo uses GPUResource ml/trainr, which does not exist"
    );
    assert!(default_snapshot(&index).pending.is_empty());
}

#[test]
fn an_invalid_resource_names_the_field_and_its_pods_wait() {
    let mut index = index();
    add_gpu_node(&mut index, "n", 8);
    index.apply_gpuresource(&gpuresource("ml", "r").count(0).build());
    index.apply_gpuresource(&gpuresource("ml", "nb").shared(0).build());
    index.apply_pod(&pod("ml", "p").resource("r").build());
    let problems = index.problems();
    let fields: Vec<_> = problems
        .iter()
        .map(|p| match p {
            Problem::InvalidResource { resource, error } => (resource.name.as_str(), error.field),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(fields, [("nb", "memoryMiB"), ("r", "count")]);
    assert_eq!(
        problems[1].subject(),
        Subject::GPUResource(&ObjectKey::new("ml", "r"))
    );
    assert!(
        problems[1]
            .to_string()
            .contains("spec.count: must be 1 to 16, got 0"),
        "{}",
        problems[1]
    );
    assert!(default_snapshot(&index).pending.is_empty());
}

#[test]
fn an_invalid_resource_keeps_its_ledger() {
    let mut index = index();
    add_gpu_node(&mut index, "n", 1);
    index.apply_pod(&pod("ml", "p").resource("r").bound("n").build());
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .count(0)
            .holds("p", "n", &["GPU-n-0"], H100_MIB)
            .build(),
    );
    let snapshot = default_snapshot(&index);
    assert!(snapshot.nodes[0].gpus[0].held);
    assert_eq!(holder(&index, "GPU-n-0").as_deref(), Some("ml/p"));
}

fn unsatisfiable_reason(index: &Index) -> String {
    match index.problems().as_slice() {
        [Problem::Unsatisfiable { reason, .. }] => reason.clone(),
        other => panic!("expected one unsatisfiable request, got {other:?}"),
    }
}

#[test]
fn a_request_no_node_could_ever_hold_is_reported_not_sent() {
    let mut index = index();
    add_gpu_node(&mut index, "a", 8);
    add_gpu_node(&mut index, "b", 4);
    index.apply_gpuresource(&gpuresource("ml", "big").count(9).build());
    index.apply_pod(&pod("ml", "p").resource("big").build());
    let reason = unsatisfiable_reason(&index);
    assert_eq!(
        reason,
        "wants 9 GPUs on one node; the 2 node(s) it may run on have at most 8"
    );
    assert!(default_snapshot(&index).pending.is_empty());

    // Eight fit, even though every GPU is taken right now.
    index.apply_gpuresource(&gpuresource("ml", "big").count(8).build());
    assert!(index.problems().is_empty());
}

#[test]
fn model_and_memory_count_toward_what_could_fit() {
    let mut index = index();
    index.apply_node(&node("a").build());
    index.apply_gpunode(
        &gpunode("a")
            .with_gpus(8)
            .model("NVIDIA A100-SXM4-40GB", 40960)
            .build(),
    );
    index.apply_gpuresource(&gpuresource("ml", "r").model("NVIDIA H100*").build());
    index.apply_pod(&pod("ml", "p").resource("r").build());
    assert!(unsatisfiable_reason(&index).contains("matching \"NVIDIA H100*\""));
    index.apply_gpuresource(&gpuresource("ml", "r").memory(81920).build());
    assert!(unsatisfiable_reason(&index).contains("with at least 81920 MiB"));
    index.apply_gpuresource(
        &gpuresource("ml", "r")
            .model("NVIDIA A100*")
            .memory(40960)
            .build(),
    );
    assert!(index.problems().is_empty());
}

#[test]
fn no_inventory_or_no_allowed_node_is_unsatisfiable() {
    let mut index = index();
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(
        &pod("ml", "p")
            .resource("r")
            .node_selector("zone", "x")
            .build(),
    );
    assert!(unsatisfiable_reason(&index).contains("no node has published a GPU inventory"));
    add_gpu_node(&mut index, "a", 8);
    assert!(unsatisfiable_reason(&index).contains("nodeSelector"));
}

#[test]
fn a_not_ready_node_still_counts_as_able_to_hold_a_request() {
    let mut index = index();
    index.apply_node(&node("a").not_ready().build());
    index.apply_gpunode(&gpunode("a").with_gpus(8).build());
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(&pod("ml", "p").resource("r").build());
    assert!(index.problems().is_empty());
    let snapshot = default_snapshot(&index);
    assert_eq!(eligible_names(&snapshot, "ml/p"), Vec::<String>::new());
}

#[test]
fn objects_without_names_and_other_schedulers_pods_are_skipped() {
    let mut index = index();
    index.apply_node(&k8s_openapi::api::core::v1::Node::default());
    index.apply_pod(&k8s_openapi::api::core::v1::Pod::default());
    index.apply_gpunode(&GPUNode::new("", GPUNodeSpec {}));
    let mut unnamed = gpuresource("ml", "r").build();
    unnamed.metadata.namespace = None;
    index.apply_gpuresource(&unnamed);
    index.apply_pod(&pod("ml", "other").scheduler("default-scheduler").build());
    assert!(index.problems().is_empty());
    assert!(index.snapshots(1, 0).is_empty());
}

#[test]
fn gpus_with_repeated_or_empty_uuids_are_skipped() {
    let mut index = index();
    index.apply_node(&node("a").build());
    let mut gpunode = gpunode("a").with_gpus(3).build();
    let gpus = &mut gpunode.status.as_mut().unwrap().gpus;
    gpus[1].uuid = gpus[0].uuid.clone();
    gpus[2].uuid.clear();
    index.apply_gpunode(&gpunode);
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(&pod("ml", "p").resource("r").build());
    let snapshot = default_snapshot(&index);
    assert_eq!(snapshot.nodes[0].gpus.len(), 1);
}

#[test]
fn a_pod_whose_gpu_limit_disagrees_with_its_resource_waits_with_the_reason() {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let mut index = index();
    add_gpu_node(&mut index, "n", 8);
    index.apply_gpuresource(&gpuresource("ml", "r").count(2).build());
    let with_limit = |name: &str, limit: &str| {
        let mut pod = pod("ml", name).resource("r").build();
        let spec = pod.spec.as_mut().expect("spec");
        spec.containers = vec![k8s_openapi::api::core::v1::Container {
            name: "main".into(),
            resources: Some(ResourceRequirements {
                limits: Some(
                    [("wasmgpu.io/gpu".to_string(), Quantity(limit.into()))]
                        .into_iter()
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }];
        pod
    };
    index.apply_pod(&with_limit("one", "1"));
    index.apply_pod(&with_limit("two", "2"));
    let problems = index.problems();
    assert_eq!(
        problems,
        [Problem::LimitMismatch {
            pod: ObjectKey::new("ml", "one"),
            resource: ObjectKey::new("ml", "r"),
            limit: 1,
            count: 2,
        }]
    );
    assert!(problems[0].to_string().contains("set the limit to 2"));
    let pending: Vec<String> = default_snapshot(&index)
        .pending
        .iter()
        .map(|r| r.pod.clone())
        .collect();
    assert_eq!(pending, ["ml/two"]);
}

#[test]
fn gang_members_past_their_schedule_timeout_are_reported_and_keep_waiting() {
    const CREATED_MS: i64 = 1_700_000_000_000;
    let mut index = index();
    add_gpu_node(&mut index, "n", 8);
    index.apply_gpuresource(&gpuresource("ml", "r").count(4).build());
    index.apply_podgroup(&podgroup("ml", "train", 3, Some(60)));
    index.apply_podgroup(&podgroup("ml", "patient", 3, None));
    for i in 0..3 {
        let member = |gang: &str| {
            pod("ml", &format!("{gang}-{i}"))
                .resource("r")
                .gang(gang)
                .created_ms(CREATED_MS + i64::from(i) * 1000)
                .build()
        };
        index.apply_pod(&member("train"));
        index.apply_pod(&member("patient"));
    }
    let at = |seconds: i64| {
        index
            .round_report(u64::try_from(CREATED_MS + seconds * 1000).unwrap())
            .problems
    };
    // The oldest member decides: 60 s after it, not yet; past 60 s, every
    // member of the gang with a timeout is told, the other gang is not.
    assert_eq!(at(60), []);
    let problems = at(61);
    let pods: Vec<String> = problems
        .iter()
        .map(|p| match p.subject() {
            Subject::Pod(pod) => pod.to_string(),
            other => panic!("reported on {other:?}"),
        })
        .collect();
    assert_eq!(pods, ["ml/train-0", "ml/train-1", "ml/train-2"]);
    assert!(matches!(problems[0], Problem::GangTimedOut { .. }));
    let message = problems[0].to_string();
    assert!(
        message.contains("gang ml/train")
            && message.contains("scheduleTimeoutSeconds (60 s)")
            && message.contains("0 member(s) hold GPUs and 3 wait, short of minMember 3"),
        "{message}"
    );
    // They still wait for room: the policy still sees them.
    let pending: Vec<String> = default_snapshot(&index)
        .pending
        .iter()
        .map(|r| r.pod.clone())
        .collect();
    assert_eq!(pending.len(), 6, "{pending:?}");
}

#[test]
fn memory_asked_with_a_mig_profile_is_compared_with_the_instances() {
    let mut index = index();
    index.apply_node(&node("n").build());
    index.apply_gpunode(
        &gpunode("n")
            .with_gpus(1)
            .mig(0, &[("1g.10gb", 9856), ("1g.10gb", 9856)])
            .build(),
    );
    index.apply_gpuresource(
        &gpuresource("ml", "small")
            .mig_profile("1g.10gb")
            .memory(9856)
            .build(),
    );
    index.apply_gpuresource(
        &gpuresource("ml", "big")
            .mig_profile("1g.10gb")
            .memory(20_000)
            .build(),
    );
    index.apply_pod(&pod("ml", "fits").resource("small").build());
    index.apply_pod(&pod("ml", "never").resource("big").build());
    let reason = unsatisfiable_reason(&index);
    assert!(reason.contains("1g.10gb"), "{reason}");
    let pending: Vec<String> = default_snapshot(&index)
        .pending
        .iter()
        .map(|r| r.pod.clone())
        .collect();
    assert_eq!(pending, ["ml/fits"], "the H100's 80 GiB do not count");
}
