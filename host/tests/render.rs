//! `wasmgpu policy run|compare --render FILE.svg`: the picture of a round,
//! checked by counting its elements and by rendering it in headless
//! Chromium (Debian's `chromium`; `make chromium` installs it) to a PNG that
//! must show the cluster, not a blank page.

use std::path::Path;
use std::process::Command;

use wasmgpu_test_support::policy_dir;

fn policy(name: &str) -> String {
    policy_dir()
        .join(format!("wasmgpu_{name}.wasm"))
        .to_string_lossy()
        .into_owned()
}

fn repo(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
        .to_string_lossy()
        .into_owned()
}

fn wasmgpu(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_wasmgpu"))
        .args(args)
        .output()
        .expect("run wasmgpu");
    assert!(
        out.status.success(),
        "wasmgpu {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whole GPUs and MIG instances of a snapshot file.
fn units(snapshot: &str) -> (usize, usize) {
    let text = std::fs::read_to_string(snapshot).unwrap();
    let host = wasmgpu_contract::snapshot_file::read(&text)
        .unwrap()
        .snapshot;
    let gpus = host.snapshot.nodes.iter().flat_map(|n| &n.gpus);
    let mig = gpus.clone().filter(|g| g.mig.is_some()).count();
    (gpus.count() - mig, mig)
}

fn count(svg: &str, class: &str) -> usize {
    svg.matches(&format!("<rect class=\"{class}\"")).count()
}

/// The `width` and `height` the SVG's root element declares.
fn size(svg: &str) -> (u32, u32) {
    let attr = |name: &str| -> u32 {
        let at = svg.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        svg[at..].split('"').next().unwrap().parse().unwrap()
    };
    (attr("width"), attr("height"))
}

/// Renders `svg` in headless Chromium to `png`, at the picture's size.
fn screenshot(svg: &Path, png: &Path, (width, height): (u32, u32)) {
    let chromium = std::env::var("WASMGPU_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "Chromium is not at {chromium}: run `make chromium` (installs Debian's chromium) \
         or set WASMGPU_CHROMIUM"
    );
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", svg.display()))
        .output()
        .expect("run chromium");
    assert!(
        png.exists(),
        "chromium wrote no screenshot ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Pixels of a PNG as RGB triples.
fn pixels(png: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = info.color_type.samples();
    let rgb = buf[..info.buffer_size()]
        .chunks(step)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    (info.width, info.height, rgb)
}

fn rgb(hex: &str) -> [u8; 3] {
    let v = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap();
    [v(1), v(3), v(5)]
}

#[test]
fn compare_draws_both_policies_with_every_gpu_and_chromium_shows_them() {
    let dir = tempfile::tempdir().unwrap();
    let svg_path = dir.path().join("round.svg");
    let snapshot = repo("policies/snapshots/demo.json");
    let said = wasmgpu(&[
        "policy",
        "compare",
        &policy("binpack"),
        &policy("spread"),
        "--snapshot",
        &snapshot,
        "--render",
        svg_path.to_str().unwrap(),
    ]);
    assert!(said.contains(&svg_path.display().to_string()), "{said}");
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let (gpus, mig) = units(&snapshot);
    assert!(gpus > 0);
    assert_eq!(
        count(&svg, "gpu"),
        2 * gpus,
        "one element per GPU per policy"
    );
    assert_eq!(
        count(&svg, "mig"),
        2 * mig,
        "one element per MIG instance per policy"
    );
    assert!(
        svg.contains("binpack") && svg.contains("spread"),
        "both panels are titled"
    );

    let png_path = dir.path().join("round.png");
    screenshot(&svg_path, &png_path, size(&svg));
    let (width, height, pixels) = pixels(&png_path);
    assert_eq!((width, height), size(&svg));
    let background = rgb("#f7f7f7");
    let drawn = pixels.iter().filter(|p| **p != background).count();
    assert!(
        drawn * 20 > pixels.len(),
        "the picture is nearly blank: {drawn} of {} pixels drawn",
        pixels.len()
    );
    // The first namespace's colour (the palette's first) fills GPUs.
    let first = rgb("#4e79a7");
    let coloured = pixels.iter().filter(|p| **p == first).count();
    assert!(
        coloured > 100,
        "GPUs held by the first namespace show ({coloured} pixels)"
    );
    let mut colours: Vec<[u8; 3]> = pixels.clone();
    colours.sort();
    colours.dedup();
    assert!(colours.len() > 8, "{} colours only", colours.len());
}

#[test]
fn run_draws_waiting_pods_with_their_reasons_and_colours_by_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("small.json");
    wasmgpu(&[
        "policy",
        "generate-snapshot",
        "--nodes",
        "3",
        "--pods",
        "60",
        "-o",
        snapshot.to_str().unwrap(),
    ]);
    let svg_path = dir.path().join("run.svg");
    wasmgpu(&[
        "policy",
        "run",
        &policy("binpack"),
        "--snapshot",
        snapshot.to_str().unwrap(),
        "--render",
        svg_path.to_str().unwrap(),
        "--color-by",
        "tenant",
    ]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let (gpus, _) = units(snapshot.to_str().unwrap());
    assert_eq!(count(&svg, "gpu"), gpus);
    assert!(svg.contains("colour = tenant"));
    // 60 pods on 3 nodes: some wait, and say why.
    assert!(svg.contains("pending after the round"), "{svg}");
    assert!(
        svg.contains("waits: "),
        "waiting pods are listed with their reason"
    );
}
