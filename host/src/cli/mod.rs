//! The `wasmgpu` command line.

mod agent;
mod allocations;
mod controller;
mod crd;
mod engine;
mod kube_client;
mod output;
mod output_format;
mod play_kubelet;
mod policy;
mod policy_cluster;
mod policy_new;
mod policy_push;
mod policy_run;
mod policy_shadow;
mod policy_snapshot;
mod policy_validate;
mod render;
mod snapshot_file;
mod stdout;
mod table;
mod tenant;

use clap::{Parser, Subcommand};

/// GPU allocation for Kubernetes, decided by sandboxed WebAssembly policies.
///
/// Policies are WebAssembly components implementing the `wasmgpu:policy` world
/// (see `wit/policy.wit`). Use `wasmgpu policy …` to check, run and benchmark
/// them offline against snapshot files before shipping them.
#[derive(Debug, Parser)]
#[command(name = "wasmgpu", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check, run, compare and benchmark policies offline; publish and list
    /// them in a cluster.
    ///
    /// Components are compiled once and kept, by digest and engine build, in
    /// $WASMGPU_CACHE_DIR/compiled (default ~/.cache/wasmgpu/compiled; at
    /// most 32 files): a second call on the same component starts without
    /// compiling. WASMGPU_COMPILE_CACHE=off compiles every time.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Show where each pod landed (node, GPUs, deciding policy) and why the
    /// others wait.
    Allocations(allocations::AllocationsCommand),
    // Its help is the doc of `ControllerCommand`. Boxed: its many flags
    // make it far larger than the other commands.
    Controller(Box<controller::ControllerCommand>),
    /// Print the CRD YAML generated from the API types.
    Crd(crd::CrdCommand),
    /// Tenants as Kubernetes objects: move fairshare's config.json tenants
    /// to GPUTenants.
    #[command(subcommand)]
    Tenant(tenant::TenantCommand),
    // Its help is the doc of `AgentCommand`.
    Agent(agent::AgentCommand),
    /// Play a node's kubelet once (a node without one: demo, simulation):
    /// admit its pods through the wasmgpu device plugin and print what each
    /// container receives.
    PlayKubelet(play_kubelet::PlayKubeletCommand),
}

impl Cli {
    /// Runs the command; the returned code is the process's exit status.
    /// When standard output is closed before the command is done (`| head`),
    /// it stops quietly with status 141, as a Unix tool ended by SIGPIPE.
    pub fn run(self) -> anyhow::Result<std::process::ExitCode> {
        stdout::status(match self.command {
            Command::Policy(command) => command.run(),
            Command::Allocations(command) => command.run(),
            Command::Controller(command) => command.run(),
            Command::Crd(command) => command.run(),
            Command::Tenant(command) => command.run(),
            Command::Agent(command) => command.run(),
            Command::PlayKubelet(command) => command.run(),
        })
    }
}
