//! The contract version in snapshot files: wasmgpu writes
//! `"contract": "wasmgpu:policy@…"` as the first field of every snapshot
//! file, and refuses a file of another version, naming both. A file
//! without the field (written by hand) is read as the current contract.

use serde::{Deserialize, Serialize};

pub use crate::CONTRACT;
use crate::types::Snapshot;

/// A snapshot file: the contract's `snapshot` record, with the version first.
#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct SnapshotFile {
    /// The contract the snapshot follows, e.g. `wasmgpu:policy@0.2.0`.
    /// Written by wasmgpu; optional in hand-written files (read as this
    /// wasmgpu's contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
    #[serde(flatten)]
    pub snapshot: Snapshot,
}

/// A snapshot file of another contract version.
#[derive(Debug, thiserror::Error)]
#[error(
    "a snapshot of {found}, but this wasmgpu reads {CONTRACT} snapshots: export it again \
     with this version's `wasmgpu policy snapshot` (or `generate-snapshot`), or use a \
     wasmgpu of {found}"
)]
pub struct OtherContract {
    /// The version the file names.
    pub found: String,
}

/// `snapshot` as the text of a snapshot file (JSON on one line).
pub fn to_json(snapshot: Snapshot) -> serde_json::Result<String> {
    serde_json::to_string(&SnapshotFile {
        contract: Some(CONTRACT.to_owned()),
        snapshot,
    })
}

/// Refuses the text of a snapshot file that names another contract. Text
/// that is not a JSON object passes: parsing it says what is wrong.
pub fn check(text: &str) -> Result<(), OtherContract> {
    #[derive(Deserialize)]
    struct Probe {
        contract: Option<serde_json::Value>,
    }
    match serde_json::from_str::<Probe>(text) {
        Ok(Probe {
            contract: Some(found),
        }) if found != CONTRACT => Err(OtherContract {
            found: found
                .as_str()
                .map_or_else(|| found.to_string(), str::to_owned),
        }),
        _ => Ok(()),
    }
}

/// A snapshot file's text, read: the snapshot, and whether the file was of
/// the first form (see [`upgrade_first_form`]).
#[derive(Debug)]
pub struct Read {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// The file had snake_case keys and labels as pairs, and was read as
    /// today's camelCase form: write it again to keep it current.
    pub first_form: bool,
}

/// Reads the text of a snapshot file of this contract: today's form
/// (camelCase keys, labels as a map, `exclusive`/`shared`), or the first
/// form (snake_case keys, labels as `[key, value]` pairs, `Exclusive`/`Shared`),
/// which is upgraded and reported in [`Read::first_form`]. An error is the
/// error of today's form, with its line and column.
pub fn read(text: &str) -> serde_json::Result<Read> {
    let error = match serde_json::from_str::<Snapshot>(text) {
        Ok(snapshot) => {
            return Ok(Read {
                snapshot,
                first_form: false,
            });
        }
        Err(error) => error,
    };
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(text) else {
        return Err(error);
    };
    if !upgrade_first_form(&mut value) {
        return Err(error);
    }
    match serde_json::from_value(value) {
        Ok(snapshot) => Ok(Read {
            snapshot,
            first_form: true,
        }),
        Err(_) => Err(error),
    }
}

/// Rewrites a snapshot file of the first form into today's, in place: keys
/// to camelCase, each node's labels from pairs to a map, sharing values to
/// lower case. False (and nothing changed) when `value` is not of the first
/// form. The policy's `config` is a string and stays as it is.
pub fn upgrade_first_form(value: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    let first_form = value.as_object().is_some_and(|top| {
        ["mig_profiles", "eligible_sets"]
            .iter()
            .any(|key| top.contains_key(*key))
    });
    if !first_form {
        return false;
    }
    fn camel(key: &str) -> String {
        let mut out = String::with_capacity(key.len());
        let mut upper = false;
        for c in key.chars() {
            if c == '_' {
                upper = true;
            } else if upper {
                out.extend(c.to_uppercase());
                upper = false;
            } else {
                out.push(c);
            }
        }
        out
    }
    fn walk(value: &mut Value) {
        match value {
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (key, mut inner) in entries {
                    match (key.as_str(), &mut inner) {
                        ("labels", Value::Array(pairs)) => {
                            let labels = pairs
                                .iter()
                                .filter_map(|pair| match pair.as_array().map(Vec::as_slice) {
                                    Some([Value::String(k), v]) => Some((k.clone(), v.clone())),
                                    _ => None,
                                })
                                .collect::<serde_json::Map<_, _>>();
                            inner = Value::Object(labels);
                        }
                        ("sharing", Value::String(sharing)) => *sharing = sharing.to_lowercase(),
                        ("config", _) => {}
                        _ => walk(&mut inner),
                    }
                    let mut key = camel(&key);
                    if let Some(stem) = key.strip_suffix("Mib") {
                        key = format!("{stem}MiB");
                    }
                    map.insert(key, inner);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(value);
    true
}

/// Why a snapshot file's text is not a snapshot a policy may see: the
/// contract crate's one error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not JSON, or not of the snapshot's shape.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Of the right shape, but no controller would build it.
    #[error(transparent)]
    Invalid(#[from] crate::snapshot_check::SnapshotError),
    /// Of another contract version (`"contract"`).
    #[error(transparent)]
    Contract(#[from] OtherContract),
}

impl Error {
    /// A short, stable label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Json(_) => "json",
            Error::Invalid(_) => "invalid",
            Error::Contract(_) => "other-contract",
        }
    }
}

/// Reads a snapshot file's text ([`read`]: today's form or the first) of
/// this contract ([`check`]), and holds it to the rules the controller's
/// snapshots obey ([`crate::snapshot_check::check`]).
pub fn parse(text: &str) -> Result<Read, Error> {
    check(text)?;
    let read = read(text)?;
    crate::snapshot_check::check(&read.snapshot)?;
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_name_their_contract_and_another_is_refused_naming_both() {
        let demo = include_str!("../../../policies/snapshots/demo.json");
        let snapshot: Snapshot = serde_json::from_str(demo).unwrap();
        let text = to_json(snapshot.clone()).unwrap();
        assert!(
            text.starts_with(&format!("{{\"contract\":\"{CONTRACT}\",")),
            "{text}"
        );
        assert!(check(&text).is_ok());
        let read: SnapshotFile = serde_json::from_str(&text).unwrap();
        assert_eq!(read.snapshot, snapshot);

        let old = text.replace(CONTRACT, "wasmgpu:policy@0.0.1");
        let error = check(&old).unwrap_err().to_string();
        assert!(
            error.contains("a snapshot of wasmgpu:policy@0.0.1, but this wasmgpu reads")
                && error.contains(CONTRACT),
            "{error}"
        );
        // Hand-written files carry no version; text that is not JSON is
        // left for the parser to explain.
        assert!(check(demo).is_ok());
        assert!(check("not json").is_ok());
    }

    #[test]
    fn a_file_of_the_first_form_reads_as_todays_and_says_so() {
        let demo = include_str!("../../../policies/snapshots/demo.json");
        let today = read(demo).unwrap();
        assert!(!today.first_form);
        // The demo in the first form: snake_case keys, labels as pairs,
        // sharing capitalised.
        let old = crate::testing::first_form(demo);
        assert!(
            old.contains("\"eligible_sets\"") && old.contains("\"Exclusive\""),
            "{old}"
        );
        let upgraded = read(&old).unwrap();
        assert!(upgraded.first_form);
        assert_eq!(upgraded.snapshot, today.snapshot);
        assert!(!today.snapshot.nodes[0].labels.is_empty());
        // Today's form that is wrong keeps its own error, with its place.
        let error = read(&demo.replacen("\"round\"", "\"rounds\"", 1)).unwrap_err();
        assert!(
            error.to_string().contains("missing field `round`"),
            "{error}"
        );
    }
}
