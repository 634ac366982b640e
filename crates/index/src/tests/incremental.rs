//! The holdings kept between readings (bound pods' use updated as pods
//! change) against the holdings read afresh from every source, after every
//! step of random sequences of watch events and the controller's own
//! records: pods created, bound, finished, deleted and recreated under
//! another UID, relists, bindings in flight sent, echoed, failed and
//! retried, ledger entries, gang reservations, nominations, claims
//! allocated and released, slices published and withdrawn.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::dra::tests::{allocated_claim, h100_slice};
use crate::facts::binding::PendingBinding;
use crate::facts::pod::PodFacts;
use crate::holdings::{Holdings, Release, ReleaseReason, Source};
use crate::key::ObjectKey;
use wasmgpu_api::{
    Allocation, GANG_RESERVATION_ANNOTATION, GangReservation, Nomination, PodAllocation,
    ReservedMember, Victim,
};

// === the holdings read afresh ===

/// What holders keep on one GPU: its exclusive holder, shared MiB, shared
/// holders.
type Use = (Option<String>, u64, u32);

/// One holding: pod, UID, GPUResource name, allocation, source.
type Live = (String, String, String, PodAllocation, Source);

/// The holdings in a form both readings compare in.
#[derive(Debug, PartialEq)]
struct Plain {
    gpus: BTreeMap<(String, String), Use>,
    holders: BTreeSet<String>,
    live: Vec<Live>,
    releases: Vec<Release>,
}

/// The holdings as the index reads them now.
fn plain(index: &Index, holdings: &Holdings<'_>) -> Plain {
    for h in holdings.live() {
        assert!(
            std::ptr::eq(
                h.facts.map_or(std::ptr::null(), |f| f as *const PodFacts),
                index
                    .key_to_pod
                    .get(h.pod)
                    .map_or(std::ptr::null(), |f| f as *const PodFacts)
            ),
            "{} carries the pod's facts",
            h.pod
        );
    }
    let holders: BTreeSet<String> = holdings.holders().map(ToString::to_string).collect();
    let keys = index.key_to_pod.keys().chain(index.key_to_in_flight.keys());
    for key in keys {
        assert_eq!(
            holdings.is_holder(key),
            holders.contains(&key.to_string()),
            "{key}"
        );
        if let Some(facts) = index.key_to_pod.get(key) {
            assert_eq!(holdings.holds(key, facts), holdings.is_holder(key), "{key}");
        }
    }
    for ((node, uuid), gpu) in holdings.gpus() {
        let on_node = holdings.on_node(node);
        assert!(on_node.holds(uuid));
        assert_eq!(on_node.gpu(uuid), Some(gpu));
    }
    Plain {
        gpus: holdings
            .gpus()
            .into_iter()
            .map(|((node, uuid), gpu)| {
                let owner = holdings.exclusive_owner(node, uuid);
                assert_eq!(owner.is_some(), gpu.exclusive, "{node} {uuid}");
                let owner = owner.map(ToString::to_string);
                (
                    (node.to_string(), uuid.to_string()),
                    (owner, gpu.shared_mib, gpu.shared_owners),
                )
            })
            .collect(),
        holders,
        live: holdings
            .live()
            .map(|h| {
                (
                    h.pod.to_string(),
                    h.uid.to_string(),
                    h.resource_name.to_string(),
                    h.allocation.clone(),
                    h.source,
                )
            })
            .collect(),
        releases: holdings.releases.clone(),
    }
}

/// What one holder keeps on one GPU, read afresh.
#[derive(Default)]
struct FreshUse<'a> {
    exclusive_owner: Option<Cow<'a, ObjectKey>>,
    shared_mib: u64,
    shared_owners: u32,
}

/// Every holding read afresh from every source, every pod included: the
/// rules of `holdings.rs` as they were before bound pods' use was kept.
fn recompute(index: &Index) -> Plain {
    let mut gpus: HashMap<(&str, &str), FreshUse<'_>> = HashMap::new();
    let mut holders: HashSet<Cow<'_, ObjectKey>> = HashSet::new();
    let mut live: Vec<Live> = Vec::new();
    let mut releases = Vec::new();
    macro_rules! hold {
        ($pod:expr, $uid:expr, $node:expr, $devices:expr, $sharing:expr, $resource:expr, $allocation:expr, $source:expr) => {{
            let pod: Cow<'_, ObjectKey> = $pod;
            for device in $devices {
                let gpu = gpus.entry(($node, device.uuid.as_str())).or_default();
                match $sharing {
                    Sharing::Exclusive => {
                        gpu.exclusive_owner.get_or_insert_with(|| pod.clone());
                    }
                    Sharing::Shared => {
                        gpu.shared_mib = gpu.shared_mib.saturating_add(device.memory_mib);
                        gpu.shared_owners += 1;
                    }
                }
            }
            holders.insert(pod.clone());
            live.push((
                pod.to_string(),
                $uid.to_string(),
                $resource.to_string(),
                $allocation,
                $source,
            ));
        }};
    }
    for (key, pod) in &index.key_to_pod {
        if pod.terminal || pod.node_name.is_none() {
            continue;
        }
        if let Some(Ok(a)) = &pod.allocation {
            hold!(
                Cow::Borrowed(key),
                pod.uid,
                a.node.as_str(),
                &a.devices,
                a.sharing,
                a.resource,
                a.clone(),
                Source::Pod
            );
        }
    }
    for (claim, device) in index.dra.allocated() {
        if let Some((node, uuid)) = index.dra.locate(device) {
            gpus.entry((node, uuid))
                .or_default()
                .exclusive_owner
                .get_or_insert(Cow::Borrowed(claim));
        }
    }
    for (key, pod) in &index.key_to_pod {
        if let Some(nomination) = pod.nomination()
            && !holders.contains(key)
        {
            let a = &nomination.allocation;
            hold!(
                Cow::Borrowed(key),
                pod.uid,
                a.node.as_str(),
                &a.devices,
                a.sharing,
                a.resource,
                a.clone(),
                Source::Nomination
            );
        }
    }
    for (key, in_flight) in &index.key_to_in_flight {
        let is_live = index
            .key_to_pod
            .get(key)
            .is_some_and(|pod| pod.uid == in_flight.uid && !pod.terminal);
        if is_live && !holders.contains(key) {
            let a = &in_flight.allocation;
            hold!(
                Cow::Borrowed(key),
                in_flight.uid,
                a.node.as_str(),
                &a.devices,
                a.sharing,
                a.resource,
                a.clone(),
                Source::InFlight
            );
        }
    }
    for (group, gang) in &index.key_to_gang {
        let Some(reservation) = &gang.reservation else {
            continue;
        };
        for (name, member) in &reservation.members {
            let pod = ObjectKey::new(&group.namespace, name);
            let waiting = match index.key_to_pod.get(&pod) {
                Some(facts) => facts.uid == member.uid && facts.unplaced(),
                None => !index.pods_listed,
            };
            if waiting && !holders.contains(&pod) {
                let a = &member.allocation;
                hold!(
                    Cow::Owned(pod),
                    member.uid,
                    a.node.as_str(),
                    &a.devices,
                    a.sharing,
                    a.resource,
                    a.clone(),
                    Source::Reservation
                );
            }
        }
    }
    for (resource, state) in &index.key_to_resource {
        for entry in &state.allocations {
            let pod = ObjectKey::new(&resource.namespace, &entry.pod);
            let reason = staleness(index, &pod, entry).or_else(|| {
                index
                    .key_to_pod
                    .get(&pod)
                    .filter(|facts| facts.node_name.is_some())
                    .and_then(|facts| facts.allocation.as_ref())
                    .is_some_and(|allocation| allocation.is_ok())
                    .then_some(ReleaseReason::Moved)
            });
            match reason {
                Some(reason) => releases.push(Release {
                    resource: resource.clone(),
                    pod: entry.pod.clone(),
                    pod_uid: entry.pod_uid.clone(),
                    reason,
                }),
                None if holders.contains(&pod) => {}
                None => hold!(
                    Cow::Owned(pod),
                    entry.pod_uid,
                    entry.node.as_str(),
                    &entry.devices,
                    entry.sharing,
                    resource.name,
                    PodAllocation {
                        resource: resource.name.clone(),
                        node: entry.node.clone(),
                        sharing: entry.sharing,
                        devices: entry.devices.clone(),
                        policy: entry.policy.clone(),
                    },
                    Source::Ledger
                ),
            }
        }
    }
    Plain {
        gpus: gpus
            .into_iter()
            .map(|((node, uuid), gpu)| {
                let owner = gpu.exclusive_owner.map(|o| o.to_string());
                (
                    (node.to_string(), uuid.to_string()),
                    (owner, gpu.shared_mib, gpu.shared_owners),
                )
            })
            .collect(),
        holders: holders.iter().map(ToString::to_string).collect(),
        live,
        releases,
    }
}

fn staleness(index: &Index, pod: &ObjectKey, entry: &Allocation) -> Option<ReleaseReason> {
    if !index.pods_listed {
        return None;
    }
    match index.key_to_pod.get(pod) {
        None => Some(ReleaseReason::PodDeleted),
        Some(facts) if facts.uid != entry.pod_uid => Some(ReleaseReason::PodReplaced),
        Some(facts) if facts.terminal => Some(ReleaseReason::PodFinished),
        Some(_) => None,
    }
}

/// Pods per GPUResource counted from every pod and holding, as each
/// round's report counted them before they were kept (`tally`).
fn counts_afresh(index: &Index) -> HashMap<ObjectKey, crate::views::PodCounts> {
    let holdings = index.holdings();
    let mut counts: HashMap<ObjectKey, crate::views::PodCounts> = HashMap::new();
    for holding in holdings.live() {
        let key = ObjectKey::new(&holding.pod.namespace, holding.resource_name);
        counts.entry(key).or_default().holding += 1;
    }
    for (key, pod) in &index.key_to_pod {
        if let Some(resource) = pod.resource.as_deref()
            && !pod.terminal
        {
            let key = ObjectKey::new(&key.namespace, resource);
            counts.entry(key).or_default().referencing += 1;
        }
    }
    counts
}

// === random steps ===

/// xorshift64*: small, seeded, the same sequence on every machine.
pub(super) struct Rng(u64);

impl Rng {
    /// The sequence of seed `seed` (the same on every machine).
    pub(super) fn seeded(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub(super) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const NAMESPACES: [&str; 2] = ["ml", "lab"];
const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
/// `n0`, `n1`: GPUNodes of 3 GPUs (GPU 2 of `n0` split in two MIG
/// instances); `n2`: 2 GPUs a DRA driver publishes, when its slice is
/// there; `gone`: no node.
const NODES: [&str; 4] = ["n0", "n1", "n2", "gone"];
const MIBS: [u64; 4] = [0, 10_000, H100_MIB, u64::MAX / 2];

fn uuids_of(node: &str) -> Vec<String> {
    let mut uuids: Vec<String> = (0..3).map(|g| format!("GPU-{node}-{g}")).collect();
    if node == "n0" {
        uuids.push("MIG-n0-2-0".into());
        uuids.push("MIG-n0-2-1".into());
    }
    uuids.push("GPU-unknown".into());
    uuids
}

fn random_key(rng: &mut Rng) -> ObjectKey {
    ObjectKey::new(*rng.pick(&NAMESPACES), *rng.pick(&NAMES))
}

/// One of three UIDs a pod of that name may have (recreated under another).
fn random_uid(rng: &mut Rng, key: &ObjectKey) -> String {
    format!("uid-{}-{}-{}", key.namespace, key.name, rng.below(3))
}

fn random_allocation(rng: &mut Rng) -> PodAllocation {
    let node = *rng.pick(&NODES);
    let uuids = uuids_of(node);
    let mib = *rng.pick(&MIBS);
    let picked: Vec<&str> = (0..rng.below(4))
        .map(|_| rng.pick(&uuids).as_str())
        .collect();
    PodAllocation {
        resource: rng.pick(&["r", "s"]).to_string(),
        node: node.into(),
        sharing: if rng.chance(30) {
            Sharing::Shared
        } else {
            Sharing::Exclusive
        },
        devices: devices(&picked, mib),
        policy: PolicyRef {
            name: DEFAULT_POLICY.into(),
            digest: "sha256:00".into(),
        },
    }
}

trait Recorded {
    /// The pod with `allocation` recorded on it, as a binding records it.
    fn recorded(self, allocation: &PodAllocation) -> Self;
}

impl Recorded for TestPod {
    fn recorded(self, allocation: &PodAllocation) -> Self {
        allocation
            .annotations()
            .iter()
            .fold(self, |pod, (k, v)| pod.annotation(k, v))
    }
}

fn random_pod(rng: &mut Rng, key: &ObjectKey) -> Pod {
    let uid = random_uid(rng, key);
    let mut pod = pod(&key.namespace, &key.name).uid(&uid).resource("r");
    let allocation = random_allocation(rng);
    match rng.below(10) {
        // Pending.
        0 | 1 => {}
        // Bound with its allocation, running.
        2..=4 => pod = pod.recorded(&allocation).bound(&allocation.node),
        // Bound without an allocation, or with an unreadable one.
        5 => pod = pod.bound("n1"),
        6 => {
            pod = pod
                .annotation("wasmgpu.io/allocation", "{not json")
                .bound("n0")
        }
        // Recorded but not bound (yet).
        7 => pod = pod.recorded(&allocation),
        // Waiting on a nomination, maybe made for an earlier pod of the
        // name, maybe already bound.
        _ => {
            let nomination = Nomination {
                uid: if rng.chance(70) {
                    uid.clone()
                } else {
                    random_uid(rng, key)
                },
                allocation: allocation.clone(),
                victims: vec![Victim {
                    namespace: key.namespace.clone(),
                    name: rng.pick(&NAMES).to_string(),
                    uid: "uid-victim".into(),
                }],
                claims: Vec::new(),
            };
            let (k, v) = nomination.annotation();
            pod = pod.annotation(&k, &v);
            if rng.chance(20) {
                pod = pod.recorded(&allocation).bound(&allocation.node);
            }
        }
    }
    if rng.chance(15) {
        let phase = *rng.pick(&["Succeeded", "Failed"]);
        pod = pod.phase(phase);
    }
    if rng.chance(10) {
        pod = pod.deleting();
    }
    if rng.chance(5) {
        pod = pod.scheduler("default-scheduler");
    }
    pod.build()
}

fn random_binding(rng: &mut Rng) -> PendingBinding {
    let key = random_key(rng);
    PendingBinding {
        uid: random_uid(rng, &key),
        pod: key,
        allocation: random_allocation(rng),
        claims: Vec::new(),
    }
}

fn random_gpuresource(rng: &mut Rng, namespace: &str, name: &str) -> wasmgpu_api::GPUResource {
    let mut resource = gpuresource(namespace, name).build();
    let entries = (0..rng.below(4))
        .map(|_| {
            let key = ObjectKey::new(namespace, *rng.pick(&NAMES));
            let a = random_allocation(rng);
            Allocation {
                pod: key.name.clone(),
                pod_uid: random_uid(rng, &key),
                node: a.node,
                sharing: a.sharing,
                devices: a.devices,
                policy: a.policy,
            }
        })
        .collect();
    resource
        .status
        .get_or_insert_with(Default::default)
        .allocations = entries;
    resource
}

fn random_podgroup(rng: &mut Rng, namespace: &str) -> wasmgpu_api::PodGroup {
    let mut group = podgroup(namespace, "g", 2, None);
    if rng.chance(80) {
        let members = (0..rng.below(4))
            .map(|_| {
                let key = ObjectKey::new(namespace, *rng.pick(&NAMES));
                let member = ReservedMember {
                    uid: random_uid(rng, &key),
                    allocation: random_allocation(rng),
                };
                (key.name, member)
            })
            .collect();
        let reservation = serde_json::to_string(&GangReservation { members }).unwrap();
        group.metadata.annotations =
            Some([(GANG_RESERVATION_ANNOTATION.to_string(), reservation)].into());
    }
    group
}

/// Applies one random event to `index`; `pods` is what the pod watch has
/// delivered last, by key, for relists.
pub(super) fn step(
    rng: &mut Rng,
    index: &mut Index,
    pods: &mut BTreeMap<ObjectKey, Pod>,
) -> String {
    match rng.below(100) {
        0..=34 => {
            let key = random_key(rng);
            let pod = random_pod(rng, &key);
            index.apply_pod(&pod);
            pods.insert(key.clone(), pod);
            format!("apply pod {key}")
        }
        35..=44 => {
            let key = random_key(rng);
            index.delete_pod(&key.namespace, &key.name);
            pods.remove(&key);
            format!("delete pod {key}")
        }
        45..=47 => {
            // A relist: some pods gone, some changed, some new.
            let mut listed: Vec<Pod> = Vec::new();
            let keys: Vec<ObjectKey> = pods.keys().cloned().collect();
            for key in keys {
                match rng.below(4) {
                    0 => {
                        pods.remove(&key);
                    }
                    1 => {
                        let pod = random_pod(rng, &key);
                        pods.insert(key, pod.clone());
                        listed.push(pod);
                    }
                    _ => listed.push(pods[&key].clone()),
                }
            }
            let key = random_key(rng);
            if let std::collections::btree_map::Entry::Vacant(entry) = pods.entry(key.clone()) {
                let pod = random_pod(rng, &key);
                entry.insert(pod.clone());
                listed.push(pod);
            }
            index.reset_pods(&listed);
            "relist pods".into()
        }
        48..=57 => {
            let binding = random_binding(rng);
            index.begin_binding(&binding);
            format!("begin binding {}", binding.pod)
        }
        58..=63 => {
            let key = random_key(rng);
            let uid = match index.key_to_in_flight.get(&key) {
                Some(in_flight) if rng.chance(80) => in_flight.uid.clone(),
                _ => random_uid(rng, &key),
            };
            if rng.chance(50) {
                index.end_binding(&key, &uid);
                format!("end binding {key}")
            } else {
                index.retry_binding(&key, &uid);
                format!("retry binding {key}")
            }
        }
        64 => {
            index.retry_all_bindings();
            "retry all bindings".into()
        }
        65..=72 => {
            let namespace = *rng.pick(&NAMESPACES);
            let name = *rng.pick(&["r", "s"]);
            if rng.chance(80) {
                index.apply_gpuresource(&random_gpuresource(rng, namespace, name));
                format!("apply gpuresource {namespace}/{name}")
            } else {
                index.delete_gpuresource(namespace, name);
                format!("delete gpuresource {namespace}/{name}")
            }
        }
        73 => {
            let resources: Vec<_> = (0..rng.below(3))
                .map(|_| {
                    let (namespace, name) = (*rng.pick(&NAMESPACES), *rng.pick(&["r", "s"]));
                    random_gpuresource(rng, namespace, name)
                })
                .collect();
            index.reset_gpuresources(&resources);
            "relist gpuresources".into()
        }
        74..=79 => {
            let namespace = *rng.pick(&NAMESPACES);
            if rng.chance(75) {
                index.apply_podgroup(&random_podgroup(rng, namespace));
                format!("apply podgroup {namespace}/g")
            } else {
                index.delete_podgroup(namespace, "g");
                format!("delete podgroup {namespace}/g")
            }
        }
        80..=89 => {
            let namespace = *rng.pick(&NAMESPACES);
            let name = format!("claim-{}", rng.below(3));
            if rng.chance(70) {
                let devices: Vec<(String, bool)> = (0..1 + rng.below(2))
                    .map(|_| (format!("gpu-{}", rng.below(3)), rng.chance(15)))
                    .collect();
                let devices: Vec<(&str, bool)> =
                    devices.iter().map(|(d, a)| (d.as_str(), *a)).collect();
                index.apply_resourceclaim(&allocated_claim(namespace, &name, "n2", &devices));
                format!("allocate claim {namespace}/{name}")
            } else {
                index.delete_resourceclaim(namespace, &name);
                format!("delete claim {namespace}/{name}")
            }
        }
        90..=92 => {
            if rng.chance(70) {
                index.apply_resourceslice(&h100_slice("n2", 2));
                "publish n2's slice".into()
            } else {
                let name = h100_slice("n2", 2).metadata.name.unwrap_or_default();
                index.delete_resourceslice(&name);
                "withdraw n2's slice".into()
            }
        }
        _ => {
            // What the round itself reads: every view over the holdings.
            let _ = index.round_start();
            let _ = index.snapshots(1, 0);
            let _ = index.round_report(0);
            "a round's reading".into()
        }
    }
}

/// A cluster of the nodes in [`NODES`], pods not listed yet.
pub(super) fn random_cluster() -> Index {
    let mut index = Index::new(DEFAULT_POLICY);
    for name in ["n0", "n1"] {
        index.apply_node(&node(name).build());
        let mut gpunode = gpunode(name).with_gpus(3);
        if name == "n0" {
            gpunode = gpunode.mig(2, &[("3g.40gb", 40_000), ("3g.40gb", 40_000)]);
        }
        index.apply_gpunode(&gpunode.build());
    }
    index.apply_node(&node("n2").build());
    index.apply_resourceslice(&h100_slice("n2", 2));
    index.apply_gpuresource(&gpuresource("ml", "r").build());
    index
}

#[test]
fn the_holdings_kept_between_readings_are_those_read_afresh() {
    for seed in 1..=60u64 {
        let mut rng = Rng::seeded(seed);
        let mut index = random_cluster();
        let mut pods = BTreeMap::new();
        let mut done = Vec::new();
        for _ in 0..400 {
            done.push(step(&mut rng, &mut index, &mut pods));
            let kept = plain(&index, &index.holdings());
            let fresh = recompute(&index);
            assert_eq!(
                kept,
                fresh,
                "seed {seed}, after {} steps, the last: {:?}",
                done.len(),
                &done[done.len().saturating_sub(5)..]
            );
            assert_eq!(
                index.pod_counts_in(&index.holdings()),
                counts_afresh(&index),
                "seed {seed}: pods per GPUResource, after {} steps, the last: {:?}",
                done.len(),
                &done[done.len().saturating_sub(5)..]
            );
        }
    }
}

#[test]
fn the_random_steps_reach_every_source() {
    // The equivalence above means little unless the steps make each
    // source hold something now and then.
    let mut sources = BTreeSet::new();
    let mut releases = BTreeSet::new();
    let (mut shared, mut contested, mut claimed) = (false, false, false);
    for seed in 1..=60u64 {
        let mut rng = Rng::seeded(seed);
        let mut index = random_cluster();
        let mut pods = BTreeMap::new();
        for _ in 0..400 {
            step(&mut rng, &mut index, &mut pods);
            let fresh = recompute(&index);
            sources.extend(fresh.live.iter().map(|l| format!("{:?}", l.4)));
            releases.extend(fresh.releases.iter().map(|r| format!("{:?}", r.reason)));
            shared |= fresh.gpus.values().any(|u| u.2 > 1);
            claimed |= fresh
                .gpus
                .values()
                .any(|u| u.0.as_deref().is_some_and(|o| o.contains("claim")));
            let exclusive = fresh
                .live
                .iter()
                .filter(|l| l.3.sharing == Sharing::Exclusive)
                .flat_map(|l| l.3.devices.iter().map(|d| (l.3.node.clone(), &d.uuid)))
                .collect::<Vec<_>>();
            let distinct: BTreeSet<_> = exclusive.iter().collect();
            contested |= distinct.len() < exclusive.len();
        }
    }
    assert_eq!(
        sources.into_iter().collect::<Vec<_>>(),
        ["InFlight", "Ledger", "Nomination", "Pod", "Reservation"]
    );
    assert_eq!(releases.len(), 4, "{releases:?}");
    assert!(shared && contested && claimed);
}
