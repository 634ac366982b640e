//! Recorded rounds: the snapshots the controller handed a policy in its
//! last rounds, kept in memory when the policy's ConfigMap asks for it
//! (annotation `wasmgpu.io/record-rounds: "N"`), served at
//! `/debug/rounds/…` and read with `wasmgpu policy snapshot --recorded`.
//!
//! Bounded: at most [`MAX_RECORDED_ROUNDS`] rounds per policy and
//! [`MAX_RECORDED_BYTES`] of compressed snapshots per policy (the oldest go
//! first). Recording copies the snapshot and compresses it on the blocking
//! pool, off the round's path.

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use wasmgpu_contract::HostSnapshot;

/// The most rounds kept per policy.
pub const MAX_RECORDED_ROUNDS: u32 = 20;
/// The most compressed snapshot bytes kept per policy.
pub const MAX_RECORDED_BYTES: usize = 64 << 20;

/// One recorded round, as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedRound {
    /// The round number (`snapshot.round`).
    pub round: u64,
    /// When it was recorded, RFC 3339.
    pub at: String,
    /// Pending pods in the snapshot.
    pub pending: usize,
    /// Nodes in the snapshot.
    pub nodes: usize,
    /// Size of the snapshot file, bytes (uncompressed).
    pub bytes: usize,
}

struct Entry {
    listed: RecordedRound,
    /// The snapshot file, gzip-compressed.
    gzip: Arc<[u8]>,
}

#[derive(Default)]
struct Recording {
    keep: u32,
    rounds: VecDeque<Entry>,
}

/// The recorded rounds of every policy that asks for them.
#[derive(Default)]
pub struct Recorder {
    policies: Mutex<BTreeMap<String, Recording>>,
}

impl Recorder {
    /// A recorder that records nothing until asked.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Keeps the last `keep` rounds of `policy` from now on (at most
    /// [`MAX_RECORDED_ROUNDS`]); 0 stops recording and forgets them.
    pub fn keep(&self, policy: &str, keep: u32) {
        let mut policies = self.lock();
        if keep == 0 {
            policies.remove(policy);
            return;
        }
        let recording = policies.entry(policy.to_string()).or_default();
        recording.keep = keep.min(MAX_RECORDED_ROUNDS);
        trim(recording);
    }

    /// Whether rounds of `policy` are recorded.
    pub fn wants(&self, policy: &str) -> bool {
        self.lock().contains_key(policy)
    }

    /// Records `snapshot` as a round of `policy`, if it is recorded.
    /// Serializes and compresses: call it off the round's path.
    pub fn record(&self, policy: &str, snapshot: HostSnapshot) {
        if !self.wants(policy) {
            return;
        }
        let listed = RecordedRound {
            round: snapshot.snapshot.round,
            at: Timestamp::now().to_string(),
            pending: snapshot.snapshot.pending.len(),
            nodes: snapshot.snapshot.nodes.len(),
            bytes: 0,
        };
        let json = match wasmgpu_contract::snapshot_file::to_json(&snapshot) {
            Ok(json) => json,
            Err(error) => {
                tracing::warn!(%policy, %error, "Cannot record a round");
                return;
            }
        };
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let gzip = match encoder
            .write_all(json.as_bytes())
            .and_then(|()| encoder.finish())
        {
            Ok(gzip) => gzip,
            Err(error) => {
                tracing::warn!(%policy, %error, "Cannot compress a recorded round");
                return;
            }
        };
        let mut policies = self.lock();
        // Recording may have stopped meanwhile.
        let Some(recording) = policies.get_mut(policy) else {
            return;
        };
        recording.rounds.push_back(Entry {
            listed: RecordedRound {
                bytes: json.len(),
                ..listed
            },
            gzip: gzip.into(),
        });
        trim(recording);
    }

    /// The recorded rounds of each recorded policy, oldest first.
    pub fn list(&self) -> BTreeMap<String, Vec<RecordedRound>> {
        self.lock()
            .iter()
            .map(|(name, r)| {
                (
                    name.clone(),
                    r.rounds.iter().map(|e| e.listed.clone()).collect(),
                )
            })
            .collect()
    }

    /// The snapshot file of round `round` of `policy` (the latest when
    /// `None`).
    pub fn snapshot_file(&self, policy: &str, round: Option<u64>) -> Option<String> {
        let gzip = {
            let policies = self.lock();
            let rounds = &policies.get(policy)?.rounds;
            let entry = match round {
                Some(round) => rounds.iter().find(|e| e.listed.round == round)?,
                None => rounds.back()?,
            };
            Arc::clone(&entry.gzip)
        };
        let mut json = String::new();
        flate2::read::GzDecoder::new(&gzip[..])
            .read_to_string(&mut json)
            .ok()?;
        Some(json)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Recording>> {
        wasmgpu_support::lock(&self.policies)
    }
}

/// Drops the oldest rounds beyond the count and size bounds.
fn trim(recording: &mut Recording) {
    while recording.rounds.len() > recording.keep as usize {
        recording.rounds.pop_front();
    }
    while recording.rounds.len() > 1
        && recording.rounds.iter().map(|e| e.gzip.len()).sum::<usize>() > MAX_RECORDED_BYTES
    {
        recording.rounds.pop_front();
    }
}

/// `wasmgpu.io/record-rounds` as a count: absent → 0; not a number from 0
/// to [`MAX_RECORDED_ROUNDS`] → the error to report.
pub fn parse_keep(value: Option<&str>) -> Result<u32, String> {
    let Some(value) = value else {
        return Ok(0);
    };
    match value.trim().parse::<u32>() {
        Ok(n) if n <= MAX_RECORDED_ROUNDS => Ok(n),
        _ => Err(format!(
            "annotation {} is {value:?}: set a number of rounds from 0 to {MAX_RECORDED_ROUNDS} (0 or no annotation: record nothing)",
            wasmgpu_api::policy::RECORD_ROUNDS_ANNOTATION
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgpu_contract::Sharing;
    use wasmgpu_contract::testing::{node, request, snapshot};

    fn round(n: u64) -> HostSnapshot {
        let mut snap = snapshot(
            vec![node("n", 2, "NVIDIA H100", 81920)],
            vec![request("ns/p", 1, Sharing::Exclusive, 0)],
        );
        snap.round = n;
        HostSnapshot::from_snapshot(snap)
    }

    #[test]
    fn keeps_the_last_rounds_of_policies_that_ask_and_reads_them_back() {
        let recorder = Recorder::default();
        recorder.record("binpack", round(1));
        assert!(recorder.list().is_empty(), "nothing recorded unless asked");
        recorder.keep("binpack", 3);
        for n in 1..=5 {
            recorder.record("binpack", round(n));
        }
        recorder.record("spread", round(9));
        let listed = &recorder.list()["binpack"];
        let rounds: Vec<u64> = listed.iter().map(|r| r.round).collect();
        assert_eq!(rounds, [3, 4, 5]);
        assert_eq!((listed[0].pending, listed[0].nodes), (1, 1));
        let latest = recorder.snapshot_file("binpack", None).unwrap();
        let file: wasmgpu_contract::snapshot_file::SnapshotFile =
            serde_json::from_str(&latest).unwrap();
        assert_eq!(file.round, 5);
        assert_eq!(file.contract.as_deref(), Some(wasmgpu_engine::CONTRACT));
        assert!(recorder.snapshot_file("binpack", Some(4)).is_some());
        assert!(recorder.snapshot_file("binpack", Some(1)).is_none());
        // Fewer to keep trims at once; 0 forgets.
        recorder.keep("binpack", 1);
        assert_eq!(recorder.list()["binpack"].len(), 1);
        recorder.keep("binpack", 0);
        assert!(recorder.snapshot_file("binpack", None).is_none());
    }

    #[test]
    fn the_annotation_is_a_bounded_count() {
        assert_eq!(parse_keep(None), Ok(0));
        assert_eq!(parse_keep(Some("5")), Ok(5));
        assert_eq!(parse_keep(Some(" 20 ")), Ok(20));
        let error = parse_keep(Some("21")).unwrap_err();
        assert!(
            error.contains("wasmgpu.io/record-rounds") && error.contains("from 0 to 20"),
            "{error}"
        );
        assert!(parse_keep(Some("all")).is_err());
    }
}
