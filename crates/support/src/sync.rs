//! One rule for poisoned locks: take the lock back.
//!
//! Every lock here guards a map, a queue or a counter that each critical
//! section leaves whole (no section panics halfway through a change it
//! means to finish), so a panic elsewhere while the lock was held leaves
//! nothing to repair. Propagating the poison would turn one panic into a
//! panic of every task that uses the lock after it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking it back if a panic poisoned it.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
