//! The policies the controller decides with, by name.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::api::PolicyRef;
use crate::engine::{Engine, LoadedPolicy};

/// A policy ready to decide: the loaded component and its parameters.
#[derive(Clone)]
pub struct ActivePolicy {
    /// The policy's name (as GPUResources name it).
    pub name: String,
    /// The compiled, described component.
    pub loaded: LoadedPolicy,
    /// Handed to the policy as `snapshot.config`.
    pub config: String,
}

impl ActivePolicy {
    /// The reference a ledger entry records.
    pub fn reference(&self) -> PolicyRef {
        PolicyRef {
            name: self.name.clone(),
            digest: self.loaded.digest().to_string(),
        }
    }
}

/// Where a policy comes from on disk.
#[derive(Clone, Debug)]
pub struct PolicySource {
    /// The policy's name.
    pub name: String,
    /// The `.wasm` component.
    pub wasm: PathBuf,
    /// Its parameters (`config.json`), if any.
    pub config: Option<PathBuf>,
}

/// Active policies by name. Cheap to clone: rounds take a copy and keep
/// deciding with it while the set changes.
#[derive(Clone, Default)]
pub struct PolicySet {
    name_to_policy: BTreeMap<String, Arc<ActivePolicy>>,
}

/// A policy that could not be loaded from its files.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("policy {name:?}: cannot read {path}: {source}")]
    Read {
        /// The policy.
        name: String,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not JSON.
    #[error("policy {name:?}: {path} is not JSON: {source}")]
    Config {
        /// The policy.
        name: String,
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// The engine refused the component.
    #[error("policy {name:?}: {path}: {source}")]
    Engine {
        /// The policy.
        name: String,
        /// The file.
        path: PathBuf,
        /// Why.
        source: crate::engine::PolicyError,
    },
}

// === impl PolicySet ===

impl PolicySet {
    /// Loads every source; the first that fails stops the load.
    pub fn from_files(engine: &Engine, sources: &[PolicySource]) -> Result<Self, LoadError> {
        let mut set = Self::default();
        for source in sources {
            let policy = load_file(engine, source)?;
            tracing::info!(
                policy = %policy.name,
                digest = %policy.loaded.digest(),
                version = %policy.loaded.info().version,
                "Loaded policy"
            );
            set.insert(policy);
        }
        Ok(set)
    }

    /// Makes `policy` the active version of its name.
    pub fn insert(&mut self, policy: ActivePolicy) {
        self.name_to_policy
            .insert(policy.name.clone(), Arc::new(policy));
    }

    /// The active policy called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<ActivePolicy>> {
        self.name_to_policy.get(name)
    }

    /// Names of the active policies.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.name_to_policy.keys().map(String::as_str)
    }
}

fn load_file(engine: &Engine, source: &PolicySource) -> Result<ActivePolicy, LoadError> {
    let name = source.name.clone();
    let bytes = std::fs::read(&source.wasm).map_err(|e| LoadError::Read {
        name: name.clone(),
        path: source.wasm.clone(),
        source: e,
    })?;
    let config = match &source.config {
        None => String::new(),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| LoadError::Read {
                name: name.clone(),
                path: path.clone(),
                source: e,
            })?;
            serde_json::from_str::<serde_json::Value>(&text).map_err(|e| LoadError::Config {
                name: name.clone(),
                path: path.clone(),
                source: e,
            })?;
            text
        }
    };
    let loaded = engine.load(&bytes).map_err(|e| LoadError::Engine {
        name: name.clone(),
        path: source.wasm.clone(),
        source: e,
    })?;
    Ok(ActivePolicy {
        name,
        loaded,
        config,
    })
}
