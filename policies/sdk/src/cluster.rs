//! Round state: what is free on each node, updated as a policy places pods, so
//! a policy never hands out the same GPU twice within its own round.
//!
//! Finding a node does not scan the cluster per request: exclusive requests on
//! nodes of one GPU type go through free-count buckets, shared requests through
//! an index per request shape (model, memory, count) that orders the nodes by
//! headroom and catches up with the nodes commits touched since it was last
//! used, and whether a request could ever fit is worked out once per shape and
//! eligible set.

mod choose;
mod claims;
mod indexes;
mod nodes;
mod pick;
mod place;
mod preempt;
mod query;
mod running_on;
mod state;
mod want;

pub use query::GpuNow;
pub use state::Cluster;
pub use want::{Fit, NO_SHAPE, Shortfall, Want, devices_of, shape_of};

#[cfg(test)]
mod tests;
