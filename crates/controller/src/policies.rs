//! The policies the controller decides with, by name.
//!
//! ```text
//!  --policy files ──▶ files      ┐
//!  policy ConfigMaps ▶ configmaps ┼─▶ get(name): ConfigMap version, else file version
//!  replaced versions ▶ previous   ┘   previous(name): the version active before (last good)
//!  shadow ConfigMaps ─▶ shadows ──────▶ shadows_of(primary): called after it, never applied
//! ```
//!
//! A shadow (`wasmgpu.io/shadow-of: <primary>`) is loaded by the same rules
//! as any version, but `get` never returns it: it decides for no pod.
//!
//! Rounds look a policy up at the start of each call and keep the `Arc` they
//! got: a swap never changes a call in flight.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use wasmgpu_api::PolicyRef;
use wasmgpu_engine::{Engine, LoadedPolicy};

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
        source: wasmgpu_engine::PolicyError,
    },
}

impl LoadError {
    /// A short, stable label for logs and metrics: `read`, `config`, or
    /// the engine's kind of refusal.
    pub fn kind(&self) -> &'static str {
        match self {
            LoadError::Read { .. } => "read",
            LoadError::Config { .. } => "config",
            LoadError::Engine { source, .. } => source.kind(),
        }
    }
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

    /// Removes the policy called `name`; returns it.
    pub fn remove(&mut self, name: &str) -> Option<Arc<ActivePolicy>> {
        self.name_to_policy.remove(name)
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

/// The policies rounds decide with, shared with the ConfigMap loader; a
/// ConfigMap's version of a name overrides a `--policy` file of that name.
#[derive(Default)]
pub struct Policies {
    layers: RwLock<Layers>,
}

#[derive(Default)]
struct Layers {
    files: PolicySet,
    configmaps: PolicySet,
    /// The version each name had before its latest swap, for `last-good`.
    previous: BTreeMap<String, Arc<ActivePolicy>>,
    /// Why the latest ConfigMap version of a name was rejected, while it is
    /// the latest.
    rejected: BTreeMap<String, String>,
    /// Shadows by their own name: the primary they shadow, and the version.
    shadows: BTreeMap<String, (String, Arc<ActivePolicy>)>,
}

// === impl Policies ===

impl Policies {
    /// Starts with the policies loaded from files.
    pub fn new(files: PolicySet) -> Arc<Self> {
        Arc::new(Self {
            layers: RwLock::new(Layers {
                files,
                ..Default::default()
            }),
        })
    }

    /// The active version of `name`: its ConfigMap's, else its file's.
    pub fn get(&self, name: &str) -> Option<Arc<ActivePolicy>> {
        let layers = self.read();
        layers
            .configmaps
            .get(name)
            .or_else(|| layers.files.get(name))
            .cloned()
    }

    /// The version `name` had before its latest swap, if any.
    pub fn previous(&self, name: &str) -> Option<Arc<ActivePolicy>> {
        self.read().previous.get(name).cloned()
    }

    /// Names of the active policies.
    pub fn names(&self) -> Vec<String> {
        let layers = self.read();
        let mut names: Vec<String> = layers
            .files
            .names()
            .chain(layers.configmaps.names())
            .map(str::to_string)
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Makes `policy` the active version of its name (from its ConfigMap);
    /// the version it replaces becomes the previous one. A shadow of that
    /// name stops shadowing.
    pub fn activate(&self, policy: ActivePolicy) {
        let name = policy.name.clone();
        let replaced = self.get(&name);
        let mut layers = self.write();
        layers.rejected.remove(&name);
        layers.shadows.remove(&name);
        layers.configmaps.insert(policy);
        if let Some(replaced) = replaced {
            layers.previous.insert(name, replaced);
        }
    }

    /// Makes `policy` a shadow of `primary`: called after it on the same
    /// snapshot, its decisions compared, never applied. A ConfigMap version
    /// of the same name that decided stops deciding (a file version of that
    /// name, if any, decides again).
    pub fn activate_shadow(&self, policy: ActivePolicy, primary: &str) {
        let name = policy.name.clone();
        let mut layers = self.write();
        layers.rejected.remove(&name);
        layers.previous.remove(&name);
        layers.configmaps.remove(&name);
        layers
            .shadows
            .insert(name, (primary.to_string(), Arc::new(policy)));
    }

    /// The shadows of `primary`, by name.
    pub fn shadows_of(&self, primary: &str) -> Vec<Arc<ActivePolicy>> {
        self.read()
            .shadows
            .values()
            .filter(|(of, _)| of == primary)
            .map(|(_, policy)| Arc::clone(policy))
            .collect()
    }

    /// The shadow called `name`: the policy it shadows, and its version.
    pub fn shadow(&self, name: &str) -> Option<(String, Arc<ActivePolicy>)> {
        self.read().shadows.get(name).cloned()
    }

    /// Unloads the ConfigMap version of `name` (its ConfigMap is gone); a
    /// file version of that name, if any, decides again. Returns whether a
    /// version was unloaded.
    pub fn unload(&self, name: &str) -> bool {
        let mut layers = self.write();
        layers.previous.remove(name);
        layers.rejected.remove(name);
        let shadow = layers.shadows.remove(name).is_some();
        layers.configmaps.remove(name).is_some() || shadow
    }

    /// Records why the latest ConfigMap version of `name` was rejected.
    pub fn reject(&self, name: &str, reason: String) {
        self.write().rejected.insert(name.to_string(), reason);
    }

    /// Why the latest ConfigMap version of `name` was rejected, if it was.
    pub fn rejection(&self, name: &str) -> Option<String> {
        self.read().rejected.get(name).cloned()
    }

    /// Names loaded from ConfigMaps, shadows included.
    pub fn configmap_names(&self) -> Vec<String> {
        let layers = self.read();
        layers
            .configmaps
            .names()
            .map(str::to_string)
            .chain(layers.shadows.keys().cloned())
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Layers> {
        // Every write is one small map update: a panic cannot leave the
        // layers half-changed.
        self.layers.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Layers> {
        self.layers.write().unwrap_or_else(|p| p.into_inner())
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
