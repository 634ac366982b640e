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
