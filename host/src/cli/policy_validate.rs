//! `wasmgpu policy validate`: the host's verdict on decisions made anywhere
//! (a policy's unit test in any language, a hand-written round), by the
//! same rules the controller applies to every round.
//!
//! ```text
//!  --snapshot FILE ─▶ snapshot_file::read (checked) ─┐
//!  --decisions FILE|- ─▶ [Decision] (serde) ─────────┴▶ validate_host ─▶ Checked ─▶ table | JSON
//! ```

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use super::output_format::Output;
use super::stdout;
use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::types::Decision;
use wasmgpu_contract::validate::{
    Deferred, Invalid, Placement, Preempting, Verdict, validate_host,
};

/// The verdict as `--output json` prints it: the host's [`Verdict`], with
/// each refusal's reason in words beside its code.
#[derive(Debug, Serialize)]
pub(crate) struct Checked {
    /// No decision was refused.
    pub valid: bool,
    pub accepted: Vec<Placement>,
    pub preempting: Vec<Preempting>,
    pub waiting: Vec<Deferred>,
    pub rejected: Vec<Deferred>,
    pub refused: Vec<RefusedOutput>,
}

/// One refused decision.
#[derive(Debug, Serialize)]
pub(crate) struct RefusedOutput {
    /// Its position in the decisions given.
    pub index: usize,
    /// The pod it names, when the position names one.
    pub pod: Option<String>,
    /// The decision, in words.
    pub decision: String,
    /// The rule it broke (`kind` and the rule's fields).
    pub reason: Invalid,
    /// The same, in words.
    pub why: String,
}

impl Checked {
    pub(crate) fn of(verdict: Verdict) -> Checked {
        let refused: Vec<RefusedOutput> = verdict
            .refused
            .into_iter()
            .map(|r| RefusedOutput {
                index: r.index,
                pod: r.pod,
                decision: r.decision,
                why: r.reason.to_string(),
                reason: r.reason,
            })
            .collect();
        Checked {
            valid: refused.is_empty(),
            accepted: verdict.accepted,
            preempting: verdict.preempting,
            waiting: verdict.waiting,
            rejected: verdict.rejected,
            refused,
        }
    }
}

/// Parses a JSON array of decisions (serde's externally tagged form:
/// `{"assign": {"pod": 0, "node": 1, "gpus": [0]}}`); the error names the
/// entry that is wrong.
pub(crate) fn parse_decisions(text: &str) -> anyhow::Result<Vec<Decision>> {
    let values: Vec<serde_json::Value> = serde_json::from_str(text)
        .context("the decisions are not a JSON array (write [] for none)")?;
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| {
            serde_json::from_value(value).with_context(|| {
                format!(
                    "decision [{i}]: not a decision; expected one of {{\"assign\": {{\"pod\", \"node\", \
                     \"gpus\", \"claims\"}}}}, {{\"wait\": {{\"pod\", \"reason\"}}}}, \
                     {{\"reject\": {{\"pod\", \"reason\"}}}}, {{\"preempt\": {{\"assignment\", \"victims\"}}}} \
                     (positions into the snapshot, as the policy returns them)"
                )
            })
        })
        .collect()
}

/// Reads the decisions at `path` (`-`: standard input).
fn read_decisions(path: &Path) -> anyhow::Result<Vec<Decision>> {
    let text = if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the decisions from standard input")?;
        text
    } else {
        std::fs::read_to_string(path)
            .with_context(|| format!("reading decisions {}", path.display()))?
    };
    parse_decisions(&text).with_context(|| format!("--decisions {}", path.display()))
}

/// `policy validate`: status 0 when every decision is valid, 2 when the
/// host refuses any (the verdict is printed either way); errors are 1.
pub(crate) fn validate(
    snapshot: &HostSnapshot,
    decisions: &Path,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let decisions = read_decisions(decisions)?;
    let checked = Checked::of(validate_host(snapshot, &decisions));
    match output {
        Output::Json => stdout::json(&checked)?,
        Output::Table => stdout::print(&table(&checked))?,
    }
    Ok(if checked.valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

fn table(checked: &Checked) -> String {
    let mut text = format!(
        "{}: {} accepted, {} preempting, {} waiting, {} rejected, {} refused\n",
        if checked.valid { "valid" } else { "refused" },
        checked.accepted.len(),
        checked.preempting.len(),
        checked.waiting.len(),
        checked.rejected.len(),
        checked.refused.len(),
    );
    for p in &checked.accepted {
        text += &format!(
            "  assign   {} → {} [{}]\n",
            p.pod,
            p.node,
            p.gpus.join(", ")
        );
    }
    for p in &checked.preempting {
        text += &format!(
            "  preempt  {} → {} [{}], evicting {}\n",
            p.placement.pod,
            p.placement.node,
            p.placement.gpus.join(", "),
            p.victims.join(", ")
        );
    }
    for d in &checked.waiting {
        text += &format!("  wait     {}: {}\n", d.pod, d.reason);
    }
    for d in &checked.rejected {
        text += &format!("  reject   {}: {}\n", d.pod, d.reason);
    }
    for r in &checked.refused {
        text += &format!("  REFUSED  [{}] {}: {}\n", r.index, r.decision, r.why);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgpu_contract::testing::{node, request, snapshot};
    use wasmgpu_contract::types::Sharing;

    fn two_pods() -> HostSnapshot {
        HostSnapshot::from_snapshot(snapshot(
            vec![node("a", 2, "H100", 81_559)],
            vec![
                request("ml/one", 1, Sharing::Exclusive, 0),
                request("ml/two", 1, Sharing::Exclusive, 0),
            ],
        ))
    }

    #[test]
    fn a_gpu_given_twice_is_refused_with_its_rule_and_words() {
        let decisions = parse_decisions(
            r#"[{"assign":{"pod":0,"node":0,"gpus":[1]}},{"assign":{"pod":1,"node":0,"gpus":[1]}}]"#,
        )
        .unwrap();
        let checked = Checked::of(validate_host(&two_pods(), &decisions));
        assert!(!checked.valid);
        assert_eq!(checked.accepted.len(), 1);
        assert_eq!(checked.refused.len(), 1);
        assert_eq!(checked.refused[0].index, 1);
        let json = serde_json::to_value(&checked).unwrap();
        assert!(json["refused"][0]["reason"]["kind"].is_string(), "{json}");
        assert!(!json["refused"][0]["why"].as_str().unwrap().is_empty());
        assert!(table(&checked).contains("REFUSED  [1]"));
    }

    #[test]
    fn a_valid_round_is_valid_and_a_bad_entry_is_named() {
        let decisions = parse_decisions(
            r#"[{"assign":{"pod":0,"node":0,"gpus":[0]}},{"wait":{"pod":1,"reason":"later"}}]"#,
        )
        .unwrap();
        let checked = Checked::of(validate_host(&two_pods(), &decisions));
        assert!(checked.valid);
        assert_eq!(checked.waiting[0].pod, "ml/two");
        let error = parse_decisions(r#"[{"wait":{"pod":1,"reason":"x"}},{"place":{}}]"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("decision [1]"), "{error}");
        assert!(parse_decisions("{}").is_err());
    }
}
