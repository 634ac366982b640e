//! The contract's version and the bounds its values keep to.

/// The contract this crate describes, as components and snapshot files name it.
pub const CONTRACT: &str = "wasmgpu:policy@0.3.0";

/// The most GPUs (or MIG instances) one request may ask for, all on one node.
pub const MAX_COUNT: u32 = 16;

/// Longest pod, node or GPU name the host keeps from a decision, in bytes (a
/// `namespace/name` is at most 317); snapshot files hold names to it too.
pub const NAME_BYTES: usize = 512;
