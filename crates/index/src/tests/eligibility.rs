//! Which nodes a pending request may use.

use super::*;

/// An index with the given nodes (each with 8 GPUs) and one pending pod
/// `ml/p` built by `pod`; returns the pod's eligible node names. A pod no
/// node admits is not sent to the policy but reported as unsatisfiable.
fn eligible(nodes: Vec<TestNode>, pod: TestPod) -> Vec<String> {
    let mut index = index();
    for node in nodes {
        let node = node.build();
        let name = node.metadata.name.clone().unwrap();
        index.apply_node(&node);
        index.apply_gpunode(&gpunode(&name).with_gpus(8).build());
    }
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(&pod.resource("r").build());
    let snapshot = default_snapshot(&index);
    if snapshot.pending.is_empty() {
        let problems = index.problems();
        assert!(
            matches!(
                problems.as_slice(),
                [crate::problem::Problem::Unsatisfiable { .. }]
            ),
            "{problems:?}"
        );
        return Vec::new();
    }
    eligible_names(&snapshot, "ml/p")
}

fn p() -> TestPod {
    pod("ml", "p")
}

#[test]
fn ready_schedulable_nodes_with_inventory_are_candidates() {
    let mut index = index();
    add_gpu_node(&mut index, "a", 8);
    index.apply_node(&node("cordoned").cordoned().build());
    index.apply_gpunode(&gpunode("cordoned").with_gpus(8).build());
    index.apply_node(&node("not-ready").not_ready().build());
    index.apply_gpunode(&gpunode("not-ready").with_gpus(8).build());
    index.apply_node(&node("no-inventory").build());
    index.apply_gpunode(&gpunode("no-node").with_gpus(8).build());
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index.apply_pod(&p().resource("r").build());

    let snapshot = default_snapshot(&index);
    let names: Vec<_> = snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["a"]);
    assert_eq!(eligible_names(&snapshot, "ml/p"), ["a"]);
}

#[test]
fn a_node_that_becomes_ready_again_is_a_candidate_again() {
    let mut index = index();
    add_gpu_node(&mut index, "a", 8);
    index.apply_node(&node("a").not_ready().build());
    assert!(default_snapshot(&index).nodes.is_empty());
    index.apply_node(&node("a").build());
    assert_eq!(default_snapshot(&index).nodes.len(), 1);
    index.delete_node("a");
    assert!(default_snapshot(&index).nodes.is_empty());
}

#[test]
fn node_selector_must_match_every_label() {
    let nodes = || {
        vec![
            node("a").label("zone", "x").label("tier", "gold"),
            node("b").label("zone", "x"),
            node("c"),
        ]
    };
    assert_eq!(
        eligible(nodes(), p().node_selector("zone", "x")),
        ["a", "b"]
    );
    assert_eq!(
        eligible(
            nodes(),
            p().node_selector("zone", "x").node_selector("tier", "gold")
        ),
        ["a"]
    );
}

#[test]
fn affinity_in_and_not_in() {
    let nodes = || {
        vec![
            node("a").label("gpu", "h100"),
            node("b").label("gpu", "a100"),
            node("c"),
        ]
    };
    let in_ = term(&[("gpu", "In", &["h100", "h200"])]);
    assert_eq!(eligible(nodes(), p().affinity_term(in_)), ["a"]);
    // NotIn also matches nodes without the label.
    let not_in = term(&[("gpu", "NotIn", &["h100"])]);
    assert_eq!(eligible(nodes(), p().affinity_term(not_in)), ["b", "c"]);
}

#[test]
fn affinity_exists_and_does_not_exist() {
    let nodes = || vec![node("a").label("gpu", "h100"), node("b")];
    assert_eq!(
        eligible(nodes(), p().affinity_term(term(&[("gpu", "Exists", &[])]))),
        ["a"]
    );
    assert_eq!(
        eligible(
            nodes(),
            p().affinity_term(term(&[("gpu", "DoesNotExist", &[])]))
        ),
        ["b"]
    );
}

#[test]
fn affinity_gt_and_lt_compare_integers() {
    let nodes = || {
        vec![
            node("a").label("cores", "64"),
            node("b").label("cores", "16"),
            node("c").label("cores", "many"),
            node("d"),
        ]
    };
    assert_eq!(
        eligible(
            nodes(),
            p().affinity_term(term(&[("cores", "Gt", &["32"])]))
        ),
        ["a"]
    );
    assert_eq!(
        eligible(
            nodes(),
            p().affinity_term(term(&[("cores", "Lt", &["32"])]))
        ),
        ["b"]
    );
    // A value that is not one integer matches nothing.
    assert!(
        eligible(
            nodes(),
            p().affinity_term(term(&[("cores", "Gt", &["1", "2"])]))
        )
        .is_empty()
    );
}

#[test]
fn affinity_terms_are_ored_and_expressions_anded() {
    let nodes = || {
        vec![
            node("a").label("zone", "x").label("gpu", "h100"),
            node("b").label("zone", "x"),
            node("c").label("zone", "y"),
        ]
    };
    let anded = term(&[("zone", "In", &["x"]), ("gpu", "Exists", &[])]);
    assert_eq!(eligible(nodes(), p().affinity_term(anded)), ["a"]);
    let ored = p()
        .affinity_term(term(&[("zone", "In", &["y"])]))
        .affinity_term(term(&[("gpu", "Exists", &[])]));
    assert_eq!(eligible(nodes(), ored), ["a", "c"]);
}

#[test]
fn an_empty_affinity_term_matches_nothing() {
    let empty = k8s_openapi::api::core::v1::NodeSelectorTerm::default();
    assert!(eligible(vec![node("a")], p().affinity_term(empty)).is_empty());
}

#[test]
fn affinity_match_fields_on_the_node_name() {
    let by_name = k8s_openapi::api::core::v1::NodeSelectorTerm {
        match_expressions: None,
        match_fields: term(&[("metadata.name", "In", &["b"])]).match_expressions,
    };
    assert_eq!(
        eligible(vec![node("a"), node("b")], p().affinity_term(by_name)),
        ["b"]
    );
}

#[test]
fn untolerated_no_schedule_and_no_execute_taints_exclude_a_node() {
    let nodes = || {
        vec![
            node("plain"),
            node("no-schedule").taint("dedicated", Some("ml"), "NoSchedule"),
            node("no-execute").taint("dedicated", Some("ml"), "NoExecute"),
            node("prefer").taint("dedicated", Some("ml"), "PreferNoSchedule"),
        ]
    };
    assert_eq!(eligible(nodes(), p()), ["plain", "prefer"]);
}

#[test]
fn equal_toleration_needs_the_same_value() {
    let nodes = || vec![node("a").taint("dedicated", Some("ml"), "NoSchedule")];
    let same = p().toleration(Some("dedicated"), "Equal", Some("ml"), Some("NoSchedule"));
    assert_eq!(eligible(nodes(), same), ["a"]);
    let other = p().toleration(Some("dedicated"), "Equal", Some("web"), Some("NoSchedule"));
    assert!(eligible(nodes(), other).is_empty());
}

#[test]
fn exists_toleration_matches_any_value_and_an_empty_key_every_taint() {
    let nodes = || {
        vec![
            node("a")
                .taint("dedicated", Some("ml"), "NoSchedule")
                .taint("gpu", None, "NoExecute"),
        ]
    };
    let one_key = p().toleration(Some("dedicated"), "Exists", None, None);
    assert!(
        eligible(nodes(), one_key).is_empty(),
        "the gpu taint is not tolerated"
    );
    let both = p()
        .toleration(Some("dedicated"), "Exists", None, None)
        .toleration(Some("gpu"), "Exists", None, Some("NoExecute"));
    assert_eq!(eligible(nodes(), both), ["a"]);
    let everything = p().toleration(None, "Exists", None, None);
    assert_eq!(eligible(nodes(), everything), ["a"]);
}

#[test]
fn toleration_effect_must_match_when_set() {
    let nodes = || vec![node("a").taint("dedicated", Some("ml"), "NoExecute")];
    let wrong_effect = p().toleration(Some("dedicated"), "Exists", None, Some("NoSchedule"));
    assert!(eligible(nodes(), wrong_effect).is_empty());
    let any_effect = p().toleration(Some("dedicated"), "Equal", Some("ml"), None);
    assert_eq!(eligible(nodes(), any_effect), ["a"]);
}
