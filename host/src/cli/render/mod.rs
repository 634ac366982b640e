//! `--render FILE.svg` of `wasmgpu policy run` and `policy compare`: a
//! picture of the cluster after a round, one panel per policy.
//!
//! ```text
//!   (HostSnapshot, Verdict) ──model::Panel::of──▶ Panel ──svg::draw──▶ SVG text
//! ```
//!
//! [`model`] works out, without drawing, what every GPU holds once the
//! round's accepted decisions are applied (who, how full, what is new,
//! nominated or about to be evicted) and which pods wait and why; [`svg`]
//! lays the panels out side by side. Both are pure: the CLI writes the file.

mod model;
mod svg;

use std::path::{Path, PathBuf};

use anyhow::Context;
use wasmgpu_contract::HostSnapshot;
use wasmgpu_contract::validate::Verdict;

pub(crate) use model::{ColorBy, Panel};

/// `--render`: a picture of the round.
#[derive(Debug, clap::Args)]
pub(crate) struct RenderArgs {
    /// Also draw the cluster after the round into FILE (SVG; open it in a
    /// browser): every node with its GPUs coloured by who holds them, new
    /// placements outlined, shared GPUs filled as far as their memory is
    /// promised, MIG instances inside their GPU, NVLink groups as bars, and
    /// the pods left pending with their reasons. `compare` draws the
    /// policies side by side.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) render: Option<PathBuf>,
    /// What colours the GPUs in the picture.
    #[arg(long, value_enum, default_value_t, requires = "render")]
    pub(crate) color_by: ColorBy,
}

/// Draws one panel per `(title, snapshot, verdict)` and writes the SVG to
/// `file`.
pub(crate) fn write(
    file: &Path,
    panels: &[(String, &HostSnapshot, &Verdict)],
    color_by: ColorBy,
) -> anyhow::Result<()> {
    let panels: Vec<Panel> = panels
        .iter()
        .map(|(title, host, verdict)| Panel::of(title, host, verdict, color_by))
        .collect();
    std::fs::write(file, svg::draw(&panels, color_by))
        .with_context(|| format!("cannot write the picture to {}", file.display()))
}
