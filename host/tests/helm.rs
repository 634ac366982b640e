//! The Helm chart in `deploy/helm/wasmgpu` installs what `deploy/` does. It
//! lints; with its defaults it renders exactly the objects of `kubectl
//! kustomize deploy/` (kind, namespace, name and content); it carries byte
//! for byte copies of `deploy/crds` and `deploy/policies`; each value changes
//! what it says; the API server accepts what it renders. Installed on a real
//! API server with the commands of docs/HELM.md, an upgrade with the same
//! values rewrites nothing but Helm's record of the release, and the release
//! fits the 1 MiB of its Secret; with `policySource=oci` it carries no
//! component.
//!
//! ```text
//!  helm template ──▶ objects ◀── kubectl kustomize deploy/     (same set, same content)
//!  helm template ──▶ kubectl apply --server-side --dry-run=server
//!  docs/HELM.md ──▶ kubectl create namespace; helm install; helm upgrade
//!                   resourceVersions before == after, but sh.helm.release.v1.*
//! ```
//!
//! Helm comes from `make helm` (`tests/helm/build.sh`); `WASMGPU_HELM`
//! names it. The test process shares one API server: only the install test
//! writes the chart's objects (namespace `wasmgpu-system`); the test of what
//! the server accepts renders into its own namespace and only dry-runs.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;
use wasmgpu_test_harness::{Cluster, TestContext, kubectl_binary};

/// Names the helm binary; `make` sets it.
const HELM_ENV: &str = "WASMGPU_HELM";
const CHART: &str = "deploy/helm/wasmgpu";
const RELEASE: &str = "wasmgpu";
/// The chart's default namespace, deploy/'s.
const NAMESPACE: &str = "wasmgpu-system";
/// The most a Secret holds, and so a Helm release (one Secret a revision).
const SECRET_LIMIT: usize = 1 << 20;
/// How long a helm command against the API server may take (an install
/// waits up to 60 s for its CRDs to be served).
const HELM_WAIT: Duration = Duration::from_secs(120);
/// The policies the chart ships, as deploy/policies does.
const POLICIES: [&str; 3] = ["binpack", "spread", "fairshare"];

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(path: &str) -> Result<String> {
    std::fs::read_to_string(root().join(path)).with_context(|| format!("reading {path}"))
}

// === Helm ===

/// The helm binary: `$WASMGPU_HELM`, or the cache entry
/// `tests/helm/build.sh` builds for the sources in this checkout; it must
/// exist.
fn helm_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(HELM_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!(
                "{HELM_ENV}={} does not exist: run `make helm` to build it",
                path.display()
            );
        }
        return Ok(path);
    }
    let script = root().join("tests/helm/build.sh");
    let output = Command::new(&script)
        .arg("--path")
        .output()
        .with_context(|| format!("running {} --path", script.display()))?;
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if !output.status.success() || !path.is_file() {
        bail!(
            "helm is not built for these sources (expected at {}): run `make helm` \
             (or tests/helm/build.sh), or set {HELM_ENV}",
            path.display()
        );
    }
    Ok(path)
}

/// Helm with a home of its own (no repositories, plugins or registry logins
/// of the user's), run from the repository root.
struct Helm {
    binary: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    fn new() -> Result<Self> {
        Ok(Self {
            binary: helm_binary()?,
            home: tempfile::Builder::new().prefix("wasmgpu-helm-").tempdir()?,
        })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .args(args)
            .current_dir(root())
            .env("HELM_CACHE_HOME", self.home.path().join("cache"))
            .env("HELM_CONFIG_HOME", self.home.path().join("config"))
            .env("HELM_DATA_HOME", self.home.path().join("data"))
            .env_remove("KUBECONFIG");
        command
    }

    /// `helm ARGS` without a cluster: its standard output, or an error with
    /// its stderr.
    fn run(&self, args: &[&str]) -> Result<String> {
        let output = self
            .command(args)
            .output()
            .with_context(|| format!("running helm {args:?}"))?;
        stdout_of(args, output)
    }

    /// `helm ARGS` against `cluster` with the admin identity, bounded by
    /// [`HELM_WAIT`].
    async fn run_on(&self, cluster: &Cluster, args: &[&str]) -> Result<String> {
        let mut command = self.command(args);
        command.env("KUBECONFIG", cluster.kubeconfig_path());
        let output = tokio::time::timeout(
            HELM_WAIT,
            tokio::process::Command::from(command)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .with_context(|| format!("helm {args:?} did not finish within {HELM_WAIT:?}"))??;
        stdout_of(args, output)
    }

    /// `helm template wasmgpu deploy/helm/wasmgpu --include-crds`, with a
    /// `--set` for each of `sets`.
    fn template(&self, sets: &[&str]) -> Result<String> {
        self.run(&with_sets(
            &["template", RELEASE, CHART, "--include-crds"],
            sets,
        ))
    }

    /// A file in Helm's home holding `text`, for kubectl's `-f`.
    fn write(&self, name: &str, text: &str) -> Result<String> {
        let path = self.home.path().join(name);
        std::fs::write(&path, text)?;
        Ok(path.to_string_lossy().into_owned())
    }
}

fn with_sets<'a>(args: &[&'a str], sets: &[&'a str]) -> Vec<&'a str> {
    let mut all = args.to_vec();
    for set in sets {
        all.extend(["--set", *set]);
    }
    all
}

fn stdout_of(args: &[&str], output: Output) -> Result<String> {
    ensure!(
        output.status.success(),
        "helm {args:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?)
}

/// `kubectl kustomize deploy/`: what `kubectl apply -k deploy/` installs.
fn kustomize() -> Result<String> {
    let output = Command::new(kubectl_binary()?)
        .args(["kustomize", "deploy/"])
        .current_dir(root())
        .output()
        .context("running kubectl kustomize deploy/")?;
    ensure!(
        output.status.success(),
        "kubectl kustomize deploy/: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?)
}

// === Objects ===

/// `kind/namespace/name`, as host/tests/deploy.rs names an object.
fn key(object: &Value) -> String {
    let meta = &object["metadata"];
    format!(
        "{}/{}/{}",
        object["kind"].as_str().unwrap_or_default(),
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str().unwrap_or_default()
    )
}

/// Every object of a multi-document YAML text, by [`key`]. Documents of
/// comments only (Helm's `# Source:` lines of a template that rendered
/// nothing) are skipped.
fn objects(yaml: &str) -> Result<BTreeMap<String, Value>> {
    let mut documents = vec![String::new()];
    for line in yaml.lines() {
        if line.trim_end() == "---" {
            documents.push(String::new());
        } else if let Some(document) = documents.last_mut() {
            document.push_str(line);
            document.push('\n');
        }
    }
    let mut objects = BTreeMap::new();
    for document in documents {
        let has_content = document.lines().any(|line| {
            let line = line.trim();
            !line.is_empty() && !line.starts_with('#')
        });
        if !has_content {
            continue;
        }
        let object: Value = serde_norway::from_str(&document)?;
        let key = key(&object);
        ensure!(objects.insert(key.clone(), object).is_none(), "{key} twice");
    }
    Ok(objects)
}

/// `value` with what two YAML writers may write differently of the same
/// object made one: base64 wrapped onto lines (`binaryData`: kustomize wraps
/// it, the API server reads it either way) and runs of whitespace in
/// strings (kustomize writes the folded CEL expression of the gpu-pods
/// policy with a blank line that the source, read as YAML says, has not).
fn normalized(value: &Value, in_binary_data: bool) -> Value {
    match value {
        Value::String(text) if in_binary_data => Value::String(text.split_whitespace().collect()),
        Value::String(text) => Value::String(text.split_whitespace().collect::<Vec<_>>().join(" ")),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| normalized(item, in_binary_data))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        normalized(v, in_binary_data || k == "binaryData"),
                    )
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 120 {
        return text;
    }
    let head: String = text.chars().take(120).collect();
    format!("{head}… ({} chars)", text.len())
}

/// Where `got` differs from `want`, one line per field (`path: …`).
fn differences(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(want), Value::Object(got)) => {
            let fields: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
            for field in fields {
                let at = format!("{path}.{field}");
                match (want.get(field), got.get(field)) {
                    (Some(w), Some(g)) => differences(&at, w, g, out),
                    (Some(w), None) => {
                        out.push(format!("{at}: deploy/ has {}, the chart none", short(w)))
                    }
                    (None, Some(g)) => {
                        out.push(format!("{at}: the chart has {}, deploy/ none", short(g)))
                    }
                    (None, None) => {}
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (w, g)) in w.iter().zip(g).enumerate() {
                differences(&format!("{path}[{i}]"), w, g, out);
            }
        }
        // One YAML writer prints `0`, another `0.0`: the same number.
        (Value::Number(w), Value::Number(g)) if w.as_f64() == g.as_f64() => {}
        _ if want != got => out.push(format!(
            "{path}: deploy/ has {}, the chart {}",
            short(want),
            short(got)
        )),
        _ => {}
    }
}

fn object<'a>(objects: &'a BTreeMap<String, Value>, key: &str) -> Result<&'a Value> {
    objects
        .get(key)
        .with_context(|| format!("{key} is not rendered; rendered: {:#?}", objects.keys()))
}

/// The policy ConfigMaps of a rendering, by name.
fn policy_config_maps(objects: &BTreeMap<String, Value>) -> BTreeMap<String, &Value> {
    objects
        .values()
        .filter(|o| {
            o["kind"] == "ConfigMap" && o["metadata"]["labels"]["wasmgpu.io/policy"] == "true"
        })
        .map(|o| {
            (
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                o,
            )
        })
        .collect()
}

fn args_of(workload: &Value) -> Vec<String> {
    workload["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}

// === The docs' commands ===

/// The commands of the first `sh` block under `heading` of docs/HELM.md,
/// without comments or blank lines.
fn docs_commands(heading: &str) -> Result<Vec<String>> {
    let doc = read("docs/HELM.md")?;
    let section = doc
        .split(&format!("\n{heading}\n"))
        .nth(1)
        .with_context(|| format!("docs/HELM.md has no `{heading}` section"))?;
    let section = section.split("\n## ").next().unwrap_or_default();
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .with_context(|| format!("docs/HELM.md: `{heading}` has no sh block"))?;
    let commands: Vec<String> = block
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim().to_owned())
        .filter(|line| !line.is_empty())
        .collect();
    for command in &commands {
        ensure!(
            !command.contains(['\'', '"', '|', '>', '$', '\\']),
            "docs/HELM.md `{heading}`: `{command}` needs a shell; this test splits commands on spaces"
        );
    }
    Ok(commands)
}

/// Runs one docs command (`kubectl …` or `helm …`) against `cluster`.
async fn run_command(cluster: &Cluster, helm: &Helm, command: &str) -> Result<String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    match words.split_first() {
        Some((&"kubectl", args)) => cluster.run_kubectl(root(), args).await,
        Some((&"helm", args)) => helm.run_on(cluster, args).await,
        _ => bail!("docs/HELM.md: `{command}` is neither a kubectl nor a helm command"),
    }
}

/// Every object of the release (its manifest, and the CRDs of the chart's
/// `crds/`) as the API server has it: `kind/namespace/name` → resourceVersion.
async fn release_objects(cluster: &Cluster, helm: &Helm) -> Result<BTreeMap<String, String>> {
    let manifest = helm
        .run_on(
            cluster,
            &["get", "manifest", RELEASE, "--namespace", NAMESPACE],
        )
        .await?;
    let file = helm.write("manifest.yaml", &manifest)?;
    let crds = format!("{CHART}/crds");
    let json = cluster
        .run_kubectl(root(), &["get", "-f", &file, "-f", &crds, "-o", "json"])
        .await?;
    let list: Value = serde_json::from_str(&json)?;
    let items = list["items"].as_array().context("no items")?;
    Ok(items
        .iter()
        .map(|item| {
            let version = item["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default();
            (key(item), version.to_owned())
        })
        .collect())
}

/// Helm's records of the release: Secret name → (resourceVersion, bytes of
/// its data).
async fn release_secrets(ctx: &TestContext) -> Result<BTreeMap<String, (String, usize)>> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), NAMESPACE);
    let list = secrets
        .list(&ListParams::default().labels(&format!("owner=helm,name={RELEASE}")))
        .await?;
    Ok(list
        .items
        .iter()
        .map(|secret| {
            let size: usize = secret
                .data
                .iter()
                .flatten()
                .map(|(_, bytes)| bytes.0.len())
                .sum();
            (
                secret.metadata.name.clone().unwrap_or_default(),
                (
                    secret.metadata.resource_version.clone().unwrap_or_default(),
                    size,
                ),
            )
        })
        .collect())
}

/// About what a rendering takes of a release Secret: Helm stores the
/// release as base64(gzip(JSON)), and the JSON holds the manifest, plus the
/// parent chart's own small files, templates and values (the install test
/// measures the real Secret).
fn stored_size(manifest: &str) -> Result<usize> {
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gzip.write_all(manifest.as_bytes())?;
    Ok(gzip.finish()?.len().div_ceil(3) * 4)
}

fn share(bytes: usize) -> String {
    format!(
        "{bytes} bytes, {:.0}% of 1 MiB",
        bytes as f64 * 100.0 / SECRET_LIMIT as f64
    )
}

/// `--set`s naming each shipped policy's component by OCI reference.
fn oci_sets(references: &BTreeMap<&str, String>) -> Vec<String> {
    let mut sets = vec!["policySource=oci".to_owned()];
    for (policy, reference) in references {
        sets.push(format!("oci.references.{policy}={reference}"));
    }
    sets
}

fn oci_references() -> BTreeMap<&'static str, String> {
    POLICIES
        .iter()
        .enumerate()
        .map(|(i, policy)| {
            let digest = i.to_string().repeat(64);
            (
                *policy,
                format!("oci://registry.example.com/policies/{policy}@sha256:{digest}"),
            )
        })
        .collect()
}

fn refs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}

// === Without a cluster ===

#[test]
fn the_chart_lints_with_its_defaults_and_each_option() -> Result<()> {
    let helm = Helm::new()?;
    let oci = oci_sets(&oci_references());
    let oci = refs(&oci);
    let variants: [&[&str]; 5] = [
        &[],
        &oci,
        &["serviceMonitor.enabled=true"],
        &["agent.devicePlugin.enabled=false"],
        &["policies.include={fairshare}", "defaultPolicy=fairshare"],
    ];
    for sets in variants {
        let output = helm.run(&with_sets(&["lint", "--strict", CHART], sets))?;
        ensure!(
            output.contains("1 chart(s) linted, 0 chart(s) failed"),
            "helm lint --strict with {sets:?}:\n{output}"
        );
    }
    Ok(())
}

#[test]
fn by_default_the_chart_renders_the_objects_of_deploy() -> Result<()> {
    let helm = Helm::new()?;
    let chart = objects(&helm.template(&[])?)?;
    let kustomized = objects(&kustomize()?)?;
    let only_deploy: Vec<&String> = kustomized
        .keys()
        .filter(|k| !chart.contains_key(*k))
        .collect();
    let only_chart: Vec<&String> = chart
        .keys()
        .filter(|k| !kustomized.contains_key(*k))
        .collect();
    ensure!(
        only_deploy.is_empty() && only_chart.is_empty(),
        "`helm template {RELEASE} {CHART} --include-crds` renders other objects than \
         `kubectl kustomize deploy/`:\n  only in deploy/: {only_deploy:#?}\n  only in the chart: \
         {only_chart:#?}\nadd or remove the chart's templates (or crds/ copies) to match"
    );
    let mut problems = Vec::new();
    for (key, want) in &kustomized {
        differences(
            key,
            &normalized(want, false),
            &normalized(&chart[key], false),
            &mut problems,
        );
    }
    ensure!(
        problems.is_empty(),
        "the chart's defaults render {} object(s) otherwise than deploy/:\n  {}\nmake the \
         template (or the default value) say what deploy/ says",
        problems.len(),
        problems.join("\n  ")
    );
    ensure!(
        kustomized.len() >= 20,
        "only {} objects in deploy/",
        kustomized.len()
    );
    Ok(())
}

#[test]
fn the_chart_carries_byte_copies_of_deploy_crds_and_policies() -> Result<()> {
    let copies = [
        (
            "deploy/crds",
            "deploy/helm/wasmgpu/crds",
            "cp deploy/crds/*.wasmgpu.io.yaml deploy/helm/wasmgpu/crds/",
        ),
        (
            "deploy/policies",
            "deploy/helm/wasmgpu/charts/policies",
            "cp deploy/policies/*.wasm deploy/policies/fairshare.config.json \
             deploy/helm/wasmgpu/charts/policies/",
        ),
    ];
    let mut problems = Vec::new();
    for (source, copy, fix) in copies {
        // Each directory's own files that are not copies.
        let files = |dir: &str, own: &str| -> Result<BTreeSet<String>> {
            let mut names = BTreeSet::new();
            for entry in std::fs::read_dir(root().join(dir)).with_context(|| format!("{dir}/"))? {
                let name = entry?.file_name().to_string_lossy().into_owned();
                if name != own {
                    names.insert(name);
                }
            }
            Ok(names)
        };
        let (sources, copied) = (
            files(source, "kustomization.yaml")?,
            files(copy, "Chart.yaml")?,
        );
        let before = problems.len();
        for name in sources.union(&copied) {
            let (from, to) = (format!("{source}/{name}"), format!("{copy}/{name}"));
            match (sources.contains(name), copied.contains(name)) {
                (true, false) => problems.push(format!("{to} is missing (a copy of {from})")),
                (false, true) => problems.push(format!("{to} is not in {source}: delete it")),
                _ => {
                    if std::fs::read(root().join(&from))? != std::fs::read(root().join(&to))? {
                        problems.push(format!("{to} differs from {from}"));
                    }
                }
            }
        }
        if problems.len() > before {
            problems.push(format!("  refresh the copies: {fix}"));
        }
        ensure!(!sources.is_empty(), "{source}/ has no files");
    }
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

#[test]
fn each_value_changes_what_it_says() -> Result<()> {
    let helm = Helm::new()?;
    let rendered = objects(&helm.template(&[
        "namespace=gpu",
        "image.repository=registry.example.com/wasmgpu",
        "image.tag=9.9.9",
        "image.pullPolicy=Always",
        "controller.replicas=3",
        "defaultPolicy=spread",
        "agent.devicePlugin.enabled=false",
        "agent.nodeSelector.accelerator=a100",
        "policies.include={binpack}",
        "oci.pullSecret=my-registry",
    ])?)?;

    // Every namespaced object is in the namespace asked for, and every
    // mention of the controller's identity names it there.
    let mut elsewhere = Vec::new();
    for (key, value) in &rendered {
        if let Some(namespace) = value["metadata"]["namespace"].as_str()
            && namespace != "gpu"
        {
            elsewhere.push(key.clone());
        }
        let text = value.to_string();
        if text.contains(&format!("{NAMESPACE}:"))
            || text.contains(&format!("\"namespace\":\"{NAMESPACE}\""))
        {
            elsewhere.push(format!("{key} (names {NAMESPACE})"));
        }
    }
    ensure!(
        elsewhere.is_empty(),
        "not in the namespace gpu: {elsewhere:#?}"
    );
    object(&rendered, "Namespace//gpu")?;
    let guard = object(
        &rendered,
        "ValidatingAdmissionPolicy//wasmgpu-allocation-guard",
    )?;
    ensure!(
        guard
            .to_string()
            .contains("system:serviceaccount:gpu:wasmgpu-controller")
    );

    let controller = object(&rendered, "Deployment/gpu/wasmgpu-controller")?;
    let container = &controller["spec"]["template"]["spec"]["containers"][0];
    ensure!(
        controller["spec"]["replicas"] == 3,
        "replicas: {}",
        controller["spec"]["replicas"]
    );
    ensure!(
        container["image"] == "registry.example.com/wasmgpu:9.9.9",
        "{}",
        container["image"]
    );
    ensure!(container["imagePullPolicy"] == "Always");
    ensure!(args_of(controller).contains(&"--default-policy=spread".to_owned()));

    let agent = object(&rendered, "DaemonSet/gpu/wasmgpu-agent")?;
    let pod = &agent["spec"]["template"]["spec"];
    let args = args_of(agent);
    ensure!(
        args.contains(&"--no-device-plugin".to_owned()),
        "agent args {args:?}"
    );
    ensure!(
        !args.iter().any(|a| a.starts_with("--device-plugin-dir")),
        "agent args {args:?}"
    );
    ensure!(
        pod.get("volumes").is_none(),
        "the agent mounts {}",
        pod["volumes"]
    );
    ensure!(
        pod["containers"][0]["securityContext"]
            .get("runAsUser")
            .is_none()
    );
    ensure!(pod["nodeSelector"]["accelerator"] == "a100");
    ensure!(pod["nodeSelector"]["nvidia.com/gpu.present"] == "true");

    let policies: Vec<String> = policy_config_maps(&rendered).into_keys().collect();
    ensure!(policies == ["binpack"], "policy ConfigMaps {policies:?}");
    let role = object(&rendered, "Role/gpu/wasmgpu-controller")?;
    ensure!(
        role.to_string()
            .contains(r#"["wasmgpu-registry","my-registry"]"#),
        "the Role may not read my-registry: {role}"
    );

    // Values that cannot work are refused, saying what to change.
    let refusals: [(&[&str], &str); 4] = [
        (
            &["defaultPolicy=fairshare", "policies.include={binpack}"],
            "add it to policies.include",
        ),
        (&["agent.devicePlugin.enable=false"], "'enable' not allowed"),
        (&["policySource=git"], "policySource"),
        (&["policySource=oci"], "oci.references.binpack"),
    ];
    for (sets, says) in refusals {
        match helm.template(sets) {
            Ok(_) => bail!("{sets:?} is rendered"),
            Err(error) => ensure!(
                format!("{error:#}").contains(says),
                "{sets:?} is refused without saying {says:?}: {error:#}"
            ),
        }
    }
    Ok(())
}

#[test]
fn the_service_monitor_scrapes_the_controller_service_as_deploy_monitoring_does() -> Result<()> {
    let helm = Helm::new()?;
    let by_default = objects(&helm.template(&[])?)?;
    ensure!(!by_default.keys().any(|k| k.starts_with("ServiceMonitor/")));

    let rendered = objects(&helm.template(&["serviceMonitor.enabled=true"])?)?;
    let monitor = object(
        &rendered,
        "ServiceMonitor/wasmgpu-system/wasmgpu-controller",
    )?;
    let service = object(
        &rendered,
        "Service/wasmgpu-system/wasmgpu-controller-metrics",
    )?;
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .context("no matchLabels")?;
    for (label, value) in selector {
        ensure!(
            service["metadata"]["labels"][label] == *value,
            "the ServiceMonitor selects {label}={value}, the Service has {}",
            service["metadata"]["labels"]
        );
    }
    let port = &monitor["spec"]["endpoints"][0]["port"];
    let ports = service["spec"]["ports"].as_array().context("no ports")?;
    ensure!(
        ports.iter().any(|p| p["name"] == *port),
        "the ServiceMonitor scrapes port {port}, the Service has {ports:?}"
    );
    ensure!(monitor["spec"]["endpoints"][0]["path"] == "/metrics");

    let kustomized = objects(&read("deploy/monitoring/servicemonitor.yaml")?)?;
    let want = object(
        &kustomized,
        "ServiceMonitor/wasmgpu-system/wasmgpu-controller",
    )?;
    let mut problems = Vec::new();
    differences(
        "ServiceMonitor",
        &normalized(want, false),
        &normalized(monitor, false),
        &mut problems,
    );
    ensure!(
        problems.is_empty(),
        "the chart's ServiceMonitor is not deploy/monitoring's:\n  {}",
        problems.join("\n  ")
    );
    Ok(())
}

#[test]
fn with_policies_from_oci_no_component_is_rendered_and_the_default_fits_a_release() -> Result<()> {
    let helm = Helm::new()?;
    let references = oci_references();
    let sets = oci_sets(&references);
    let oci = helm.template(&refs(&sets))?;
    let rendered = objects(&oci)?;
    let policies = policy_config_maps(&rendered);
    let names: BTreeSet<&str> = policies.keys().map(String::as_str).collect();
    ensure!(
        names == BTreeSet::from(POLICIES),
        "policy ConfigMaps {names:?}"
    );
    for (name, config_map) in &policies {
        ensure!(
            config_map.get("binaryData").is_none(),
            "{name} carries a component with policySource=oci"
        );
        let reference = &config_map["data"]["component.ref"];
        ensure!(
            *reference == references[name.as_str()].as_str(),
            "{name}: component.ref {reference}"
        );
    }
    let config = read("deploy/policies/fairshare.config.json")?;
    ensure!(
        policies["fairshare"]["data"]["config.json"] == config.as_str(),
        "fairshare's config.json is not deploy/policies/fairshare.config.json"
    );

    let default = helm.template(&[])?;
    let (default_size, oci_size) = (stored_size(&default)?, stored_size(&oci)?);
    eprintln!(
        "helm template: the defaults {} bytes, about {} of a release Secret; policySource=oci \
         {} bytes, about {}",
        default.len(),
        share(default_size),
        oci.len(),
        share(oci_size)
    );
    ensure!(
        default_size < SECRET_LIMIT,
        "the defaults' manifest alone takes {} of a release Secret: Helm cannot install it \
         (docs/HELM.md, `## The 1 MiB limit of a release`)",
        share(default_size)
    );
    ensure!(
        oci_size * 10 < default_size,
        "policySource=oci takes {}",
        share(oci_size)
    );
    Ok(())
}

// === On the API server ===

/// `helm template … | kubectl apply --server-side`, as GitOps tools do, of
/// the defaults and of `policySource=oci`. Dry-run, into this test's own
/// namespace: the install test owns the real objects.
#[tokio::test]
async fn the_api_server_accepts_what_the_chart_renders() -> Result<()> {
    let ctx = TestContext::new("helm-render").await?;
    let helm = Helm::new()?;
    let namespace = format!("namespace={}", ctx.namespace);
    let oci = oci_sets(&oci_references());
    let mut with_oci = refs(&oci);
    with_oci.push(&namespace);
    let renderings: [(&str, &[&str]); 2] = [
        ("the defaults", &[namespace.as_str()]),
        ("policySource=oci", &with_oci),
    ];
    for (what, sets) in renderings {
        let rendered = helm.template(sets)?;
        let count = objects(&rendered)?.len();
        let file = helm.write("rendered.yaml", &rendered)?;
        let output = ctx
            .cluster()
            .run_kubectl(
                root(),
                &[
                    "apply",
                    "--server-side",
                    "--dry-run=server",
                    "--force-conflicts",
                    "-f",
                    &file,
                ],
            )
            .await
            .with_context(|| format!("applying the chart's rendering of {what}"))?;
        let applied = output
            .lines()
            .filter(|line| line.ends_with("serverside-applied (server dry run)"))
            .count();
        ensure!(
            applied == count,
            "{what}: {count} objects rendered, {applied} applied:\n{output}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn installed_with_the_docs_commands_an_upgrade_with_the_same_values_changes_nothing()
-> Result<()> {
    let ctx = TestContext::new("helm-install").await?;
    let cluster = ctx.cluster();
    let helm = Helm::new()?;
    let install = docs_commands("## Installing")?;
    let upgrade = docs_commands("## Upgrading")?;
    ensure!(
        install.iter().any(|c| c.starts_with("helm install ")),
        "docs/HELM.md `## Installing` runs no `helm install`: {install:?}"
    );
    let upgrade = upgrade
        .first()
        .filter(|c| c.starts_with("helm upgrade "))
        .with_context(|| {
            format!("docs/HELM.md `## Upgrading` starts with no `helm upgrade`: {upgrade:?}")
        })?;

    for command in &install {
        run_command(cluster, &helm, command)
            .await
            .with_context(|| format!("docs/HELM.md's `{command}`"))?;
    }
    let installed = release_objects(cluster, &helm).await?;
    let rendered = objects(&helm.template(&[])?)?;
    let missing: Vec<&String> = rendered
        .keys()
        .filter(|k| !installed.contains_key(*k))
        .collect();
    ensure!(
        missing.is_empty(),
        "the install did not create {missing:#?}"
    );

    // The release fits its Secret.
    let records = release_secrets(&ctx).await?;
    let first = format!("sh.helm.release.v1.{RELEASE}.v1");
    let (_, size) = records
        .get(&first)
        .with_context(|| format!("no Secret {first}: {records:?}"))?;
    eprintln!("the release's Secret {first}: {}", share(*size));
    ensure!(*size < SECRET_LIMIT, "{first} holds {}", share(*size));

    // The upgrade writes only Helm's records: the old one (superseded) and
    // a new one.
    run_command(cluster, &helm, upgrade)
        .await
        .with_context(|| format!("docs/HELM.md's `{upgrade}`"))?;
    let upgraded = release_objects(cluster, &helm).await?;
    let rewritten: Vec<String> = installed
        .iter()
        .filter(|(key, version)| upgraded.get(*key) != Some(*version))
        .map(|(key, version)| {
            let now = upgraded.get(key).map_or("gone", String::as_str);
            format!("{key} (resourceVersion {version} -> {now})")
        })
        .collect();
    ensure!(
        rewritten.is_empty(),
        "`{upgrade}` with the same values rewrote {rewritten:#?}"
    );
    ensure!(
        upgraded.len() == installed.len(),
        "`{upgrade}` added objects: {:#?}",
        upgraded
            .keys()
            .filter(|k| !installed.contains_key(*k))
            .collect::<Vec<_>>()
    );
    let records: BTreeSet<String> = release_secrets(&ctx).await?.into_keys().collect();
    let second = format!("sh.helm.release.v1.{RELEASE}.v2");
    ensure!(
        records == BTreeSet::from([first, second]),
        "Helm's records after the upgrade: {records:?}"
    );
    Ok(())
}
