//! Snapshot files: JSON read into the contract's `snapshot` record (see
//! `docs/SNAPSHOTS.md`), then held to the rules the controller's snapshots
//! obey ([`wasmgpu_contract::snapshot_check::check`]) before a policy sees them.

use std::path::Path;

use anyhow::Context;

use wasmgpu_contract::HostSnapshot;

pub(crate) use wasmgpu_contract::snapshot_file::parse;

/// Reads, parses and checks a snapshot file; the error names the file and
/// the offending entry.
pub(crate) fn read(path: &Path) -> anyhow::Result<HostSnapshot> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading snapshot {}", path.display()))?;
    let read = parse(&text).with_context(|| {
        format!(
            "{} is not a valid snapshot (see docs/SNAPSHOTS.md and `wasmgpu policy snapshot-schema`)",
            path.display()
        )
    })?;
    if let Some(old) = read.upgraded_from {
        eprintln!(
            "warning: {path} is a snapshot file of {old}, read as {contract}; rewrite it with \
             `wasmgpu policy upgrade-snapshot {path}`",
            old = old.describe(),
            contract = wasmgpu_contract::CONTRACT,
            path = path.display()
        );
    }
    Ok(read.snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use wasmgpu_contract::testing::shape;
    use wasmgpu_contract::types::Sharing;
    use wasmgpu_support::testing::arbitrary_json;

    const KEYS: &[&str] = &[
        "round",
        "nodes",
        "pending",
        "eligibleSets",
        "namespaces",
        "running",
        "tenants",
        "ask",
        "gpus",
        "nvlink",
        "config",
        "name",
        "labels",
        "gpus",
        "uuid",
        "index",
        "model",
        "memoryMiB",
        "allocatedMiB",
        "held",
        "models",
        "migProfiles",
        "gangs",
        "mig",
        "parent",
        "profile",
        "gang",
        "migProfile",
        "minMember",
        "bound",
        "sharedOwners",
        "numaNode",
        "nvlinkPeers",
        "healthy",
        "pod",
        "namespace",
        "resource",
        "count",
        "sharing",
        "priority",
        "createdMs",
        "eligibleSet",
    ];

    /// The demo snapshot with `changes` made to it: of the right shape,
    /// with contents anywhere from valid to nonsense.
    fn demo_with(changes: &[(u8, u64)]) -> String {
        let demo = include_str!("../../../policies/snapshots/demo.json");
        let mut host = wasmgpu_contract::snapshot_file::read(demo)
            .unwrap()
            .snapshot;
        let snapshot = &mut host.snapshot;
        for &(what, value) in changes {
            let small = (value % 24) as u32;
            let nodes = snapshot.nodes.len().max(1);
            let node = &mut snapshot.nodes[value as usize % nodes];
            let gpus = node.gpus.len().max(1);
            let gpu = node.gpus.get_mut(value as usize / 7 % gpus);
            let pending = snapshot.pending.len().max(1);
            let request = snapshot.pending.get_mut(value as usize / 3 % pending);
            match (what % 12, gpu, request) {
                (0, Some(gpu), _) => gpu.index = small,
                (1, Some(gpu), _) => gpu.allocated_mib = value,
                (2, Some(gpu), _) => gpu.shared_owners = small % 3,
                (3, Some(gpu), _) => {
                    gpu.held = !gpu.held;
                }
                (4, Some(gpu), _) => gpu.nvlink |= 1 << (small % 12),
                (5, _, _) => {
                    wasmgpu_contract::bits::insert(&mut snapshot.eligible_sets[0], small % 6)
                }
                (6, _, Some(request)) => shape(request).count = small,
                (7, _, Some(request)) => request.eligible_set = small % 4,
                (8, _, Some(request)) => shape(request).memory_mib = value,
                (9, _, Some(request)) => {
                    let shape = shape(request);
                    shape.sharing = match shape.sharing {
                        Sharing::Exclusive => Sharing::Shared,
                        Sharing::Shared => Sharing::Exclusive,
                    }
                }
                (10, _, _) => {
                    let at = value as usize % nodes;
                    snapshot.nodes.remove(at);
                    host.nodes.remove(at);
                }
                (11, Some(gpu), _) => gpu.memory_mib = value,
                _ => {}
            }
        }
        wasmgpu_contract::snapshot_file::to_json(&host).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn arbitrary_json_is_an_error_or_a_snapshot(json in arbitrary_json(KEYS)) {
            let _ = parse(&json.to_string());
        }

        #[test]
        fn arbitrary_text_is_an_error_or_a_snapshot(text in ".{0,64}") {
            let _ = parse(&text);
        }

        /// Whatever passes the checks, the shipped policies and the
        /// validator handle without a panic.
        #[test]
        fn arbitrary_contents_are_refused_or_decided(
            changes in proptest::collection::vec(
                (any::<u8>(), prop_oneof![0u64..100_000, any::<u64>()]), 0..4),
        ) {
            if let Ok(read) = parse(&demo_with(&changes)) {
                let host = read.snapshot;
                let snapshot = &host.snapshot;
                for decisions in [wasmgpu_binpack::allocate(snapshot), wasmgpu_spread::allocate(snapshot)] {
                    wasmgpu_contract::validate::validate_host(&host, &decisions);
                }
            }
        }
    }

    #[test]
    fn the_demo_snapshot_passes() {
        let demo = include_str!("../../../policies/snapshots/demo.json");
        assert!(parse(demo).is_ok());
        assert!(matches!(
            parse(&demo.replace("\"count\": 2", "\"count\": 0")),
            Err(wasmgpu_contract::snapshot_file::Error::Invalid(e)) if e.to_string().contains(".count: must be 1 to 16, got 0")
        ));
    }
}
