//! `wasmgpu policy new NAME`: a policy crate to start from.
//!
//! ```text
//!  NAME, --dir, --sdk ──▶ Layout (where, which SDK) ──▶ files() ──▶ written
//!                          ├─ Standalone: own [workspace], [profile.policy],
//!                          │   SDK as a path dependency, the wasmgpu lockfile
//!                          └─ Member: inside a wasmgpu checkout, added to its
//!                              workspace's members, SDK from the workspace
//! ```
//!
//! With `--lang js|python|go` it writes the same policy in that SDK's
//! language instead ([`ports`]), built and tested through the checkout's
//! `policies/LANG/build.sh`.
//!
//! What to write is worked out purely ([`files`], [`add_member`],
//! [`ports::files`]); [`new`] does the I/O.

mod ports;

pub(crate) use ports::{File, Lang};

use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};

/// The wasmgpu source tree this binary was built from, when it still exists.
const SOURCE_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// The dependency versions wasmgpu itself was built and tested with: a new
/// crate starts from them instead of whatever is newest on crates.io.
const LOCKFILE: &str = include_str!("../../../../Cargo.lock");
const SDK_PACKAGE: &str = "wasmgpu-policy-sdk";

/// Where a new policy crate goes and how it finds the SDK.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Its own workspace anywhere on disk; the SDK at this path.
    Standalone { sdk: PathBuf },
    /// A member of the wasmgpu workspace at `root`, at `member` (relative,
    /// `/`-separated) below it.
    Member { root: PathBuf, member: String },
}

/// The files of a new policy crate `name` (already validated).
pub(crate) fn files(name: &str, layout: &Layout, example_snapshot: String) -> Vec<File> {
    let wasm_name = format!("{}.wasm", name.replace('-', "_"));
    let (manifest, build, wasm) = match layout {
        Layout::Standalone { sdk } => (
            include_str!("Cargo.toml.tmpl").replace("{{sdk}}", &toml_path(sdk)),
            "cargo build --target wasm32-wasip2 --profile policy".to_owned(),
            format!("target/wasm32-wasip2/policy/{wasm_name}"),
        ),
        Layout::Member { member, .. } => {
            let up = "../".repeat(member.split('/').count());
            (
                include_str!("Cargo.member.toml.tmpl").to_owned(),
                format!("cargo build --target wasm32-wasip2 --profile policy -p {name}"),
                format!("{up}target/wasm32-wasip2/policy/{wasm_name}"),
            )
        }
    };
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{Type}}", &type_name(name))
            .replace("{{build}}", &build)
            .replace("{{wasm}}", &wasm)
    };
    let mut files = vec![
        ("Cargo.toml", fill(&manifest)),
        ("src/lib.rs", fill(include_str!("lib.rs.tmpl"))),
        ("README.md", fill(include_str!("README.md.tmpl"))),
        (
            "config.example.json",
            include_str!("config.example.json.tmpl").to_owned(),
        ),
        ("snapshots/example.json", example_snapshot),
    ];
    if matches!(layout, Layout::Standalone { .. }) {
        files.push(("Cargo.lock", LOCKFILE.to_owned()));
        files.push((".gitignore", "/target\n".to_owned()));
    }
    files
}

/// Checks that `name` can name both the policy (its ConfigMap) and the crate.
pub(crate) fn check_name(name: &str) -> anyhow::Result<()> {
    let valid = name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        bail!(
            "NAME {name:?}: a policy's name is its ConfigMap's and its crate's: lower-case \
             letters, digits and '-', starting with a letter and ending with a letter or \
             digit, at most 63 characters (e.g. zone-first)"
        );
    }
    Ok(())
}

/// `ZoneFirst` for `zone-first`.
fn type_name(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// A path as a TOML basic string's contents.
fn toml_path(path: &Path) -> String {
    path.to_string_lossy()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

/// The workspace manifest `text` with `member` added to `[workspace]
/// members`; an error when there is no such list or it already has it.
pub(crate) fn add_member(text: &str, member: &str) -> anyhow::Result<String> {
    let entry = format!("\"{member}\"");
    let start = text
        .find("[workspace]")
        .and_then(|at| text[at..].find("members").map(|m| at + m))
        .context("the workspace's Cargo.toml has no [workspace] members list")?;
    let open = start
        + text[start..]
            .find('[')
            .context("the workspace's members list does not open with '['")?;
    let close = open
        + text[open..]
            .find(']')
            .context("the workspace's members list is not closed with ']'")?;
    if text[open..close].contains(&entry) {
        bail!("the workspace already has a member {entry}");
    }
    let body = text[open + 1..close].trim_end();
    let head = &text[..open + 1 + body.len()];
    let tail = &text[close..];
    let comma = if body.trim().is_empty() || body.ends_with(',') {
        ""
    } else {
        ","
    };
    Ok(if text[open..close].contains('\n') {
        format!("{head}{comma}\n    {entry},\n{tail}")
    } else if body.trim().is_empty() {
        format!("{head}{entry}{tail}")
    } else {
        format!("{head}{comma} {entry}{tail}")
    })
}

// === I/O ===

/// Writes policy crate `name` to `dir` (default `./NAME`); returns the
/// message to print (what was made and what to run next).
pub(crate) fn new(
    name: &str,
    dir: Option<&Path>,
    sdk: Option<&Path>,
    lang: Lang,
    example_snapshot: String,
) -> anyhow::Result<String> {
    check_name(name)?;
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let dir = normalize(&cwd.join(dir.unwrap_or(Path::new(name))));
    if dir.exists() && std::fs::read_dir(&dir).map(|mut d| d.next().is_some())? {
        bail!(
            "--dir {}: the directory exists and is not empty; pick another --dir or remove it",
            dir.display()
        );
    }
    if lang != Lang::Rust {
        let sdk = match sdk {
            Some(sdk) => ports::checked_sdk(lang, &cwd.join(sdk))
                .with_context(|| format!("--sdk {}", sdk.display()))?,
            None => ports::checked_sdk(lang, &Path::new(SOURCE_ROOT).join(lang.sdk_dir()))
                .with_context(|| {
                    format!(
                        "this wasmgpu binary's source tree is gone: clone wasmgpu and pass \
                         --sdk CHECKOUT/{}",
                        lang.sdk_dir()
                    )
                })?,
        };
        let files = ports::files(name, lang, &sdk, &type_name(name), example_snapshot);
        write_all(&dir, &files)?;
        let mut message = format!("created policy {name} ({lang:?}) in {}\n", dir.display());
        message += &format!(
            "  SDK: {} (its build.sh builds and tests it)\n",
            sdk.display()
        );
        return Ok(message + &next_steps(&dir, &files));
    }
    let layout = match (enclosing_workspace(&dir), sdk) {
        (Some((root, member)), None) => Layout::Member { root, member },
        (Some((root, _)), Some(_)) => bail!(
            "--sdk: {} is inside the wasmgpu workspace at {}, whose SDK it uses; \
             drop --sdk, or put the crate outside the checkout",
            dir.display(),
            root.display()
        ),
        (None, Some(sdk)) => Layout::Standalone {
            sdk: checked_sdk(&cwd.join(sdk)).with_context(|| format!("--sdk {}", sdk.display()))?,
        },
        (None, None) => Layout::Standalone {
            sdk: checked_sdk(&Path::new(SOURCE_ROOT).join("policies/sdk")).context(
                "the policy SDK is not on crates.io and this wasmgpu binary's source tree is \
                 gone: clone wasmgpu and pass --sdk CHECKOUT/policies/sdk",
            )?,
        },
    };
    write_all(&dir, &files(name, &layout, example_snapshot))?;
    let mut message = format!("created policy {name} in {}\n", dir.display());
    match &layout {
        Layout::Standalone { sdk } => {
            message += &format!(
                "  SDK: {} (a path dependency in Cargo.toml)\n",
                sdk.display()
            );
        }
        Layout::Member { root, member } => {
            let manifest = root.join("Cargo.toml");
            let text = std::fs::read_to_string(&manifest)
                .with_context(|| format!("reading {}", manifest.display()))?;
            std::fs::write(&manifest, add_member(&text, member)?)
                .with_context(|| format!("writing {}", manifest.display()))?;
            message += &format!(
                "  added \"{member}\" to the workspace members in {}\n",
                manifest.display()
            );
        }
    }
    Ok(message + &next_steps(&dir, &files(name, &layout, String::new())))
}

/// Writes `files` below `dir`.
fn write_all(dir: &Path, files: &[File]) -> anyhow::Result<()> {
    for (path, contents) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// What to run next: the first `sh` block of the starter's README.
fn next_steps(dir: &Path, files: &[File]) -> String {
    let mut message = format!("\nnext (see {}):\n", dir.join("README.md").display());
    message += &format!("  cd {}\n", dir.display());
    let readme = files
        .iter()
        .find(|(path, _)| *path == "README.md")
        .map(|(_, text)| text.as_str())
        .unwrap_or_default();
    for line in readme
        .lines()
        .skip_while(|l| *l != "```sh")
        .skip(1)
        .take_while(|l| *l != "```")
    {
        message += &format!("  {line}\n");
    }
    message
}

/// The wasmgpu workspace `dir` would be inside, and `dir` relative to it.
fn enclosing_workspace(dir: &Path) -> Option<(PathBuf, String)> {
    dir.ancestors().skip(1).find_map(|root| {
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).ok()?;
        let is_wasmgpu =
            manifest.contains("[workspace]") && root.join("policies/sdk/Cargo.toml").is_file();
        let member = dir.strip_prefix(root).ok()?;
        let member: Vec<String> = member
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        is_wasmgpu.then(|| (root.to_owned(), member.join("/")))
    })
}

/// The SDK crate at `path`, made absolute; an error when it is not one.
fn checked_sdk(path: &Path) -> anyhow::Result<PathBuf> {
    let manifest = path.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).with_context(|| {
        format!(
            "no {} (the SDK is a checkout's policies/sdk)",
            manifest.display()
        )
    })?;
    if !text.contains(&format!("name = \"{SDK_PACKAGE}\"")) {
        bail!("{} is not the {SDK_PACKAGE} crate", manifest.display());
    }
    path.canonicalize()
        .with_context(|| format!("resolving {}", path.display()))
}

/// `path` without `.` and `..` components (it need not exist yet).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_suit_a_configmap_and_a_crate() {
        for good in ["zone-first", "a", "binpack2", "my-zone-policy"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["Zone", "2fast", "zone_first", "zone-", "", &"a".repeat(64)] {
            let error = check_name(bad).unwrap_err().to_string();
            assert!(error.contains("lower-case letters"), "{bad}: {error}");
        }
        assert_eq!(type_name("my-zone-policy2"), "MyZonePolicy2");
    }

    #[test]
    fn a_member_is_added_to_the_list_once() {
        let text = "[workspace]\nresolver = \"3\"\nmembers = [\n    \"host\",\n    \"policies/sdk\",\n]\ndefault-members = [\"host\"]\n";
        let added = add_member(text, "policies/zone").unwrap();
        assert!(
            added.contains(
                "    \"policies/sdk\",\n    \"policies/zone\",\n]\ndefault-members = [\"host\"]"
            ),
            "{added}"
        );
        assert!(add_member(&added, "policies/zone").is_err());
        let inline = add_member("[workspace]\nmembers = [\"host\"]\n", "p/x").unwrap();
        assert_eq!(inline, "[workspace]\nmembers = [\"host\", \"p/x\"]\n");
        assert!(add_member("[package]\nname = \"x\"\n", "p").is_err());
    }

    #[test]
    fn a_standalone_crate_carries_its_profile_sdk_path_and_lockfile() {
        let layout = Layout::Standalone {
            sdk: PathBuf::from("/src/wasmgpu/policies/sdk"),
        };
        let files = files("zone-first", &layout, "{}".into());
        let file = |name: &str| &files.iter().find(|(p, _)| *p == name).unwrap().1;
        let manifest = file("Cargo.toml");
        assert!(manifest.contains("name = \"zone-first\""));
        assert!(manifest.contains("[profile.policy]"));
        assert!(manifest.contains("\n[workspace]\n"));
        assert!(manifest.contains("{ path = \"/src/wasmgpu/policies/sdk\" }"));
        assert!(file("src/lib.rs").contains("export_policy!(ZoneFirst)"));
        assert!(file("README.md").contains("target/wasm32-wasip2/policy/zone_first.wasm"));
        assert!(file("Cargo.lock").contains("name = \"wit-bindgen\""));
        assert!(!files.iter().any(|(_, text)| text.contains("{{")));
    }

    #[test]
    fn a_member_crate_inherits_from_the_workspace() {
        let layout = Layout::Member {
            root: PathBuf::from("/src/wasmgpu"),
            member: "policies/zone-first".into(),
        };
        let files = files("zone-first", &layout, "{}".into());
        let manifest = &files[0].1;
        assert!(manifest.contains("wasmgpu-policy-sdk = { workspace = true }"));
        assert!(!manifest.contains("[profile"));
        assert!(!manifest.contains("[workspace]"));
        assert!(!files.iter().any(|(p, _)| *p == "Cargo.lock"));
        assert!(files[2].1.contains("-p zone-first"));
        assert!(
            files[2]
                .1
                .contains("../../target/wasm32-wasip2/policy/zone_first.wasm")
        );
    }
}
