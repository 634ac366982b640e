//! Draws [`Panel`]s as one SVG: panels side by side, each a grid of nodes
//! with their GPUs, then the pods left pending, then a legend.
//!
//! Every whole GPU is one `<rect class="gpu">` and every MIG instance one
//! `<rect class="mig">` (inside its parent), each with a `<title>` that
//! names it and its holder, so the picture can be checked by counting.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use super::model::{ColorBy, Fill, GpuView, Mark, NodeView, Panel};

const GPU_W: u32 = 18;
const GPU_H: u32 = 34;
const GPU_GAP: u32 = 4;
const PAD: u32 = 8;
const NAME_H: u32 = 14;
const LINK_H: u32 = 4;
const NODE_GAP: u32 = 10;
const PANEL_GAP: u32 = 30;
const HEADER_H: u32 = 46;
const LINE_H: u32 = 15;
/// Panels are about this wide at most (more nodes make more rows).
const PANEL_MAX_W: u32 = 980;
/// Pending pods listed per panel; the rest are counted.
const PENDING_SHOWN: usize = 24;

/// Distinguishable fills, one per owner in sorted order (then again).
const PALETTE: &[&str] = &[
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#86bcb6", "#d37295", "#a0cbe8",
];
const FREE: &str = "#ffffff";
const UNKNOWN: &str = "#bab0ac";
const UNHEALTHY: &str = "#3b3b3b";
const LINKS: &[&str] = &["#2f4b7c", "#665191", "#a05195", "#d45087"];

pub(crate) fn draw(panels: &[Panel], by: ColorBy) -> String {
    let owners: BTreeSet<&String> = panels.iter().flat_map(|p| &p.owners).collect();
    let colors: BTreeMap<&str, &str> = owners
        .iter()
        .enumerate()
        .map(|(i, o)| (o.as_str(), PALETTE[i % PALETTE.len()]))
        .collect();
    let mut body = String::new();
    let (mut x, mut height) = (PANEL_GAP / 2, 0);
    for panel in panels {
        let (w, h) = draw_panel(&mut body, panel, x, &colors);
        x += w + PANEL_GAP;
        height = height.max(h);
    }
    let width = x.max(560);
    let legend_h = legend(&mut body, &colors, by, height + 10, width);
    let height = height + 10 + legend_h;
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n\
         <rect class=\"background\" width=\"{width}\" height=\"{height}\" fill=\"#f7f7f7\"/>\n\
         {body}</svg>\n"
    )
}

/// One panel at `x`; returns its width and height.
fn draw_panel(
    out: &mut String,
    panel: &Panel,
    x: u32,
    colors: &BTreeMap<&str, &str>,
) -> (u32, u32) {
    let most_gpus = panel
        .nodes
        .iter()
        .map(|n| n.gpus.len() as u32)
        .max()
        .unwrap_or(1)
        .max(1);
    let node_w = (2 * PAD + most_gpus * (GPU_W + GPU_GAP) - GPU_GAP).max(120);
    let node_h = 2 * PAD + NAME_H + GPU_H + LINK_H + 2;
    let columns = (PANEL_MAX_W / (node_w + NODE_GAP)).clamp(1, panel.nodes.len().max(1) as u32);
    let rows = (panel.nodes.len() as u32).div_ceil(columns);
    let width = (columns * (node_w + NODE_GAP) - NODE_GAP).max(420);
    let _ = writeln!(
        out,
        "<g class=\"panel\"><text x=\"{x}\" y=\"20\" font-size=\"16\" font-weight=\"bold\">{}</text>\
         <text x=\"{x}\" y=\"38\" font-size=\"12\" fill=\"#444\">{}</text>",
        escape(&panel.title),
        escape(&panel.summary)
    );
    for (i, node) in panel.nodes.iter().enumerate() {
        let (col, row) = (i as u32 % columns, i as u32 / columns);
        let nx = x + col * (node_w + NODE_GAP);
        let ny = HEADER_H + row * (node_h + NODE_GAP);
        draw_node(out, node, nx, ny, node_w, node_h, colors);
    }
    let mut y = HEADER_H + rows * (node_h + NODE_GAP) + LINE_H;
    if !panel.pending.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"{x}\" y=\"{y}\" font-size=\"13\" font-weight=\"bold\">pending after the round</text>"
        );
        y += LINE_H;
    }
    // About 6 px a character at 11 px: lines stay inside the panel.
    let chars = (width / 6) as usize;
    for line in panel.pending.iter().take(PENDING_SHOWN) {
        let room = chars.saturating_sub(line.pod.chars().count() + line.what.len() + 3);
        let _ = writeln!(
            out,
            "<text class=\"pending\" x=\"{x}\" y=\"{y}\" font-size=\"11\"><tspan font-weight=\"bold\">{}</tspan> {}: {}<title>{}</title></text>",
            escape(&line.pod),
            line.what,
            escape(&clip(&line.reason, room.max(20))),
            escape(&line.reason)
        );
        y += LINE_H;
    }
    if panel.pending.len() > PENDING_SHOWN {
        let more = panel.pending.len() - PENDING_SHOWN;
        let _ = writeln!(
            out,
            "<text x=\"{x}\" y=\"{y}\" font-size=\"11\">… {more} more</text>"
        );
        y += LINE_H;
    }
    out.push_str("</g>\n");
    (width, y)
}

fn draw_node(
    out: &mut String,
    node: &NodeView,
    x: u32,
    y: u32,
    w: u32,
    h: u32,
    colors: &BTreeMap<&str, &str>,
) {
    let _ = writeln!(
        out,
        "<g class=\"node\"><rect x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"{h}\" rx=\"4\" fill=\"#ffffff\" stroke=\"#999\"/>\
         <text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>",
        x + PAD,
        y + PAD + NAME_H - 3,
        escape(&clip(&node.name, (w / 7) as usize))
    );
    for (i, gpu) in node.gpus.iter().enumerate() {
        let gx = x + PAD + i as u32 * (GPU_W + GPU_GAP);
        let gy = y + PAD + NAME_H;
        draw_gpu(out, gpu, gx, gy, colors);
    }
    out.push_str("</g>\n");
}

fn draw_gpu(out: &mut String, gpu: &GpuView, x: u32, y: u32, colors: &BTreeMap<&str, &str>) {
    let color = |owner: &str| colors.get(owner).copied().unwrap_or(UNKNOWN);
    let (fill, stroke, dash) = match (&gpu.fill, gpu.healthy) {
        (_, false) => (UNHEALTHY, "#000", ""),
        (Fill::Held { owner, mark, .. }, true) => match mark {
            Mark::Running => (color(owner), "#555", ""),
            Mark::Placed => (color(owner), "#000", ""),
            Mark::Nominated => (color(owner), "#000", " stroke-dasharray=\"3 2\""),
            Mark::Victim => (color(owner), "#d62728", " stroke-dasharray=\"2 2\""),
        },
        (Fill::Unknown, true) => (UNKNOWN, "#555", ""),
        (Fill::Free | Fill::Shared { .. }, true) => (FREE, "#555", ""),
    };
    let width = match &gpu.fill {
        Fill::Held {
            mark: Mark::Placed | Mark::Nominated | Mark::Victim,
            ..
        } => 2,
        _ => 1,
    };
    let _ = writeln!(
        out,
        "<rect class=\"gpu\" data-uuid=\"{}\" x=\"{x}\" y=\"{y}\" width=\"{GPU_W}\" height=\"{GPU_H}\" \
         fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"{width}\"{dash}><title>{}</title></rect>",
        escape(&gpu.uuid),
        escape(&describe(gpu))
    );
    if let (Fill::Shared { shares, .. }, true) = (&gpu.fill, gpu.healthy) {
        // Shares stacked from the bottom, each as tall as its memory.
        let mut bottom = f64::from(y + GPU_H);
        for share in shares {
            let h = f64::from(GPU_H) * share.mib as f64 / gpu.memory_mib.max(1) as f64;
            let h = h.min(bottom - f64::from(y));
            bottom -= h;
            let fill = share.owner.as_deref().map_or(UNKNOWN, color);
            let _ = writeln!(
                out,
                "<rect class=\"share\" x=\"{}\" y=\"{bottom:.1}\" width=\"{}\" height=\"{h:.1}\" fill=\"{fill}\"{}/>",
                x + 1,
                GPU_W - 2,
                if share.placed {
                    " stroke=\"#000\" stroke-width=\"1\""
                } else {
                    ""
                }
            );
        }
    }
    let count = gpu.instances.len() as u32;
    for (k, instance) in gpu.instances.iter().enumerate() {
        let slot = (GPU_H - 4) / count.max(1);
        let iy = y + 2 + k as u32 * slot;
        let fill = match &instance.fill {
            Fill::Held { owner, .. } => color(owner),
            Fill::Unknown => UNKNOWN,
            Fill::Free | Fill::Shared { .. } => FREE,
        };
        let holder = holder(&instance.fill);
        let _ = writeln!(
            out,
            "<rect class=\"mig\" data-uuid=\"{}\" x=\"{}\" y=\"{iy}\" width=\"{}\" height=\"{}\" fill=\"{fill}\" \
             stroke=\"#333\" stroke-width=\"0.5\"><title>{} {}: {}</title></rect>",
            escape(&instance.uuid),
            x + 3,
            GPU_W - 6,
            slot.saturating_sub(1).max(1),
            escape(&instance.uuid),
            escape(&instance.profile),
            escape(&holder)
        );
    }
    if let Some(group) = gpu.nvlink_group {
        let _ = writeln!(
            out,
            "<rect class=\"nvlink\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{LINK_H}\" fill=\"{}\"><title>NVLink group {}</title></rect>",
            x.saturating_sub(GPU_GAP / 2),
            y + GPU_H + 2,
            GPU_W + GPU_GAP,
            LINKS[group % LINKS.len()],
            group + 1
        );
    }
}

/// A GPU's tooltip: what it is and what holds it.
fn describe(gpu: &GpuView) -> String {
    let mut text = format!("{} {} ({} MiB)", gpu.uuid, gpu.model, gpu.memory_mib);
    if !gpu.healthy {
        text += ": unhealthy";
        return text;
    }
    text += ": ";
    text += &holder(&gpu.fill);
    if !gpu.instances.is_empty() {
        let _ = write!(text, "; {} MIG instance(s)", gpu.instances.len());
    }
    text
}

fn holder(fill: &Fill) -> String {
    match fill {
        Fill::Free => "free".into(),
        Fill::Unknown => "held by a pod the snapshot does not name".into(),
        Fill::Held { pod, mark, .. } => match mark {
            Mark::Running => format!("held by {pod}"),
            Mark::Placed => format!("placed this round: {pod}"),
            Mark::Nominated => format!("nominated for {pod} (its victims leave first)"),
            Mark::Victim => format!("held by {pod}, evicted this round"),
        },
        Fill::Shared { shares, used_mib } => {
            let pods: Vec<String> = shares
                .iter()
                .map(|s| {
                    format!(
                        "{} {} MiB{}",
                        s.pod,
                        s.mib,
                        if s.placed { " (new)" } else { "" }
                    )
                })
                .collect();
            format!("shared, {used_mib} MiB promised: {}", pods.join(", "))
        }
    }
}

/// The legend below the panels at `y`; returns its height.
fn legend(out: &mut String, colors: &BTreeMap<&str, &str>, by: ColorBy, y: u32, width: u32) -> u32 {
    let title = match by {
        ColorBy::Namespace => "colour = namespace",
        ColorBy::Tenant => "colour = tenant",
    };
    let _ = writeln!(
        out,
        "<g class=\"legend\"><text x=\"{}\" y=\"{}\" font-size=\"12\" font-weight=\"bold\">{title}</text>",
        PANEL_GAP / 2,
        y + 12
    );
    let mut entries: Vec<(String, &str, &str)> = colors
        .iter()
        .map(|(owner, color)| ((*owner).to_owned(), *color, ""))
        .collect();
    entries.extend([
        ("free".to_owned(), FREE, ""),
        ("held, holder unknown".to_owned(), UNKNOWN, ""),
        ("unhealthy".to_owned(), UNHEALTHY, ""),
        ("placed this round (black border)".to_owned(), FREE, "#000"),
        (
            "nominated for a preemptor (dashed)".to_owned(),
            FREE,
            "#000",
        ),
        (
            "evicted this round (red dashed)".to_owned(),
            FREE,
            "#d62728",
        ),
        ("NVLink group (bar below)".to_owned(), LINKS[0], ""),
    ]);
    let (mut x, mut line) = (PANEL_GAP / 2, y + 22);
    for (label, fill, stroke) in entries {
        let w = 26 + 6 * label.chars().count() as u32;
        if x + w > width {
            x = PANEL_GAP / 2;
            line += LINE_H + 2;
        }
        let stroke = if stroke.is_empty() { "#555" } else { stroke };
        let _ = writeln!(
            out,
            "<rect x=\"{x}\" y=\"{line}\" width=\"12\" height=\"12\" fill=\"{fill}\" stroke=\"{stroke}\"/>\
             <text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>",
            x + 16,
            line + 10,
            escape(&label)
        );
        x += w;
    }
    out.push_str("</g>\n");
    line - y + LINE_H + 8
}

fn clip(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_owned();
    }
    let kept: String = text.chars().take(chars.saturating_sub(1)).collect();
    kept + "…"
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
