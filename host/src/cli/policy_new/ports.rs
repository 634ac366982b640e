//! Starters in the other SDKs' languages (JavaScript, Python, Go): the same
//! policy as the Rust starter, built and tested from its own directory by
//! the checkout's `policies/LANG/build.sh --policy .` and `--test-policy .`.
//!
//! ```text
//!  NAME, --lang, --sdk ──▶ templates of LANG (TEMPLATES) ──▶ fill ──▶ files()
//!                          config.example.json, snapshots/example.json: shared with Rust
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// One file of a starter, in any language: path relative to its directory,
/// and contents.
pub(crate) type File = (&'static str, String);

/// A language a policy can be started in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Lang {
    /// A Rust crate (`policies/sdk`).
    #[default]
    Rust,
    /// A JavaScript module (`policies/js`, componentize-js).
    Js,
    /// A Python module (`policies/python`, componentize-py).
    Python,
    /// A Go module (`policies/go`, wasip1 and the preview1 adapter).
    Go,
}

impl Lang {
    /// The SDK's directory in a checkout.
    pub(crate) fn sdk_dir(self) -> &'static str {
        match self {
            Lang::Rust => "policies/sdk",
            Lang::Js => "policies/js",
            Lang::Python => "policies/python",
            Lang::Go => "policies/go",
        }
    }

    /// The templates: (template text, path in the starter).
    fn templates(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Lang::Rust => &[],
            Lang::Js => JS,
            Lang::Python => PYTHON,
            Lang::Go => GO,
        }
    }
}

const JS: &[(&str, &str)] = &[
    (include_str!("js/policy.js.tmpl"), "policy.js"),
    (include_str!("js/policy.test.js.tmpl"), "policy.test.js"),
    (include_str!("js/package.json.tmpl"), "package.json"),
    (include_str!("js/README.md.tmpl"), "README.md"),
    (include_str!("js/.gitignore.tmpl"), ".gitignore"),
];
const PYTHON: &[(&str, &str)] = &[
    (include_str!("python/app.py.tmpl"), "app.py"),
    (include_str!("python/test_policy.py.tmpl"), "test_policy.py"),
    (include_str!("python/README.md.tmpl"), "README.md"),
    (include_str!("python/.gitignore.tmpl"), ".gitignore"),
];
const GO: &[(&str, &str)] = &[
    (include_str!("go/go.mod.tmpl"), "go.mod"),
    (include_str!("go/main.go.tmpl"), "main.go"),
    (include_str!("go/policy_test.go.tmpl"), "policy_test.go"),
    (include_str!("go/README.md.tmpl"), "README.md"),
    (include_str!("go/.gitignore.tmpl"), ".gitignore"),
];

/// `zone_first` for `zone-first`.
fn ident(name: &str) -> String {
    name.replace('-', "_")
}

/// The files of starter `name` in `lang` (not Rust), with the SDK at `sdk`.
pub(crate) fn files(
    name: &str,
    lang: Lang,
    sdk: &Path,
    type_name: &str,
    example_snapshot: String,
) -> Vec<File> {
    let wasm = format!("{}.wasm", ident(name));
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{Type}}", type_name)
            .replace("{{ident}}", &ident(name))
            .replace("{{sdk}}", &sdk.to_string_lossy())
            .replace("{{wasm}}", &wasm)
    };
    let mut files: Vec<File> = lang
        .templates()
        .iter()
        .map(|(template, path)| (*path, fill(template)))
        .collect();
    files.push((
        "config.example.json",
        include_str!("config.example.json.tmpl").to_owned(),
    ));
    files.push(("snapshots/example.json", example_snapshot));
    files
}

/// The SDK directory of `lang` at `path` (a checkout's `policies/LANG`),
/// made absolute; an error naming what is missing.
pub(crate) fn checked_sdk(lang: Lang, path: &Path) -> anyhow::Result<PathBuf> {
    let build = path.join("build.sh");
    if !build.is_file() {
        bail!(
            "no {} (the {lang:?} SDK is a wasmgpu checkout's {}; pass --sdk CHECKOUT/{})",
            build.display(),
            lang.sdk_dir(),
            lang.sdk_dir()
        );
    }
    path.canonicalize()
        .with_context(|| format!("resolving {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_starter_is_filled_and_names_its_sdk_and_component() {
        for lang in [Lang::Js, Lang::Python, Lang::Go] {
            let files = files(
                "zone-first",
                lang,
                Path::new("/src/wasmgpu/policies/x"),
                "ZoneFirst",
                "{}".into(),
            );
            let readme = &files.iter().find(|(p, _)| *p == "README.md").unwrap().1;
            assert!(
                readme.contains("/src/wasmgpu/policies/x/build.sh --policy ."),
                "{readme}"
            );
            assert!(readme.contains("zone_first.wasm"), "{readme}");
            assert!(files.iter().any(|(p, _)| *p == "config.example.json"));
            for (path, text) in &files {
                assert!(!text.contains("{{"), "{lang:?} {path}: {text}");
            }
        }
    }
}
