//! Condition types and reasons the controller and agent write.
//!
//! Conditions follow the Kubernetes convention (`metav1.Condition`): `type`
//! in CamelCase, `status` `True`/`False`/`Unknown`, a CamelCase `reason` and a
//! human-readable `message`.

/// GPUResource: every referencing pod holds its GPUs. GPUNode: the agent
/// reads the node's GPUs.
pub const READY: &str = "Ready";
/// GPUResource: the spec is unusable (`reason` names the field).
pub const INVALID: &str = "Invalid";
/// GPUResource: the policy failed, or one of its decisions was refused.
pub const POLICY_ERROR: &str = "PolicyError";
/// GPUResource: a request can never be met by any node.
pub const UNSATISFIABLE: &str = "Unsatisfiable";
/// GPUResource: a pod holds a GPU that turned unhealthy (it keeps it until it
/// finishes).
pub const DEGRADED: &str = "Degraded";
/// GPUResource: pods hold GPUs allocated for an earlier spec (they keep
/// them until they finish; new pods get the current shape).
pub const SPEC_CHANGED: &str = "SpecChanged";
/// GPUNode: every GPU of the node is healthy (`reason` says why not).
pub const GPUS_HEALTHY: &str = "GPUsHealthy";

/// GPUTenant: it holds more GPUs than its `limit` (a limit lowered under
/// what it held); its pods keep their GPUs, new ones wait.
pub const OVER_LIMIT: &str = "OverLimit";
/// GPUTenant: it holds more GPUs than its `quota`; what is beyond may be
/// reclaimed by tenants under theirs.
pub const OVER_QUOTA: &str = "OverQuota";

/// Every condition type a GPUResource's status carries (docs/API.md lists
/// them; `host/tests/docs.rs` fails when the two differ).
pub const ON_GPURESOURCE: &[&str] = &[
    READY,
    INVALID,
    POLICY_ERROR,
    UNSATISFIABLE,
    DEGRADED,
    SPEC_CHANGED,
];

/// Every condition type a GPUNode's status carries (docs/API.md lists them).
pub const ON_GPUNODE: &[&str] = &[READY, GPUS_HEALTHY];

/// Every condition type a GPUTenant's status carries (docs/API.md lists them).
pub const ON_GPUTENANT: &[&str] = &[INVALID, OVER_LIMIT, OVER_QUOTA];

#[cfg(test)]
mod tests {
    use super::*;

    /// A type declared above but left out of both lists would be written
    /// and never documented.
    #[test]
    fn every_type_is_on_a_list() {
        let source = include_str!("conditions.rs");
        let declared: Vec<&str> = source
            .lines()
            .filter_map(|line| line.strip_prefix("pub const "))
            .filter_map(|rest| rest.split_once(": &str = \""))
            .filter_map(|(_, value)| value.strip_suffix("\";"))
            .collect();
        assert!(declared.len() >= 7, "read {declared:?}");
        for name in declared {
            assert!(
                ON_GPURESOURCE.contains(&name)
                    || ON_GPUNODE.contains(&name)
                    || ON_GPUTENANT.contains(&name),
                "condition type {name} is on none of ON_GPURESOURCE, ON_GPUNODE and ON_GPUTENANT in crates/api/src/conditions.rs: add it to the list of the kind that carries it (and to docs/API.md)"
            );
        }
    }
}
