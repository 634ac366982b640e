//! Names of namespaced objects.

use std::fmt;

/// A namespaced object's identity, shown as `namespace/name` (the form pods
/// and GPUResources take in snapshots and decisions).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `name` in `namespace`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key written `namespace/name` (as snapshots and decisions name
    /// pods and GPUResources); `None` without a `/`.
    pub fn parse(key: &str) -> Option<Self> {
        key.split_once('/')
            .map(|(namespace, name)| Self::new(namespace, name))
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::ObjectKey;

    #[test]
    fn parse_reads_what_display_writes() {
        let key = ObjectKey::new("ml", "trainer-0");
        assert_eq!(ObjectKey::parse(&key.to_string()), Some(key));
        assert_eq!(ObjectKey::parse("no-namespace"), None);
    }
}
