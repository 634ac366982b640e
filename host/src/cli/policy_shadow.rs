//! `wasmgpu policy shadow NAME`: how a shadow policy's decisions compare
//! with its primary's, from the status the controller writes on its
//! ConfigMap.

use std::process::ExitCode;

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt};

use super::kube_client::{block_on, client};
use super::output_format::Output;
use super::table::Table;
use super::table::short;
use wasmgpu_api::policy::{
    PlacedOn, SHADOW_OF_ANNOTATION, SHADOW_STATUS_ANNOTATION, ShadowCounts, ShadowStatus,
};
use wasmgpu_api::shadow::Outcome;

/// What `policy shadow --output json` prints.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Shown {
    name: String,
    /// The ConfigMap's `wasmgpu.io/shadow-of`.
    shadow_of: Option<String>,
    /// The controller's comparison (none: not compared yet).
    status: Option<ShadowStatus>,
}

/// `wasmgpu policy shadow NAME`.
pub(crate) fn show(name: &str, namespace: &str, output: Output) -> anyhow::Result<ExitCode> {
    let configmap = block_on(async {
        let api: Api<ConfigMap> = Api::namespaced(client().await?, namespace);
        api.get_opt(name)
            .await
            .with_context(|| format!("reading ConfigMap {namespace}/{name}"))
    })?;
    let Some(configmap) = configmap else {
        anyhow::bail!(
            "no policy ConfigMap {namespace}/{name}: publish the candidate with \
             `wasmgpu policy publish FILE --name {name} --shadow-of PRIMARY`, or give the \
             controller's namespace with --namespace"
        );
    };
    let shadow_of = configmap.annotations().get(SHADOW_OF_ANNOTATION).cloned();
    let status: Option<ShadowStatus> = match configmap.annotations().get(SHADOW_STATUS_ANNOTATION) {
        None => None,
        Some(text) => Some(serde_json::from_str(text).with_context(|| {
            format!("ConfigMap {namespace}/{name}: annotation {SHADOW_STATUS_ANNOTATION} is not a shadow status")
        })?),
    };
    if shadow_of.is_none() && status.is_none() {
        anyhow::bail!(
            "policy {namespace}/{name} is not a shadow (no annotation {SHADOW_OF_ANNOTATION}): \
             publish it with --shadow-of PRIMARY to compare it with PRIMARY"
        );
    }
    let shown = Shown {
        name: name.to_string(),
        shadow_of,
        status,
    };
    match output {
        Output::Json => super::stdout::json(&shown)?,
        Output::Table => super::stdout::print(&render(&shown))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The text of `policy shadow`.
fn render(shown: &Shown) -> String {
    let Some(status) = &shown.status else {
        return format!(
            "shadow       {} of {}\nnot compared yet: the controller compares a shadow in the \
             rounds where its primary decides (pods of the primary pending); \
             `wasmgpu policy list` shows whether it loaded\n",
            shown.name,
            shown.shadow_of.as_deref().unwrap_or("-"),
        );
    };
    let mut text = format!(
        "shadow       {} ({}{}) of {}\n",
        shown.name,
        short(&status.digest),
        status
            .config_digest
            .as_deref()
            .map(|c| format!(", config {}", short(c)))
            .unwrap_or_default(),
        status.primary
    );
    if shown.shadow_of.as_deref() != Some(status.primary.as_str()) {
        text += &format!(
            "note         the ConfigMap now says shadow-of {}: this comparison is of the version loaded before\n",
            shown.shadow_of.as_deref().unwrap_or("(none)")
        );
    }
    text += &format!("since        {}\n", status.since);
    text += &format!(
        "rounds       {} compared, {} failed, {} skipped (previous call still running)\n",
        status.rounds_compared, status.rounds_failed, status.rounds_skipped
    );
    text += &format!("pods         {}\n", counts_line(&status.totals));
    text += &format!(
        "last error   {}\n",
        match (&status.last_error, &status.last_error_at) {
            (Some(error), Some(at)) => format!("{at}: {error}"),
            (Some(error), None) => error.clone(),
            _ => "-".into(),
        }
    );
    if status.recent.is_empty() {
        return text;
    }
    text += "\nlast rounds:\n";
    let mut rounds = Table::new(&[
        "ROUND",
        "AT",
        "PENDING",
        "CALL",
        "SAME",
        "OTHER-GPUS",
        "OTHER-NODE",
        "PRIMARY-ONLY",
        "SHADOW-ONLY",
        "REFUSED",
        "ERROR",
    ]);
    for round in &status.recent {
        let c = &round.counts;
        rounds.row(vec![
            round.round.to_string(),
            round.at.clone(),
            round.pending.to_string(),
            round
                .call_micros
                .map_or("-".into(), |us| format!("{:.2}ms", us as f64 / 1000.0)),
            c.same.to_string(),
            c.same_node_other_gpus.to_string(),
            c.other_node.to_string(),
            c.primary_only.to_string(),
            c.shadow_only.to_string(),
            c.refused.to_string(),
            round.error.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    text += &rounds.render();
    let differing: Vec<_> = status
        .recent
        .iter()
        .filter(|r| !r.differences.is_empty() || r.more_differences > 0)
        .collect();
    if differing.is_empty() {
        return text;
    }
    text += "\npods decided differently:\n";
    let mut pods = Table::new(&["ROUND", "POD", "OUTCOME", "PRIMARY", "SHADOW"]);
    let placed = |p: &Option<PlacedOn>| {
        p.as_ref()
            .map_or("-".into(), |p| format!("{} [{}]", p.node, p.gpus.join(",")))
    };
    for round in differing {
        for difference in &round.differences {
            let shadow = match &difference.reason {
                Some(reason) => format!("refused: {reason}"),
                None => placed(&difference.shadow),
            };
            pods.row(vec![
                round.round.to_string(),
                difference.pod.clone(),
                difference.outcome.clone(),
                placed(&difference.primary),
                shadow,
            ]);
        }
        if round.more_differences > 0 {
            pods.row(vec![
                round.round.to_string(),
                format!("(and {} more)", round.more_differences),
                String::new(),
                String::new(),
                String::new(),
            ]);
        }
    }
    text + &pods.render()
}

/// `same 3, same-node-other-gpus 0, …`.
fn counts_line(counts: &ShadowCounts) -> String {
    Outcome::ALL
        .iter()
        .map(|o| format!("{} {}", o.label(), counts.get(*o)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmgpu_api::policy::{ShadowDifference, ShadowRound};

    #[test]
    fn shadow_summary_shows_counts_rounds_and_differing_pods() {
        let status = ShadowStatus {
            primary: "binpack".into(),
            digest: "sha256:0123456789abcdef".into(),
            since: "2026-12-01T00:00:00Z".into(),
            rounds_compared: 2,
            rounds_skipped: 1,
            totals: ShadowCounts {
                other_node: 2,
                same: 1,
                ..Default::default()
            },
            recent: vec![ShadowRound {
                round: 7,
                at: "2026-12-01T00:00:07Z".into(),
                pending: 3,
                call_micros: Some(1500),
                counts: ShadowCounts {
                    other_node: 2,
                    ..Default::default()
                },
                differences: vec![ShadowDifference {
                    pod: "ns/p-0".into(),
                    outcome: "other-node".into(),
                    primary: Some(PlacedOn {
                        node: "n1".into(),
                        gpus: vec!["GPU-1".into()],
                    }),
                    shadow: Some(PlacedOn {
                        node: "n2".into(),
                        gpus: vec!["GPU-5".into()],
                    }),
                    reason: None,
                }],
                more_differences: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = render(&Shown {
            name: "spread".into(),
            shadow_of: Some("binpack".into()),
            status: Some(status),
        });
        for line in [
            "shadow       spread (sha256:0123456789ab) of binpack",
            "rounds       2 compared, 0 failed, 1 skipped",
            "same 1, same-node-other-gpus 0, other-node 2",
            "1.50ms",
            "ns/p-0",
            "n1 [GPU-1]",
            "n2 [GPU-5]",
            "(and 1 more)",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
        assert!(!text.contains("note "), "{text}");
    }
}
