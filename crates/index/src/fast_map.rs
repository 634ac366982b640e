//! The hash map the index's hot paths use.

use std::collections::HashMap;

/// A hash map with aHash's randomly seeded hasher: keys are names users
/// choose, and the holdings are read several times a round.
pub(crate) type FastMap<K, V> = HashMap<K, V, ahash::RandomState>;
