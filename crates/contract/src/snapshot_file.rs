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
}
