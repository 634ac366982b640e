//! # Helpers every wasmgpu crate shares
//!
//! * [`lock`]: one rule for poisoned locks (take the lock back).
//! * [`error_chain`]: an error and its sources on one line, for logs.
//! * [`cut`]: text cut to a bound at a character boundary, marked `…`.
//! * `testing` (feature `testing`): proptest strategies for the tests of
//!   what reads files and API objects.
//!
//! It sits below every other crate of the host and depends on none of them.
#![forbid(unsafe_code)]

mod error_chain;
pub mod sync;
#[cfg(feature = "testing")]
pub mod testing;
mod text;

pub use error_chain::error_chain;
pub use sync::lock;
pub use text::cut;
