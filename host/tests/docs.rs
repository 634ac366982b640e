//! The lists the docs give are the code's: every Event reason, condition
//! type, metric and RBAC rule in `docs/*.md` and `README.md` is one the
//! code (or `deploy/rbac/`) has, and every one it has is documented.
//!
//! Each test reads a documented table (the rows of the first table under a
//! known heading), takes the names in its first column, and compares them
//! with the list the code defines: `Reason::ALL` (controller Events),
//! `conditions::ON_GPURESOURCE`/`ON_GPUNODE`, `Metrics::names` (every
//! metric registered), the reasons the agent's source names, and the rules
//! of `deploy/rbac/*.yaml`. A failure says which name is missing where, and
//! which file to fix. No API server.
//!
//! And the pages hold together: the README's policy is the SDK's compiled
//! example, the install command reads the same everywhere it is shown, and
//! every link between the pages (anchors included) leads somewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;
use wasmgpu::api::conditions;
use wasmgpu::controller::{Metrics, Reason};

// === Reading the docs ===

/// `path` relative to the repository root.
fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// README.md and every `docs/*.md`, relative to the repository root.
fn pages() -> Vec<String> {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let mut files = vec!["README.md".to_string()];
    for entry in std::fs::read_dir(&docs).expect("docs/") {
        let name = entry.expect("docs/ entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".md") {
            files.push(format!("docs/{name}"));
        }
    }
    files.sort();
    files
}

/// The lines of `doc` that are not inside a fenced code block, with a flag
/// saying whether each is a heading.
fn prose_lines(doc: &str) -> Vec<(&str, bool)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push((line, line.starts_with('#')));
        }
    }
    lines
}

/// The text under the heading line `heading` (e.g. `## Metrics`), up to the
/// next heading of the same or a higher level.
fn section<'a>(doc: &'a str, file: &str, heading: &str) -> Vec<&'a str> {
    let level = heading.chars().take_while(|&c| c == '#').count();
    let lines = prose_lines(doc);
    let start = lines
        .iter()
        .position(|(line, _)| line.trim_end() == heading)
        .unwrap_or_else(|| panic!("{file} has no heading `{heading}`"));
    lines[start + 1..]
        .iter()
        .take_while(|(line, is_heading)| {
            !(*is_heading && line.chars().take_while(|&c| c == '#').count() <= level)
        })
        .map(|(line, _)| *line)
        .collect()
}

/// The cells of a table row, split on the `|` that are not escaped.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in inner.chars() {
        match c {
            '|' if !escaped => cells.push(String::new()),
            _ => cells.last_mut().expect("one cell").push(c),
        }
        escaped = c == '\\';
    }
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The body rows of the first table under `heading` whose header's first
/// cell is `first`.
fn table(file: &str, heading: &str, first: &str) -> Vec<Vec<String>> {
    let doc = read(file);
    let lines = section(&doc, file, heading);
    let header = lines
        .iter()
        .position(|line| {
            line.starts_with('|') && cells(line).first().map(String::as_str) == Some(first)
        })
        .unwrap_or_else(|| {
            panic!("{file}, section `{heading}`: no table whose first column is `{first}`")
        });
    let rows: Vec<Vec<String>> = lines[header + 2..]
        .iter()
        .take_while(|line| line.starts_with('|'))
        .map(|line| cells(line))
        .collect();
    assert!(
        !rows.is_empty(),
        "{file}, section `{heading}`: the `{first}` table is empty"
    );
    rows
}

/// The row of a table under `heading` (whose header's first cell is
/// `first`) whose first cell names `name` in a code span.
fn table_row(file: &str, heading: &str, first: &str, name: &str) -> Vec<String> {
    let doc = read(file);
    let lines = section(&doc, file, heading);
    // `None` outside a table, else whether the table is a `first` one.
    let mut in_table: Option<bool> = None;
    for line in lines {
        if !line.starts_with('|') {
            in_table = None;
            continue;
        }
        let row = cells(line);
        match in_table {
            None => in_table = Some(row.first().map(String::as_str) == Some(first)),
            Some(true) if code_spans(&row[0]).iter().any(|span| span == name) => return row,
            Some(_) => {}
        }
    }
    panic!("{file}, section `{heading}`: no `{first}` table has a `{name}` row")
}

/// The text of each `code span` in `text`.
fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, span)| span.to_string())
        .collect()
}

/// The first code span of a cell: the name a row is about.
fn name_of(cell: &str, file: &str) -> String {
    code_spans(cell)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{file}: the cell {cell:?} names nothing in `backticks`"))
}

/// The page that lists, in bullets, what an operator watches.
const OPERATING: &str = "docs/OPERATING.md";

/// The bullet of docs/OPERATING.md's `## Watching it` that starts with
/// `* **{title}**`, up to the next bullet or blank line.
fn operating_bullet(title: &str) -> String {
    let doc = read(OPERATING);
    let lines = section(&doc, OPERATING, "## Watching it");
    let start = format!("* **{title}**");
    let mut lines = lines
        .into_iter()
        .skip_while(|line| !line.starts_with(&start));
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("{OPERATING} (## Watching it) has no bullet starting `{start}`"));
    let rest = lines.take_while(|line| line.starts_with("  "));
    std::iter::once(first)
        .chain(rest)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Panics with every line of `problems`, if there is one.
fn assert_none(problems: Vec<String>) {
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// The names in `code` missing from `docs`, and those in `docs` missing
/// from `code`, each as a sentence made by `missing_from_docs` /
/// `missing_from_code`.
fn differences(
    code: &BTreeSet<String>,
    docs: &BTreeSet<String>,
    missing_from_docs: impl Fn(&str) -> String,
    missing_from_code: impl Fn(&str) -> String,
) -> Vec<String> {
    code.difference(docs)
        .map(|name| missing_from_docs(name))
        .chain(docs.difference(code).map(|name| missing_from_code(name)))
        .collect()
}

// === Events ===

/// Every reason the controller's Events carry.
fn controller_reasons() -> BTreeSet<String> {
    Reason::ALL.iter().map(|r| r.as_str().to_string()).collect()
}

/// Every reason the agent's Events carry: the string literal after each
/// `EventType::Normal,` / `EventType::Warning,` in `crates/agent/src/` (the
/// device plugin publishes them with a reason it names there).
fn device_plugin_reasons() -> BTreeSet<String> {
    fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/agent/src"),
        &mut files,
    );
    let mut reasons = BTreeSet::new();
    for file in files {
        let source = std::fs::read_to_string(&file).expect("an agent source file");
        for marker in ["EventType::Normal,", "EventType::Warning,"] {
            for (at, _) in source.match_indices(marker) {
                let after = source[at + marker.len()..].trim_start();
                if let Some(literal) = after.strip_prefix('"') {
                    let reason = literal.split('"').next().unwrap_or_default();
                    reasons.insert(reason.to_string());
                }
            }
        }
    }
    assert!(
        !reasons.is_empty(),
        "found no Event reason in crates/agent/src/ (an `EventType::…,` followed by a string literal)"
    );
    reasons
}

#[test]
fn the_controller_events_table_lists_every_reason_the_controller_sends() {
    let file = "docs/CONTROLLER.md";
    let documented: BTreeSet<String> = table(file, "## What users see", "reason")
        .iter()
        .map(|row| name_of(&row[0], file))
        .collect();
    assert_none(differences(
        &controller_reasons(),
        &documented,
        |name| {
            format!(
                "Event reason `{name}` is sent by the controller (Reason in \
                 crates/controller/src/events.rs) but missing from the Events table of \
                 {file} (## What users see): add its row"
            )
        },
        |name| {
            format!(
                "{file} (## What users see) lists Event reason `{name}`, which the \
                 controller never sends (not in Reason::ALL of \
                 crates/controller/src/events.rs): remove the row, or add the reason there"
            )
        },
    ));
}

#[test]
fn the_agent_events_table_lists_every_reason_the_device_plugin_sends() {
    let file = "docs/AGENT.md";
    let documented: BTreeSet<String> = table(file, "### Events", "reason")
        .iter()
        .map(|row| name_of(&row[0], file))
        .collect();
    assert_none(differences(
        &device_plugin_reasons(),
        &documented,
        |name| {
            format!(
                "Event reason `{name}` is sent by the device plugin (crates/agent/src/) \
                 but missing from the Events table of \
                 {file} (### Events): add its row"
            )
        },
        |name| {
            format!(
                "{file} (### Events) lists Event reason `{name}`, which the device plugin \
                 never sends: remove the row"
            )
        },
    ));
}

#[test]
fn the_operating_page_names_only_events_that_are_sent() {
    let sent: BTreeSet<String> = controller_reasons()
        .into_iter()
        .chain(device_plugin_reasons())
        .collect();
    let bullet = operating_bullet("Events");
    let named: BTreeSet<String> = code_spans(&bullet)
        .into_iter()
        .filter(|span| span.starts_with(|c: char| c.is_ascii_uppercase()))
        .collect();
    assert!(
        named.len() >= 5,
        "read {named:?} from the Events bullet of {OPERATING}"
    );
    assert_none(
        named
            .difference(&sent)
            .map(|name| {
                format!(
                    "{OPERATING} (Watching it, Events) names Event reason `{name}`, which \
                     nothing sends: remove it (every reason sent is in docs/CONTROLLER.md and \
                     docs/AGENT.md)"
                )
            })
            .collect(),
    );
}

// === Conditions ===

fn strings(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The condition types of the rows of the `## Conditions` table of
/// docs/API.md that are `on` the kind.
fn api_conditions(on: &str) -> BTreeSet<String> {
    let file = "docs/API.md";
    table(file, "## Conditions", "type")
        .iter()
        .filter(|row| row.get(1).map(String::as_str) == Some(on))
        .map(|row| name_of(&row[0], file))
        .collect()
}

fn missing_condition(kind: &str, list: &str, place: &str) -> impl Fn(&str) -> String {
    move |name| {
        format!(
            "condition type `{name}` of {kind} ({list} in crates/api/src/conditions.rs) is \
             missing from {place}: add it"
        )
    }
}

fn unknown_condition(kind: &str, list: &str, place: &str) -> impl Fn(&str) -> String {
    move |name| {
        format!(
            "{place} names condition type `{name}` of {kind}, which is not in {list} of \
             crates/api/src/conditions.rs: remove it, or add it there"
        )
    }
}

#[test]
fn the_conditions_table_lists_every_condition_type() {
    let mut problems = Vec::new();
    for (kind, list, code) in [
        ("GPUResource", "ON_GPURESOURCE", conditions::ON_GPURESOURCE),
        ("GPUNode", "ON_GPUNODE", conditions::ON_GPUNODE),
        ("GPUTenant", "ON_GPUTENANT", conditions::ON_GPUTENANT),
    ] {
        let place = format!("the `## Conditions` table of docs/API.md (rows on {kind})");
        problems.extend(differences(
            &strings(code),
            &api_conditions(kind),
            missing_condition(kind, list, &place),
            unknown_condition(kind, list, &place),
        ));
    }
    assert_none(problems);
}

#[test]
fn every_other_list_of_conditions_is_complete() {
    let mut problems = Vec::new();
    let gpuresource = strings(conditions::ON_GPURESOURCE);
    let gpunode = strings(conditions::ON_GPUNODE);
    let gputenant = strings(conditions::ON_GPUTENANT);
    // The status tables of docs/API.md: the `conditions` row of each kind.
    for (kind, list, code, heading, first) in [
        (
            "GPUResource",
            "ON_GPURESOURCE",
            &gpuresource,
            "## GPUResource (namespaced, short name `gpur`)",
            "field",
        ),
        (
            "GPUNode",
            "ON_GPUNODE",
            &gpunode,
            "## GPUNode (cluster-scoped, short name `gpun`)",
            "status field",
        ),
        (
            "GPUTenant",
            "ON_GPUTENANT",
            &gputenant,
            "## GPUTenant (cluster-scoped, short name `gput`)",
            "status field",
        ),
    ] {
        let row = table_row("docs/API.md", heading, first, "conditions");
        let named: BTreeSet<String> = code_spans(&row[1]).into_iter().collect();
        let place = format!("the `conditions` row of docs/API.md's {kind} status table");
        problems.extend(differences(
            code,
            &named,
            missing_condition(kind, list, &place),
            unknown_condition(kind, list, &place),
        ));
    }
    // The agent's table of what it publishes.
    let file = "docs/AGENT.md";
    let published: BTreeSet<String> = table(file, "## What it publishes", "condition")
        .iter()
        .map(|row| name_of(&row[0], file))
        .collect();
    let place = format!("the conditions table of {file} (## What it publishes)");
    problems.extend(differences(
        &gpunode,
        &published,
        missing_condition("GPUNode", "ON_GPUNODE", &place),
        unknown_condition("GPUNode", "ON_GPUNODE", &place),
    ));
    // The Conditions bullet of the operating page (its links name files, in
    // lower case).
    let named: BTreeSet<String> = code_spans(&operating_bullet("Conditions"))
        .into_iter()
        .filter(|span| span.starts_with(|c: char| c.is_ascii_uppercase()))
        .collect();
    let place = "the Conditions bullet of docs/OPERATING.md (## Watching it)";
    problems.extend(differences(
        &gpuresource,
        &named,
        missing_condition("GPUResource", "ON_GPURESOURCE", place),
        unknown_condition("GPUResource", "ON_GPURESOURCE", place),
    ));
    assert_none(problems);
}

// === Metrics ===

/// The name of every metric the controller registers, as scraped
/// (counters with `_total`); a unit test of `metrics.rs` checks them
/// against the registry's encoding.
fn registered_metrics() -> BTreeSet<String> {
    let names: BTreeSet<String> = Metrics::new().names().iter().cloned().collect();
    assert!(names.len() >= 10, "read {names:?}");
    names
}

#[test]
fn the_metrics_table_lists_every_registered_metric() {
    let file = "docs/CONTROLLER.md";
    let documented: BTreeSet<String> = table(file, "## Metrics", "metric")
        .iter()
        .map(|row| name_of(&row[0], file))
        .collect();
    assert_none(differences(
        &registered_metrics(),
        &documented,
        |name| {
            format!(
                "metric `{name}` is registered (crates/controller/src/metrics.rs) but missing \
                 from the table of {file} (## Metrics): add its row, with its type and labels"
            )
        },
        |name| {
            format!(
                "{file} (## Metrics) lists metric `{name}`, which the controller does not \
                 register: remove the row, or register it in crates/controller/src/metrics.rs"
            )
        },
    ));
}

/// Anywhere in the docs, a code span naming a `wasmgpu_…` metric names a
/// registered one (`wasmgpu_policy_sdk::…` and other paths are not metrics).
#[test]
fn every_metric_the_docs_name_is_registered() {
    let registered = registered_metrics();
    let files = pages();
    let mut problems = Vec::new();
    for file in &files {
        let text = read(file);
        let prose: Vec<&str> = prose_lines(&text)
            .into_iter()
            .map(|(line, _)| line)
            .collect();
        // Paragraph by paragraph: a stray backtick spoils one paragraph only.
        let spans = prose
            .split(|line| line.trim().is_empty())
            .flat_map(|paragraph| code_spans(&paragraph.join("\n")));
        for span in spans {
            let name = span.split('{').next().unwrap_or_default();
            let is_metric = name.starts_with("wasmgpu_")
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if is_metric && !registered.contains(name) {
                problems.push(format!(
                    "{file} names metric `{name}`, which the controller does not register \
                     (registered: {}): fix the name",
                    registered.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    assert_none(problems);
}

// === RBAC ===

/// What a role grants on one resource.
#[derive(Debug, Default, PartialEq, Eq)]
struct Grant {
    verbs: BTreeSet<String>,
    resource_names: BTreeSet<String>,
}

/// `(API group, resource)`, the core group as `""`.
type Rules = BTreeMap<(String, String), Grant>;

fn string_list(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The rules of the objects of `kinds` in a YAML text (one or several
/// documents).
fn rules_of(text: &str, kinds: &[&str], source: &str) -> Rules {
    let mut rules = Rules::new();
    for document in serde_norway::Deserializer::from_str(text) {
        let value = Value::deserialize(document)
            .unwrap_or_else(|e| panic!("{source}: unreadable YAML: {e}"));
        if !kinds.iter().any(|kind| value["kind"] == *kind) {
            continue;
        }
        for rule in value["rules"].as_array().into_iter().flatten() {
            for group in string_list(&rule["apiGroups"]) {
                for resource in string_list(&rule["resources"]) {
                    let grant = rules.entry((group.clone(), resource)).or_default();
                    grant.verbs.extend(string_list(&rule["verbs"]));
                    grant
                        .resource_names
                        .extend(string_list(&rule["resourceNames"]));
                }
            }
        }
    }
    assert!(!rules.is_empty(), "{source}: no rules of {kinds:?}");
    rules
}

/// `wasmgpu.io`, `core` → `""`.
fn group_of(cell: &str) -> String {
    if cell.starts_with("core") {
        String::new()
    } else {
        code_spans(cell).into_iter().next().unwrap_or_default()
    }
}

/// `get, list, patch (why)` → `{get, list, patch}`.
fn verbs_of(cell: &str) -> BTreeSet<String> {
    let mut plain = String::new();
    let mut depth = 0;
    for c in cell.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    plain
        .split(',')
        .map(|verb| verb.trim().to_string())
        .filter(|verb| !verb.is_empty())
        .collect()
}

fn show_group(group: &str) -> &str {
    if group.is_empty() { "core" } else { group }
}

fn show_verbs(verbs: &BTreeSet<String>) -> String {
    verbs.iter().cloned().collect::<Vec<_>>().join(", ")
}

/// Compares `documented` with `deployed`, naming `doc` and `deploy`.
fn compare_rules(documented: &Rules, deployed: &Rules, doc: &str, deploy: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for ((group, resource), grant) in deployed {
        let group_name = show_group(group);
        match documented.get(&(group.clone(), resource.clone())) {
            None => problems.push(format!(
                "{deploy} grants {} on `{resource}` ({group_name}), but {doc} does not list \
                 it: add the rule",
                show_verbs(&grant.verbs),
            )),
            Some(listed) => {
                if listed.verbs != grant.verbs {
                    problems.push(format!(
                        "{deploy} grants {} on `{resource}` ({group_name}), {doc} says {}: \
                         make {doc} say what {deploy} grants",
                        show_verbs(&grant.verbs),
                        show_verbs(&listed.verbs)
                    ));
                }
                for name in grant.resource_names.difference(&listed.resource_names) {
                    problems.push(format!(
                        "{deploy} grants `{resource}` ({group_name}) only by name, \
                         including `{name}`, which {doc} does not name: add it to the rule"
                    ));
                }
            }
        }
    }
    for ((group, resource), listed) in documented {
        if !deployed.contains_key(&(group.clone(), resource.clone())) {
            problems.push(format!(
                "{doc} lists {} on `{resource}` ({}), which {deploy} does not grant: remove \
                 it, or grant it there",
                show_verbs(&listed.verbs),
                show_group(group)
            ));
        }
    }
    problems
}

#[test]
fn the_controller_permissions_table_is_deploy_rbac() {
    let deploy = "deploy/rbac/controller.yaml";
    let deployed = rules_of(&read(deploy), &["ClusterRole", "Role"], deploy);
    let doc = "docs/CONTROLLER.md (## Permissions)";
    let mut documented = Rules::new();
    for row in table("docs/CONTROLLER.md", "## Permissions", "API group") {
        let spans = code_spans(&row[1]);
        let resource = spans.first().cloned().unwrap_or_default();
        let grant = documented.entry((group_of(&row[0]), resource)).or_default();
        grant.verbs.extend(verbs_of(&row[2]));
        grant.resource_names.extend(spans.into_iter().skip(1));
    }
    // A row names more than resource names in its parentheses (the
    // namespace flag, annotations): only those the deployment names count.
    for (key, grant) in &mut documented {
        let names = deployed
            .get(key)
            .map(|g| g.resource_names.clone())
            .unwrap_or_default();
        grant.resource_names.retain(|name| names.contains(name));
    }
    assert_none(compare_rules(&documented, &deployed, doc, deploy));
}

#[test]
fn the_agent_rbac_in_the_docs_is_deploy_rbac() {
    let deploy = "deploy/rbac/agent.yaml";
    let deployed = rules_of(&read(deploy), &["ClusterRole", "Role"], deploy);
    let doc = "docs/AGENT.md (## RBAC, its yaml block)";
    let agent = read("docs/AGENT.md");
    let section = agent
        .split("\n## RBAC\n")
        .nth(1)
        .expect("docs/AGENT.md has no `## RBAC` section");
    let block = section
        .split("```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("docs/AGENT.md's `## RBAC` section has no yaml block");
    let documented = rules_of(block, &["ClusterRole", "Role"], doc);
    assert_none(compare_rules(&documented, &deployed, doc, deploy));
}

// === --help ===

/// `wasmgpu controller --help` says what the applier writes: the
/// allocation on the pod, by its binding (no ledger of the GPUResource).
#[test]
fn the_controller_help_says_where_an_allocation_is_recorded() {
    use clap::CommandFactory;
    let mut cli = wasmgpu::cli::Cli::command();
    let controller = cli
        .find_subcommand_mut("controller")
        .expect("a controller subcommand");
    let help = controller.render_long_help().to_string();
    let mut problems = Vec::new();
    for annotation in [
        wasmgpu::api::ALLOCATION_ANNOTATION,
        wasmgpu::api::DEVICES_ANNOTATION,
        wasmgpu::api::NODE_ANNOTATION,
    ] {
        if !help.contains(annotation) {
            problems.push(format!(
                "`wasmgpu controller --help` does not name {annotation}, which the binding \
                 writes on the pod: say so in the doc of ControllerCommand \
                 (host/src/cli/controller.rs)"
            ));
        }
    }
    if help.contains("status ledger") {
        problems.push(
            "`wasmgpu controller --help` still describes a status ledger; allocations live \
             on the pods: fix the doc of ControllerCommand (host/src/cli/controller.rs)"
                .to_string(),
        );
    }
    assert_none(problems);
}

// === The pages together ===

/// The body of each fenced block of `doc` whose info string is `lang`.
fn fenced_blocks(doc: &str, lang: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    // Inside a fence: its lines so far when it is a `lang` block.
    let mut inside: Option<Option<Vec<&str>>> = None;
    for line in doc.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (inside.take(), fence) {
            (None, Some(info)) => inside = Some((info.trim() == lang).then(Vec::new)),
            (None, None) => {}
            (Some(body), Some(_)) => blocks.extend(body.map(|body| body.join("\n"))),
            (Some(mut body), None) => {
                if let Some(body) = body.as_mut() {
                    body.push(line);
                }
                inside = Some(body);
            }
        }
    }
    blocks
}

/// The README's policy is the example of the SDK's crate docs, which its
/// doctests compile and run: the first page shows code of the SDK as it is.
#[test]
fn the_readme_policy_is_the_sdk_example_its_doctests_compile() {
    let readme = read("README.md");
    let blocks = fenced_blocks(&readme, "rust");
    assert_eq!(
        blocks.len(),
        1,
        "README.md should show one rust block, the policy"
    );
    let sdk = "policies/sdk/src/lib.rs";
    let docs: String = read(sdk)
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(|line| line.strip_prefix(' ').unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n");
    let example = fenced_blocks(&docs, "")
        .into_iter()
        .find(|block| block.contains("export_policy!"))
        .unwrap_or_else(|| panic!("{sdk}: no example in the crate docs exports a policy"));
    assert!(
        example.contains(&blocks[0]),
        "README.md's policy is not the example of the crate docs of {sdk} (which \
         `cargo test -p wasmgpu-policy-sdk --doc` compiles): copy it from there, or change \
         both\n--- README.md:\n{}\n--- {sdk}:\n{example}",
        blocks[0]
    );
}

/// The first line of the first `sh` block under `## Installing`, as
/// host/tests/deploy.rs reads it from the README.
fn install_command(file: &str) -> String {
    let doc = read(file);
    let section = doc
        .split("\n## Installing\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{file} has no `## Installing` section"));
    let block = section
        .split("```sh\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{file}: `## Installing` has no sh block"));
    block.lines().next().unwrap_or_default().to_string()
}

/// host/tests/deploy.rs runs the README's install command; the operating
/// page shows the same line.
#[test]
fn the_install_command_is_the_same_everywhere_it_is_shown() {
    assert_eq!(
        install_command(OPERATING),
        install_command("README.md"),
        "{OPERATING} (## Installing) shows another install command than README.md, whose \
         line host/tests/deploy.rs runs: make them the same"
    );
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped,
/// spaces as `-`, a repeated one numbered.
fn anchors(doc: &str) -> BTreeSet<String> {
    let mut seen = BTreeMap::<String, usize>::new();
    let mut anchors = BTreeSet::new();
    for (line, is_heading) in prose_lines(doc) {
        if !is_heading {
            continue;
        }
        let text = line.trim_start_matches('#').trim();
        let slug: String = text
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_default();
        anchors.insert(match *count {
            0 => slug.clone(),
            n => format!("{slug}-{n}"),
        });
        *count += 1;
    }
    anchors
}

/// The target of every `[text](target)` in the prose of `doc`.
fn link_targets(doc: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for (line, _) in prose_lines(doc) {
        // Outside code spans only.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            targets.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    targets
}

/// Every link of README.md and docs/*.md to a file of the repository
/// leads to one, and every anchor to a heading of its page.
#[test]
fn every_link_between_the_pages_leads_somewhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let files = pages();
    let mut checked = 0;
    let mut problems = Vec::new();
    for file in &files {
        let doc = read(file);
        let dir = Path::new(file).parent().expect("a file in a directory");
        for target in link_targets(&doc) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let linked = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path).to_string_lossy().into_owned()
            };
            if !root.join(&linked).exists() {
                problems.push(format!("{file} links to `{target}`: there is no {linked}"));
                continue;
            }
            if let Some(anchor) = anchor
                && !anchors(&read(&linked)).contains(anchor)
            {
                problems.push(format!(
                    "{file} links to `{target}`: {linked} has no heading whose anchor is \
                     `#{anchor}`"
                ));
            }
        }
    }
    assert!(checked >= 50, "found only {checked} links in {files:?}");
    assert_none(problems);
}

// === The checks themselves ===

#[test]
fn a_missing_row_is_reported_with_its_fix() {
    let code: BTreeSet<String> = strings(&["Allocated", "GangWaiting"]);
    let docs: BTreeSet<String> = strings(&["Allocated", "Released"]);
    let problems = differences(
        &code,
        &docs,
        |name| format!("{name} missing from the docs"),
        |name| format!("{name} missing from the code"),
    );
    assert_eq!(
        problems,
        [
            "GangWaiting missing from the docs",
            "Released missing from the code"
        ]
    );
    assert_eq!(
        cells("| `--on-policy-failure wait\\|last-good` | `wait` |"),
        ["`--on-policy-failure wait\\|last-good`", "`wait`"]
    );
    assert_eq!(
        verbs_of("get, list, patch (phase, counts; an earlier version's ledger)"),
        strings(&["get", "list", "patch"])
    );
}

#[test]
fn anchors_and_links_are_read_as_github_does() {
    let doc = "# Policies\n## Failure at run time: `--on-policy-failure`\n```sh\n# not a heading\n```\n\
               ## Measured (2026-12-01, 2-core)\n## Measured (2026-12-01, 2-core)\n";
    assert_eq!(
        anchors(doc),
        strings(&[
            "policies",
            "failure-at-run-time---on-policy-failure",
            "measured-2026-12-01-2-core",
            "measured-2026-12-01-2-core-1",
        ])
    );
    assert_eq!(
        link_targets("See [`docs/API.md`](docs/API.md#conditions) and [x](../a.md), not `[y](z)`."),
        ["docs/API.md#conditions", "../a.md"]
    );
}

#[test]
fn a_rule_missing_from_the_docs_is_reported() {
    let deployed = rules_of(
        "kind: ClusterRole\nrules:\n  - apiGroups: [\"\"]\n    resources: [\"secrets\"]\n    \
         resourceNames: [\"wasmgpu-registry\"]\n    verbs: [\"get\"]\n",
        &["ClusterRole"],
        "test",
    );
    let problems = compare_rules(&Rules::new(), &deployed, "the doc", "the file");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("`secrets` (core)") && problems[0].contains("add the rule"),
        "{problems:?}"
    );
}
