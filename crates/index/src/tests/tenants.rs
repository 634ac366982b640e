//! Tenants: which namespaces share a quota, what each holds and waits for.

use super::*;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use wasmgpu_api::{GPUTenant, GPUTenantSpec};

fn tenant(name: &str, namespaces: &[&str], quota: u32, limit: Option<u32>) -> GPUTenant {
    GPUTenant::new(
        name,
        GPUTenantSpec {
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            namespace_selector: None,
            quota,
            limit,
            weight: 2,
            min_runtime_seconds: None,
        },
    )
}

/// Two tenants; `a-1` holds two GPUs and `a-2` waits for one; `b` waits for
/// two; `other` belongs to none.
fn two_tenants() -> Index {
    let mut index = index();
    add_gpu_node(&mut index, "n", 8);
    for ns in ["a-1", "a-2", "b", "other"] {
        index.apply_gpuresource(&gpuresource(ns, "one").build());
        index.apply_gpuresource(&gpuresource(ns, "two").count(2).build());
    }
    index.apply_pod(
        &pod("a-1", "running")
            .resource("two")
            .holds("n", &["GPU-n-0", "GPU-n-1"], Sharing::Exclusive, H100_MIB)
            .bound("n")
            .build(),
    );
    index.apply_pod(&pod("a-2", "waits").resource("one").build());
    index.apply_pod(&pod("b", "waits").resource("two").build());
    index.apply_pod(&pod("other", "waits").resource("one").build());
    index.apply_gputenant(&tenant("team-b", &["b"], 4, None));
    index.apply_gputenant(&tenant("team-a", &["a-*"], 2, Some(3)));
    index
}

#[test]
fn the_snapshot_lists_tenants_by_name_and_each_pod_names_its_own() {
    let snapshot = default_snapshot(&two_tenants());
    let names: Vec<_> = snapshot.tenants.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["team-a", "team-b"]);
    let a = &snapshot.tenants[0];
    assert_eq!((a.quota, a.limit, a.weight), (2, Some(3), 2));
    assert_eq!(
        (a.holding, a.waiting),
        (2, 1),
        "two held in a-1, one asked in a-2"
    );
    assert_eq!(
        (snapshot.tenants[1].holding, snapshot.tenants[1].waiting),
        (0, 2)
    );
    let tenant_of = |pod: &str| {
        snapshot
            .pending
            .iter()
            .find(|r| r.pod == pod)
            .map(|r| r.tenant)
            .unwrap()
    };
    assert_eq!(tenant_of("a-2/waits"), Some(0));
    assert_eq!(tenant_of("b/waits"), Some(1));
    assert_eq!(tenant_of("other/waits"), None, "no tenant matches it");
    assert_eq!(snapshot.running[0].tenant, Some(0));
}

#[test]
fn a_namespace_two_tenants_match_belongs_to_the_first_by_name() {
    let mut index = two_tenants();
    index.apply_gputenant(&tenant("all", &["*"], 0, None));
    assert_eq!(index.tenant_of("b"), Some("all"));
    index.delete_gputenant("all");
    assert_eq!(index.tenant_of("b"), Some("team-b"));
}

#[test]
fn an_invalid_tenant_matches_no_namespace_and_says_why() {
    let mut index = two_tenants();
    // Stored before the CRD's rule: quota above limit.
    index.apply_gputenant(&tenant("team-b", &["b"], 9, Some(4)));
    assert_eq!(index.tenant_of("b"), None);
    let views = index.tenant_views();
    let b = views.iter().find(|v| v.name == "team-b").unwrap();
    assert!(
        b.error.as_deref().unwrap().contains("above limit 4"),
        "{:?}",
        b.error
    );
    assert_eq!((b.holding, b.waiting), (0, 0));
}

#[test]
fn views_count_pods_and_namespaces() {
    let views = two_tenants().tenant_views();
    let a = &views[0];
    assert_eq!(a.name, "team-a");
    assert_eq!((a.pods_holding, a.pods_waiting), (1, 1));
    assert_eq!(a.namespaces_seen, ["a-1", "a-2"]);
    assert_eq!(a.error, None);
}

#[test]
fn no_tenants_no_table() {
    let mut index = two_tenants();
    index.reset_gputenants(&[]);
    let snapshot = default_snapshot(&index);
    assert!(snapshot.tenants.is_empty());
    assert!(snapshot.pending.iter().all(|r| r.tenant.is_none()));
}

#[test]
fn a_running_pod_is_protected_for_its_minimum_runtime() {
    let mut index = two_tenants();
    // a-1/running started at 1 s (its creation; no startTime).
    let protected = |index: &Index, now_ms: u64| {
        index.snapshot(DEFAULT_POLICY, 1, now_ms).snapshot.running[0].protected_ms
    };
    assert_eq!(protected(&index, 2_000), 0, "no minimum by default");

    index.set_min_runtime(std::time::Duration::from_secs(10));
    assert_eq!(protected(&index, 2_000), 9_000, "the controller's minimum");
    assert_eq!(protected(&index, 11_000), 0, "past it");

    let mut longer = tenant("team-a", &["a-*"], 2, Some(3));
    longer.spec.min_runtime_seconds = Some(60);
    index.apply_gputenant(&longer);
    assert_eq!(protected(&index, 11_000), 50_000, "the tenant's own");
    longer.spec.min_runtime_seconds = Some(0);
    index.apply_gputenant(&longer);
    assert_eq!(protected(&index, 2_000), 0, "a tenant may ask for none");
}

#[test]
fn devices_claims_hold_count_for_the_claims_tenant() {
    use crate::dra::tests::{allocated_claim, h100_slice};
    let mut index = two_tenants();
    index.apply_node(&node("d").build());
    index.apply_resourceslice(&h100_slice("d", 4));
    index.apply_resourceclaim(&allocated_claim(
        "b",
        "train",
        "d",
        &[("gpu-0", false), ("gpu-1", false)],
    ));
    // adminAccess watches a device without holding it.
    index.apply_resourceclaim(&allocated_claim("b", "watch", "d", &[("gpu-2", true)]));
    let snapshot = default_snapshot(&index);
    let b = snapshot
        .tenants
        .iter()
        .find(|t| t.name == "team-b")
        .unwrap();
    assert_eq!(b.holding, 2, "{b:?}");
    let a = snapshot
        .tenants
        .iter()
        .find(|t| t.name == "team-a")
        .unwrap();
    assert_eq!(a.holding, 2, "unchanged: {a:?}");
}

#[test]
fn a_selector_makes_a_labelled_namespace_the_tenants_until_relabelled() {
    let mut index = two_tenants();
    let mut by_label = tenant("labelled", &[], 0, None);
    by_label.spec.namespace_selector = Some(LabelSelector {
        match_labels: Some([("team".to_owned(), "x".to_owned())].into()),
        ..LabelSelector::default()
    });
    index.apply_gputenant(&by_label);
    assert_eq!(index.tenant_of("other"), None, "an unknown namespace");
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some("other".into());
    namespace.metadata.labels = Some([("team".to_owned(), "x".to_owned())].into());
    index.apply_namespace(&namespace);
    assert_eq!(index.tenant_of("other"), Some("labelled"));
    let snapshot = default_snapshot(&index);
    let labelled = snapshot.tenants.iter().position(|t| t.name == "labelled");
    let pending = snapshot.pending.iter().find(|r| r.pod == "other/waits");
    assert_eq!(pending.map(|r| r.tenant), Some(labelled.map(|p| p as u32)));
    namespace.metadata.labels = Some([("team".to_owned(), "y".to_owned())].into());
    index.apply_namespace(&namespace);
    assert_eq!(index.tenant_of("other"), None, "relabelled");
    namespace.metadata.labels = Some([("team".to_owned(), "x".to_owned())].into());
    index.reset_namespaces(&[namespace]);
    assert_eq!(index.tenant_of("other"), Some("labelled"), "after a relist");
    index.reset_namespaces(&[]);
    assert_eq!(index.tenant_of("other"), None);
}
