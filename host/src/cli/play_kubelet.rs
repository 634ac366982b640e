//! `wasmgpu play-kubelet`: the kubelet's device manager for one node that
//! has none (a demo or simulated node), to see what each container would
//! receive from the node's `wasmgpu agent`.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};

use super::table::Table;
use wasmgpu_agent::deviceplugin::kubelet::{Kubelet, PluginConnection};
use wasmgpu_agent::deviceplugin::pods::waiting_pod;

/// Play a node's kubelet once: admit the pods bound to it that have not
/// been handed their GPUs, through the node's wasmgpu device plugin, and
/// print what each container receives.
///
/// For a node without a kubelet only (the demo, a simulated node): it
/// serves kubelet.sock in --device-plugin-dir, waits for the `wasmgpu agent
/// --device-plugin-dir DIR` of NODE to register, opens ListAndWatch, then
/// for each waiting pod, in the order the kubelet would start them, calls
/// GetPreferredAllocation and Allocate per container as the kubelet's device
/// manager does. The plugin records each hand-over on the pod
/// (`wasmgpu.io/handoff`), so a pod is admitted once. Never run it on a node
/// whose kubelet is running: it would replace the kubelet's socket.
#[derive(Debug, Args)]
pub struct PlayKubeletCommand {
    /// The node whose pods to admit (its agent's --node-name).
    #[arg(long, value_name = "NODE")]
    node: String,
    /// The directory the node's agent serves its device plugin in (its
    /// --device-plugin-dir).
    #[arg(long, value_name = "DIR")]
    device_plugin_dir: PathBuf,
    /// How long to wait for the plugin to register.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    wait: Duration,
}

impl PlayKubeletCommand {
    /// Admits the node's waiting pods and prints the table.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
        let (text, failed) = runtime.block_on(self.admit())?;
        super::stdout::print(&text)?;
        Ok(if failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    }

    async fn admit(&self) -> anyhow::Result<(String, bool)> {
        let client = Client::try_default()
            .await
            .context("cannot reach the Kubernetes API (set KUBECONFIG)")?;
        let mut kubelet = Kubelet::start(&self.device_plugin_dir)?;
        let registration = kubelet.registration(self.wait).await?;
        let mut plugin = PluginConnection::open(&self.device_plugin_dir, &registration).await?;
        let devices = plugin
            .wait_devices(self.wait, "a device", |d| !d.is_empty())
            .await?;
        let mut text = format!(
            "node {}: device plugin for {} registered, {} device(s) advertised ({} healthy)\n\n",
            self.node,
            registration.resource_name,
            devices.len(),
            devices.iter().filter(|d| d.health == "Healthy").count()
        );
        let pods: Vec<Pod> = Api::<Pod>::all(client)
            .list(&ListParams::default().fields(&format!("spec.nodeName={}", self.node)))
            .await
            .with_context(|| format!("cannot list the pods of node {}", self.node))?
            .items;
        let mut waiting: Vec<_> = pods
            .iter()
            .filter_map(|p| waiting_pod(p, &self.node))
            .collect();
        waiting.sort_by(|a, b| {
            (a.bound_ms, a.created_ms, &a.pod.name).cmp(&(b.bound_ms, b.created_ms, &b.pod.name))
        });
        if waiting.is_empty() {
            text += "no pod bound to this node waits for its GPUs\n";
            return Ok((text, false));
        }
        let mut table = Table::new(&["POD", "CONTAINER", "DEVICE IDS", "CDI DEVICES", "ENV"]);
        let mut in_use = HashSet::new();
        let mut failed = false;
        for pod in &waiting {
            let name = format!("{}/{}", pod.pod.namespace, pod.pod.name);
            match plugin.admit_pod(&mut in_use, &pod.requests).await {
                Ok(containers) => {
                    for (container, (ids, response)) in containers.iter().enumerate() {
                        let mut env: Vec<String> = response
                            .envs
                            .iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect();
                        env.sort();
                        table.row(vec![
                            name.clone(),
                            container.to_string(),
                            ids.join(","),
                            response
                                .cdi_devices
                                .iter()
                                .map(|d| d.name.as_str())
                                .collect::<Vec<_>>()
                                .join(","),
                            if env.is_empty() {
                                "-".into()
                            } else {
                                env.join(" ")
                            },
                        ]);
                    }
                }
                Err(error) => {
                    failed = true;
                    table.row(vec![
                        name,
                        "-".into(),
                        "-".into(),
                        "-".into(),
                        format!("REFUSED: {error}"),
                    ]);
                }
            }
        }
        text += &table.render();
        Ok((text, failed))
    }
}
