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
/// GPUNode: every GPU of the node is healthy (`reason` says why not).
pub const GPUS_HEALTHY: &str = "GPUsHealthy";
