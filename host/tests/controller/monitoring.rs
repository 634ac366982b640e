//! The operators' monitoring in `deploy/monitoring/`: the alerting rules
//! (`rules.yaml`, and `prometheusrule.yaml` for the Prometheus operator,
//! rule for rule the same), the Grafana dashboard (`dashboard.json`) and the
//! kustomization that installs them apart from the base.
//!
//! The pure tests read the files: the two rule files hold the same groups,
//! every alert says what to do and links a runbook heading that exists,
//! every panel queries Prometheus through the `datasource` variable, and
//! every metric a query names is one the controller registers. The last test
//! runs a controller on the real API server through everything those
//! queries read (rounds, bindings, a failing policy, a shadow, a rejected
//! version, a watch refused by RBAC) and checks that each metric is on its
//! `/metrics` page, with the labels the queries match on.
//!
//! Metric names are read from PromQL with a small tokenizer ([`reads`]):
//! identifiers that are not functions, keywords, label names (in `{…}` and
//! in `by (…)`, `on (…)` and the like), strings, numbers, durations or
//! Grafana variables (`$__rate_interval`).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde::Deserialize;
use serde_json::{Value, json};
use wasmgpu::api::Sharing;
use wasmgpu::api::policy::{COMPONENT_REF_KEY, POLICY_KEY, POLICY_LABEL};
use wasmgpu::controller::{Metrics, fingerprint};
use wasmgpu::engine::Digest;
use wasmgpu_test_harness::TestContext;

use super::common::{policy_bytes, policy_dir, repo, scratch_dir, wasmgpu_bin};
use super::configmaps::{put_policy, wait_observed};
use super::operate::{free_port, get};
use super::support::*;
use super::wait_bound;

const RULES: &str = "deploy/monitoring/rules.yaml";
const PROMETHEUS_RULE: &str = "deploy/monitoring/prometheusrule.yaml";
const DASHBOARD: &str = "deploy/monitoring/dashboard.json";
const KUSTOMIZATION: &str = "deploy/monitoring/kustomization.yaml";
const MONITORING_DOC: &str = "docs/MONITORING.md";
/// Where each alert's `runbook_url` points, before `docs/MONITORING.md#…`.
const RUNBOOK_BASE: &str = "https://github.com/wasmgpu/wasmgpu/blob/main/";

/// Series Prometheus makes itself, not the controller.
const PROMETHEUS_OWN: &[&str] = &["up"];
/// Labels Prometheus adds to every series it scrapes (the queries group by
/// them: the GPU gauges are read from the replica that leads).
const TARGET_LABELS: &[&str] = &["instance", "job"];
/// Metrics a running controller exports only once a watch has failed: the
/// test reads them from a second controller whose every list RBAC refuses.
const AFTER_A_REFUSED_WATCH: &[&str] = &["wasmgpu_watch_failures_total"];

/// Aggregations and functions: an identifier followed by `(` must be one.
const FUNCTIONS: &str = "abs absent absent_over_time avg avg_over_time bottomk ceil changes \
    clamp clamp_max clamp_min count count_over_time count_values delta deriv exp floor group \
    histogram_quantile idelta increase irate label_join label_replace last_over_time ln max \
    max_over_time min min_over_time predict_linear present_over_time quantile \
    quantile_over_time rate resets round scalar sort sort_desc sqrt stddev stdvar sum \
    sum_over_time time timestamp topk vector";
/// Keywords followed by a list of label names in parentheses.
const GROUPING: &str = "by without on ignoring group_left group_right";
/// Binary operators and modifiers spelled as words.
const KEYWORDS: &str = "and or unless bool offset atan2 inf nan le";

/// Whether `word` is one of the words of `list`.
fn one_of(list: &str, word: &str) -> bool {
    list.split_whitespace().any(|w| w == word)
}

// === Reading the files ===

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// A rules file (`groups:`), as Prometheus reads it; an unknown field (a
/// misspelt `annotations`) fails the parse.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    name: String,
    rules: Vec<AlertRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AlertRule {
    alert: String,
    expr: String,
    #[serde(rename = "for")]
    for_: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

fn yaml(path: &str) -> serde_norway::Value {
    serde_norway::from_str(&read(path)).unwrap_or_else(|e| panic!("{path} is not YAML: {e}"))
}

/// The strings of a YAML sequence (none when `value` is not one).
fn yaml_strings(value: Option<&serde_norway::Value>) -> Vec<String> {
    value
        .and_then(|v| v.as_sequence())
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

fn rule_file() -> RuleFile {
    serde_norway::from_str(&read(RULES))
        .unwrap_or_else(|e| panic!("{RULES} is not a rules file with alerts only: {e}"))
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

/// Every panel of `dashboard`, those nested in rows included (and the rows).
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in list.as_array().into_iter().flatten() {
            out.push(panel);
            if let Some(inner) = panel.get("panels") {
                walk(inner, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// Every PromQL expression of the dashboard and the rules, each with
/// where it is.
fn expressions() -> Vec<(String, String)> {
    let dashboard = dashboard();
    let mut all = Vec::new();
    for panel in panels(&dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let place = format!(
                    "{DASHBOARD} panel {:?} ({})",
                    panel["title"].as_str().unwrap_or_default(),
                    target["refId"].as_str().unwrap_or_default()
                );
                all.push((place, expr.to_string()));
            }
        }
    }
    for group in rule_file().groups {
        for rule in group.rules {
            all.push((format!("{RULES} alert {}", rule.alert), rule.expr));
        }
    }
    assert!(all.len() >= 20, "read only {} expressions", all.len());
    all
}

fn assert_none(problems: Vec<String>) {
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

// === PromQL ===

/// What one PromQL expression reads.
#[derive(Debug, Default, PartialEq)]
struct Reads {
    /// Each metric named, with the label names its selectors match on.
    metric_to_labels: BTreeMap<String, BTreeSet<String>>,
    /// The label names of its `by`, `without`, `on`, `ignoring`,
    /// `group_left` and `group_right` clauses.
    grouping: BTreeSet<String>,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Where the string literal whose quote is at `at` ends (after its
/// closing quote).
fn skip_string(chars: &[char], at: usize) -> usize {
    let quote = chars[at];
    let mut i = at + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

/// The label names of the selector whose `{` is at `open`, and where it
/// ends (after its `}`). Also reads the labels of a sample of a `/metrics`
/// page.
fn selector(chars: &[char], open: usize) -> (Vec<String>, usize) {
    let mut labels = Vec::new();
    let mut at = open + 1;
    while at < chars.len() {
        let c = chars[at];
        if c == '}' {
            return (labels, at + 1);
        }
        if matches!(c, '"' | '\'' | '`') {
            at = skip_string(chars, at);
        } else if is_ident_start(c) {
            let start = at;
            while at < chars.len() && is_ident(chars[at]) {
                at += 1;
            }
            labels.push(chars[start..at].iter().collect());
        } else {
            at += 1;
        }
    }
    panic!(
        "a selector without its closing brace: {}",
        chars.iter().collect::<String>()
    );
}

fn skip_space(chars: &[char], mut at: usize) -> usize {
    while at < chars.len() && chars[at].is_whitespace() {
        at += 1;
    }
    at
}

/// What the PromQL expression `expr` reads. Panics on a function it does
/// not know (a typo) and on a selector that names no metric.
fn reads(expr: &str) -> Reads {
    let chars: Vec<char> = expr.chars().collect();
    let mut reads = Reads::default();
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        if matches!(c, '"' | '\'' | '`') {
            at = skip_string(&chars, at);
        } else if c == '#' {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if c == '$' {
            // A Grafana variable: `$__rate_interval`, `${datasource}`.
            at += 1;
            if chars.get(at) == Some(&'{') {
                while at < chars.len() && chars[at] != '}' {
                    at += 1;
                }
                at += 1;
            } else {
                while at < chars.len() && is_ident(chars[at]) {
                    at += 1;
                }
            }
        } else if c == '[' {
            // A range or a subquery: durations and variables.
            while at < chars.len() && chars[at] != ']' {
                at += 1;
            }
            at += 1;
        } else if c == '{' {
            panic!("a selector without a metric name in {expr:?}");
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(at + 1).is_some_and(char::is_ascii_digit))
        {
            // A number or a duration: 0.99, 1e3, 5m, 1h30m.
            while at < chars.len()
                && (chars[at].is_ascii_alphanumeric() || matches!(chars[at], '.' | '_'))
            {
                at += 1;
            }
        } else if is_ident_start(c) {
            let start = at;
            while at < chars.len() && is_ident(chars[at]) {
                at += 1;
            }
            let word: String = chars[start..at].iter().collect();
            let lower = word.to_ascii_lowercase();
            let next = skip_space(&chars, at);
            if one_of(GROUPING, &lower) {
                if chars.get(next) == Some(&'(') {
                    let close = (next..chars.len())
                        .find(|&i| chars[i] == ')')
                        .unwrap_or_else(|| panic!("`{word} (` is not closed in {expr:?}"));
                    let list: String = chars[next + 1..close].iter().collect();
                    reads.grouping.extend(
                        list.split(',')
                            .map(str::trim)
                            .filter(|label| !label.is_empty())
                            .map(String::from),
                    );
                    at = close + 1;
                }
            } else if one_of(KEYWORDS, &lower) || one_of(FUNCTIONS, &word) {
                // `sum by (le) (…)`: an aggregation need not be followed by `(`.
            } else if chars.get(next) == Some(&'(') {
                panic!(
                    "`{word}(` in {expr:?} is no PromQL function this test knows: a typo, \
                     or add it to FUNCTIONS"
                );
            } else {
                let labels = reads.metric_to_labels.entry(word).or_default();
                if chars.get(next) == Some(&'{') {
                    let (names, end) = selector(&chars, next);
                    labels.extend(names);
                    at = end;
                }
            }
        } else {
            at += 1;
        }
    }
    reads
}

/// A histogram's name without the suffix of its series.
fn histogram_base(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name)
}

/// Every metric the dashboard and the rules query (Prometheus's own
/// excepted), with the label names their selectors match on; and every
/// label name they group or match by.
fn queried() -> (BTreeMap<String, BTreeSet<String>>, BTreeSet<String>) {
    let mut metric_to_labels: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut grouping = BTreeSet::new();
    for (_, expr) in expressions() {
        let read = reads(&expr);
        for (metric, labels) in read.metric_to_labels {
            if !PROMETHEUS_OWN.contains(&metric.as_str()) {
                metric_to_labels.entry(metric).or_default().extend(labels);
            }
        }
        grouping.extend(read.grouping);
    }
    (metric_to_labels, grouping)
}

// === Reading a /metrics page ===

/// One metric family of a `/metrics` page.
#[derive(Clone, Debug, Default)]
struct Family {
    /// Its `# TYPE`.
    kind: String,
    /// Whether it has a `# HELP` line.
    help: bool,
    /// The label names of its samples.
    labels: BTreeSet<String>,
}

/// The families of a `/metrics` page, under every name a query reads them
/// by: `x_total` for a counter `x`; `x_bucket`, `x_sum`, `x_count` for a
/// histogram `x`; `x` for a gauge.
fn exposition(page: &str) -> BTreeMap<String, Family> {
    let mut base_to_family: BTreeMap<String, Family> = BTreeMap::new();
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some((name, kind)) = rest.split_once(' ')
        {
            base_to_family.entry(name.into()).or_default().kind = kind.trim().into();
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or_default();
            base_to_family.entry(name.into()).or_default().help = true;
        }
    }
    let mut name_to_base = BTreeMap::new();
    for (base, family) in &base_to_family {
        let suffixes: &[&str] = match family.kind.as_str() {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        for suffix in suffixes {
            name_to_base.insert(format!("{base}{suffix}"), base.clone());
        }
    }
    for line in page.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let Some(base) = name_to_base.get(&line[..end]) else {
            continue;
        };
        if line[end..].starts_with('{') {
            let chars: Vec<char> = line[end..].chars().collect();
            let (labels, _) = selector(&chars, 0);
            if let Some(family) = base_to_family.get_mut(base) {
                family.labels.extend(labels);
            }
        }
    }
    name_to_base
        .into_iter()
        .map(|(name, base)| {
            let family = base_to_family[&base].clone();
            (name, family)
        })
        .collect()
}

/// The families of the `/metrics` page on `port` once it has every name
/// of `wanted`, or the last page read after [`ACT`]; and that page.
async fn scrape_until(port: u16, wanted: &BTreeSet<&str>) -> (BTreeMap<String, Family>, String) {
    let deadline = Instant::now() + ACT;
    loop {
        let page = match get(port, "/metrics").await {
            Ok((200, body)) => body,
            _ => String::new(),
        };
        let families = exposition(&page);
        if wanted.iter().all(|name| families.contains_key(*name)) || Instant::now() > deadline {
            return (families, page);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// === Docs anchors ===

/// The anchors of the headings of the Markdown `doc`, as GitHub makes them.
fn anchors(doc: &str) -> BTreeSet<String> {
    let mut seen = BTreeMap::<String, usize>::new();
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let slug: String = line
            .trim_start_matches('#')
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_default();
        anchors.insert(match *count {
            0 => slug,
            n => format!("{slug}-{n}"),
        });
        *count += 1;
    }
    anchors
}

/// Every `docs/PAGE.md#anchor` named in `text`.
fn doc_links(text: &str) -> Vec<(String, String)> {
    let mut links = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("docs/") {
        let after = &rest[at..];
        let end = after
            .find(|c: char| {
                !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '#'))
            })
            .unwrap_or(after.len());
        let link = after[..end].trim_end_matches('.');
        if let Some((page, anchor)) = link.split_once('#') {
            links.push((page.to_string(), anchor.to_string()));
        }
        rest = &after[end..];
    }
    links
}

// === The rules ===

#[test]
fn the_rules_file_and_the_prometheusrule_hold_the_same_groups() {
    let plain = yaml(RULES);
    let operator = yaml(PROMETHEUS_RULE);
    for (field, wanted) in [
        ("apiVersion", "monitoring.coreos.com/v1"),
        ("kind", "PrometheusRule"),
    ] {
        assert_eq!(
            operator.get(field).and_then(|v| v.as_str()),
            Some(wanted),
            "{PROMETHEUS_RULE}: {field}"
        );
    }
    let groups = plain.get("groups").expect("groups in the rules file");
    let spec_groups = operator
        .get("spec")
        .and_then(|spec| spec.get("groups"))
        .expect("spec.groups in the PrometheusRule");
    assert!(
        groups == spec_groups,
        "{RULES} and {PROMETHEUS_RULE} (spec.groups) differ: change both together\n\
         --- {RULES}:\n{}\n--- {PROMETHEUS_RULE}:\n{}",
        serde_norway::to_string(groups).unwrap_or_default(),
        serde_norway::to_string(spec_groups).unwrap_or_default()
    );
    // Where the operator's Prometheus finds it: beside the controller.
    let metadata = operator.get("metadata").expect("metadata");
    assert_eq!(
        metadata.get("namespace").and_then(|v| v.as_str()),
        Some("wasmgpu-system")
    );
    assert!(metadata.get("name").and_then(|v| v.as_str()).is_some());
}

/// promtool's rule checker: `$WASMGPU_PROMTOOL`, or what
/// `tests/promtool/build.sh` builds (`make promtool`).
fn promtool() -> std::path::PathBuf {
    let path = std::env::var_os("WASMGPU_PROMTOOL")
        .filter(|p| !p.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let script =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/promtool/build.sh");
            let out = std::process::Command::new(script)
                .output()
                .expect("run tests/promtool/build.sh");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().into()
        });
    assert!(
        path.is_file(),
        "promtool is not at {}: run `make promtool`",
        path.display()
    );
    path
}

fn check_rules(file: &std::path::Path) -> std::process::Output {
    std::process::Command::new(promtool())
        .args(["check", "rules"])
        .arg(file)
        .output()
        .expect("run promtool")
}

#[test]
fn promtool_passes_the_rules_and_fails_a_broken_expression() {
    let rules =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring/rules.yaml");
    let out = check_rules(&rules);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let alerts = rule_file()
        .groups
        .iter()
        .map(|g| g.rules.len())
        .sum::<usize>();
    assert!(out.status.success(), "promtool check rules: {said}");
    assert!(
        said.contains(&format!("SUCCESS: {alerts} rules found")),
        "{said}"
    );

    // The same checker refuses what Prometheus would: an unclosed parenthesis.
    let text = read("deploy/monitoring/rules.yaml");
    let broken = text.replacen(
        "expr: sum(wasmgpu_leader) > 1",
        "expr: sum(wasmgpu_leader > 1",
        1,
    );
    assert_ne!(broken, text, "the rule to break is in rules.yaml");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    std::fs::write(&file, broken).unwrap();
    let out = check_rules(&file);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        said.contains("WasmgpuMoreThanOneLeader") && said.contains("unclosed left parenthesis"),
        "{said}"
    );
}

#[test]
fn every_alert_has_a_severity_and_says_what_to_do_in_a_runbook_that_exists() {
    let file = rule_file();
    let monitoring = read(MONITORING_DOC);
    let mut names = BTreeSet::new();
    let mut problems = Vec::new();
    let alerts: usize = file.groups.iter().map(|group| group.rules.len()).sum();
    for group in &file.groups {
        assert!(!group.name.is_empty(), "a group without a name");
        for rule in &group.rules {
            let alert = &rule.alert;
            if !names.insert(alert.clone()) {
                problems.push(format!("{alert}: named twice"));
            }
            if !alert.starts_with("Wasmgpu") {
                problems.push(format!("{alert}: name it Wasmgpu…"));
            }
            if rule.expr.trim().is_empty() {
                problems.push(format!("{alert}: no expr"));
            }
            let for_ok = rule.for_.as_deref().is_some_and(|f| {
                f.ends_with(['s', 'm', 'h']) && f[..f.len() - 1].parse::<u32>().is_ok()
            });
            if !for_ok {
                problems.push(format!(
                    "{alert}: `for` missing or not a duration: {:?}",
                    rule.for_
                ));
            }
            match rule.labels.get("severity").map(String::as_str) {
                Some("critical" | "warning") => {}
                other => problems.push(format!(
                    "{alert}: severity {other:?}, not critical or warning"
                )),
            }
            for key in ["summary", "description", "runbook_url"] {
                if rule
                    .annotations
                    .get(key)
                    .is_none_or(|text| text.trim().is_empty())
                {
                    problems.push(format!("{alert}: no annotation {key}"));
                }
            }
            let runbook = format!("{RUNBOOK_BASE}{MONITORING_DOC}#{}", alert.to_lowercase());
            if rule.annotations.get("runbook_url") != Some(&runbook) {
                problems.push(format!(
                    "{alert}: runbook_url should be {runbook} (a `### {alert}` heading of {MONITORING_DOC})"
                ));
            }
            let description = rule
                .annotations
                .get("description")
                .cloned()
                .unwrap_or_default();
            if !description.contains(&format!("{MONITORING_DOC}#{}", alert.to_lowercase())) {
                problems.push(format!(
                    "{alert}: the description names no runbook in {MONITORING_DOC}"
                ));
            }
            for text in rule.annotations.values() {
                for (page, anchor) in doc_links(text) {
                    let Ok(doc) = std::fs::read_to_string(repo().join(&page)) else {
                        problems.push(format!("{alert}: names {page}, which does not exist"));
                        continue;
                    };
                    if !anchors(&doc).contains(&anchor) {
                        problems.push(format!(
                            "{alert}: names {page}#{anchor}, a heading {page} does not have"
                        ));
                    }
                }
            }
        }
    }
    assert!(alerts >= 6, "only {alerts} alerts in {RULES}");
    let headings = anchors(&monitoring);
    for alert in &names {
        if !headings.contains(&alert.to_lowercase()) {
            problems.push(format!("{MONITORING_DOC} has no `### {alert}` heading"));
        }
    }
    assert_none(problems);
}

// === The dashboard ===

#[test]
fn every_panel_of_the_dashboard_queries_prometheus_through_the_datasource_variable() {
    let dashboard = dashboard();
    let datasource = json!({ "type": "prometheus", "uid": "${datasource}" });
    assert_eq!(dashboard["schemaVersion"], 39, "{DASHBOARD}: schemaVersion");
    assert_eq!(dashboard["uid"], "wasmgpu", "{DASHBOARD}: uid");
    assert!(
        dashboard["title"].as_str().is_some_and(|t| !t.is_empty()),
        "{DASHBOARD}: no title"
    );
    let variable = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "datasource")
        .unwrap_or_else(|| panic!("{DASHBOARD}: no `datasource` template variable"));
    assert_eq!(
        (variable["type"].as_str(), variable["query"].as_str()),
        (Some("datasource"), Some("prometheus")),
        "{DASHBOARD}: the datasource variable"
    );

    let mut problems = Vec::new();
    let mut ids = BTreeSet::new();
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or("(no title)");
        if !panel["id"].as_u64().is_some_and(|id| ids.insert(id)) {
            problems.push(format!(
                "panel {title:?}: no id, or the id of another panel"
            ));
        }
        let grid = &panel["gridPos"];
        let place = |key: &str| grid[key].as_u64();
        let fits = matches!(
            (place("h"), place("w"), place("x"), place("y")),
            (Some(h), Some(w), Some(x), Some(_)) if h > 0 && w > 0 && x + w <= 24
        );
        if !fits {
            problems.push(format!(
                "panel {title:?}: gridPos {grid} does not fit 24 columns"
            ));
        }
        let kind = panel["type"].as_str().unwrap_or_default();
        if kind == "row" {
            continue;
        }
        if !["timeseries", "stat", "table"].contains(&kind) {
            problems.push(format!("panel {title:?}: type {kind:?}"));
        }
        if panel["datasource"] != datasource {
            problems.push(format!(
                "panel {title:?}: datasource {}, not {datasource}",
                panel["datasource"]
            ));
        }
        let targets = panel["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("panel {title:?}: no targets"));
        }
        let mut refs = BTreeSet::new();
        for target in targets {
            if target["expr"].as_str().is_none_or(|e| e.trim().is_empty()) {
                problems.push(format!("panel {title:?}: a target without expr"));
            }
            if !target["refId"]
                .as_str()
                .is_some_and(|r| !r.is_empty() && refs.insert(r.to_string()))
            {
                problems.push(format!("panel {title:?}: a target without its own refId"));
            }
            if target.get("datasource").is_some_and(|d| *d != datasource) {
                problems.push(format!(
                    "panel {title:?}: a target's datasource {}",
                    target["datasource"]
                ));
            }
        }
    }
    let queried = panels(&dashboard)
        .iter()
        .filter_map(|panel| panel["targets"].as_array())
        .map(Vec::len)
        .sum::<usize>();
    assert!(queried >= 20, "only {queried} queries in {DASHBOARD}");
    assert_none(problems);
}

#[test]
fn the_monitoring_kustomization_is_apart_from_the_base() {
    let kustomization = yaml(KUSTOMIZATION);
    let resources = yaml_strings(kustomization.get("resources"));
    assert!(
        resources.iter().any(|r| r == "prometheusrule.yaml"),
        "{KUSTOMIZATION}: resources {resources:?}"
    );
    for resource in &resources {
        assert!(
            repo().join("deploy/monitoring").join(resource).exists(),
            "{KUSTOMIZATION} names {resource}, which does not exist"
        );
    }
    let generator = kustomization
        .get("configMapGenerator")
        .and_then(|g| g.as_sequence())
        .and_then(|g| g.first())
        .unwrap_or_else(|| panic!("{KUSTOMIZATION}: no configMapGenerator"));
    let files = yaml_strings(generator.get("files"));
    assert!(
        files
            .iter()
            .any(|f| f.ends_with("=dashboard.json") || f == "dashboard.json"),
        "{KUSTOMIZATION}: the dashboard ConfigMap holds {files:?}"
    );
    let label = generator
        .get("options")
        .and_then(|o| o.get("labels"))
        .and_then(|l| l.get("grafana_dashboard"))
        .and_then(|v| v.as_str());
    assert_eq!(
        label,
        Some("1"),
        "{KUSTOMIZATION}: Grafana's sidecar looks for grafana_dashboard: \"1\""
    );

    // The base installs without the Prometheus operator's CRDs.
    let base = yaml_strings(yaml("deploy/kustomization.yaml").get("resources"));
    assert!(
        !base.iter().any(|r| r.contains("monitoring")),
        "deploy/kustomization.yaml includes {base:?}: deploy/monitoring needs the Prometheus \
         operator's CRDs, keep it apart"
    );
}

// === The metrics the queries read ===

#[test]
fn promql_is_read_as_prometheus_reads_it() {
    let read = reads(
        "histogram_quantile(0.99, sum by (le, phase) (rate(wasmgpu_round_phase_seconds_bucket\
         {phase!=\"writes\"}[$__rate_interval]))) # a comment naming no_metric\n\
         / on () group_left sum(up{job=\"a-b\", instance=~\"x\\\"y\"} offset 5m) * 1e3",
    );
    assert_eq!(
        read,
        Reads {
            metric_to_labels: BTreeMap::from([
                (
                    "wasmgpu_round_phase_seconds_bucket".to_string(),
                    BTreeSet::from(["phase".to_string()])
                ),
                (
                    "up".to_string(),
                    BTreeSet::from(["instance".to_string(), "job".to_string()])
                ),
            ]),
            grouping: BTreeSet::from(["le".to_string(), "phase".to_string()]),
        }
    );
    let read = reads(
        "count(wasmgpu_leader) and on () (max without (instance) (wasmgpu_leader) == 0) or vector(0)",
    );
    assert_eq!(
        read.metric_to_labels.keys().collect::<Vec<_>>(),
        ["wasmgpu_leader"]
    );
    assert_eq!(read.grouping, BTreeSet::from(["instance".to_string()]));
    assert_eq!(
        histogram_base("wasmgpu_binding_seconds_bucket"),
        "wasmgpu_binding_seconds"
    );
    assert_eq!(
        histogram_base("wasmgpu_rounds_total"),
        "wasmgpu_rounds_total"
    );

    let page = "# HELP wasmgpu_rounds Scheduling rounds run.\n# TYPE wasmgpu_rounds counter\n\
                wasmgpu_rounds_total 3\n# HELP wasmgpu_binding_seconds Time.\n\
                # TYPE wasmgpu_binding_seconds histogram\n\
                wasmgpu_binding_seconds_bucket{le=\"0.5\"} 1\nwasmgpu_binding_seconds_sum 0.1\n\
                # TYPE wasmgpu_gpus gauge\nwasmgpu_gpus{node=\"n 1\",state=\"free\"} 2\n# EOF\n";
    let families = exposition(page);
    assert_eq!(
        families.keys().collect::<Vec<_>>(),
        [
            "wasmgpu_binding_seconds_bucket",
            "wasmgpu_binding_seconds_count",
            "wasmgpu_binding_seconds_sum",
            "wasmgpu_gpus",
            "wasmgpu_rounds_total",
        ]
    );
    assert!(families["wasmgpu_rounds_total"].help);
    assert!(!families["wasmgpu_gpus"].help);
    assert_eq!(
        families["wasmgpu_gpus"].labels,
        BTreeSet::from(["node".to_string(), "state".to_string()])
    );
}

#[test]
#[should_panic(expected = "no PromQL function")]
fn a_misspelt_function_is_not_taken_for_a_metric() {
    reads("histogram_quantle(0.99, wasmgpu_binding_seconds_bucket)");
}

/// Without an API server: every metric named is one the controller
/// registers (`Metrics::names`, which docs/CONTROLLER.md#metrics lists).
#[test]
fn every_metric_the_dashboard_and_the_alerts_query_is_registered() {
    let registered: BTreeSet<String> = Metrics::new().names().iter().cloned().collect();
    let mut problems = Vec::new();
    for (place, expr) in expressions() {
        for name in reads(&expr).metric_to_labels.keys() {
            if PROMETHEUS_OWN.contains(&name.as_str()) {
                continue;
            }
            if !registered.contains(name) && !registered.contains(histogram_base(name)) {
                problems.push(format!(
                    "{place} queries {name}, which the controller does not register \
                     (crates/controller/src/metrics.rs registers {registered:?})"
                ));
            }
        }
    }
    assert_none(problems);
}

/// Publishes spread as shadow `name` of `primary` with `wasmgpu policy
/// publish --shadow-of`; returns the ConfigMap's fingerprint.
async fn publish_shadow(ctx: &TestContext, name: &str, primary: &str) -> Result<Digest> {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(["policy", "publish"])
        .arg(policy_dir().join("wasmgpu_spread.wasm"))
        .args([
            "--name",
            name,
            "--shadow-of",
            primary,
            "--namespace",
            &ctx.namespace,
        ])
        .env("KUBECONFIG", ctx.cluster().kubeconfig_path())
        .output()
        .await?;
    ensure!(
        output.status.success(),
        "publish failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(fingerprint(&ctx.api::<ConfigMap>().get(name).await?))
}

/// A policy ConfigMap naming its component by an OCI reference no registry
/// serves (nothing listens on port 1): the pull fails, the version is
/// rejected.
async fn put_unreachable_component(ctx: &TestContext, name: &str) -> Result<()> {
    let reference = format!("oci://127.0.0.1:1/wasmgpu/{name}@sha256:{}", "0".repeat(64));
    let configmap = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name, "labels": { POLICY_LABEL: "true" } },
        "data": { COMPONENT_REF_KEY: reference },
    });
    ctx.api::<ConfigMap>()
        .patch(
            name,
            &PatchParams::apply("wasmgpu-test").force(),
            &Patch::Apply(&configmap),
        )
        .await
        .with_context(|| format!("applying policy ConfigMap {name}"))?;
    Ok(())
}

/// A controller acting as a ServiceAccount without any permission, serving
/// `/metrics` on `port`: RBAC refuses its every list (403), so its watches
/// fail and count it. Killed when dropped.
async fn refused_controller(ctx: &TestContext, port: u16) -> Result<tokio::process::Child> {
    let nobody = ctx.service_account("nobody").await?;
    let kubeconfig = scratch_dir().join(format!("{}-nobody.kubeconfig", ctx.namespace));
    nobody.write_kubeconfig(&kubeconfig)?;
    tokio::process::Command::new(wasmgpu_bin())
        .arg("controller")
        .arg(format!(
            "--policy=binpack={}",
            policy_dir().join("wasmgpu_binpack.wasm").display()
        ))
        .arg("--http-address")
        .arg(format!("127.0.0.1:{port}"))
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAMESPACE", &ctx.namespace)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting wasmgpu controller as nobody")
}

/// On the real API server: after rounds that bind pods, a policy that
/// fails, a shadow compared with its primary, a version whose component
/// cannot be pulled and Events over the rate, every metric the dashboard
/// and the alerts query is on the controller's `/metrics` page (HELP and
/// TYPE), with the labels their selectors match on; the watch failures are
/// read from a second controller whose lists RBAC refuses.
#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_query_is_exported() -> Result<()> {
    let (metric_to_labels, grouping) = queried();
    let _turn = exclusive().await;
    let ctx = TestContext::new("ctl-monitoring").await?;
    install_crds(&ctx).await?;
    let node = format!("{}-n1", ctx.namespace);
    gpu_node(&ctx, &node, 8).await?;
    // One GPU unhealthy: every state of wasmgpu_gpus has a series.
    publish_gpunode_with(&ctx, &node, 8, &[7]).await?;
    gpuresource(&ctx, "one", 1, Sharing::Exclusive, 0, None).await?;
    gpuresource(&ctx, "fallible", 1, Sharing::Exclusive, 0, Some("fallible")).await?;
    let port = free_port()?;
    let mut controller = Controller::start_with(
        &ctx,
        &[
            "--http-address".into(),
            format!("127.0.0.1:{port}"),
            // No Allocated Event is sent: each counts as not sent.
            "--allocated-events-per-second".into(),
            "0".into(),
        ],
    )
    .await?;
    let refused_port = free_port()?;
    let refused = refused_controller(&ctx, refused_port).await?;

    // A version that passes the canary and traps with more than 2 pods pending.
    let observed = put_policy(
        &ctx,
        "fallible",
        POLICY_KEY,
        policy_bytes("hostile-policy"),
        None,
        Some("\"trap-over-2\""),
    )
    .await?;
    wait_observed(&ctx, "fallible", &observed).await?;
    let observed = publish_shadow(&ctx, "spread-next", "binpack").await?;
    wait_observed(&ctx, "spread-next", &observed).await?;
    put_unreachable_component(&ctx, "unpulled").await?;

    for name in ["one-0", "one-1"] {
        create_pod(&ctx, name, "one").await?;
    }
    let failing: Vec<String> = (0..3).map(|i| format!("fallible-{i}")).collect();
    for name in &failing {
        create_pod(&ctx, name, "fallible").await?;
    }
    for name in ["one-0", "one-1"] {
        wait_bound(&ctx, name).await?;
    }

    let from_main: BTreeSet<&str> = metric_to_labels
        .keys()
        .map(String::as_str)
        .filter(|name| !AFTER_A_REFUSED_WATCH.contains(name))
        .collect();
    let (mut families, page) = scrape_until(port, &from_main).await;
    controller.check_alive()?;
    let from_refused: BTreeSet<&str> = metric_to_labels
        .keys()
        .map(String::as_str)
        .filter(|name| AFTER_A_REFUSED_WATCH.contains(name))
        .collect();
    let (refused_families, refused_page) = scrape_until(refused_port, &from_refused).await;
    drop(refused);
    for name in &from_refused {
        if let Some(family) = refused_families.get(*name) {
            families.insert(name.to_string(), family.clone());
        }
    }

    let mut problems = Vec::new();
    for (name, labels) in &metric_to_labels {
        let Some(family) = families.get(name) else {
            problems.push(format!(
                "{name} is queried by {DASHBOARD} or {RULES} but not on /metrics (no HELP or \
                 TYPE line) after this test's rounds"
            ));
            continue;
        };
        if !family.help || family.kind.is_empty() {
            problems.push(format!("{name}: its HELP or TYPE line is missing"));
        }
        let missing: Vec<&String> = labels.difference(&family.labels).collect();
        if !missing.is_empty() {
            problems.push(format!(
                "{name} is selected by labels {missing:?} it does not have (it has {:?})",
                family.labels
            ));
        }
    }
    let exported_labels: BTreeSet<&str> = families
        .values()
        .flat_map(|family| family.labels.iter().map(String::as_str))
        .chain(TARGET_LABELS.iter().copied())
        .collect();
    for label in &grouping {
        if !exported_labels.contains(label.as_str()) {
            problems.push(format!(
                "the queries group or match by label {label:?}, which no metric has"
            ));
        }
    }
    if !problems.is_empty() {
        problems.push(format!(
            "--- /metrics of the controller:\n{page}\n--- /metrics of the refused one:\n{refused_page}\n--- its log:\n{}",
            controller.log_tail()
        ));
    }
    assert_none(problems);

    let pods = ctx.api::<Pod>();
    for name in &failing {
        pods.delete(name, &DeleteParams::default().grace_period(0))
            .await?;
    }
    drop(controller);
    remove_nodes(&ctx, &[node]).await
}
