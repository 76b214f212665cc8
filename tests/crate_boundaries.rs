//! The crate boundaries of DESIGN.md §3, read from the manifests: the
//! runtime in its default features links nothing of the compiler, the
//! compiler side reaches the runtime's contract through `aoc-plan` only, and
//! `aoc-plan` itself stays small.
//!
//! The manifests are read as plain text (the workspace writes dependencies
//! one per line, `name.workspace = true` or `name = { ... }`), not through
//! `cargo tree`, so the test needs no cargo, no network and no build. What
//! it checks is what `cargo tree -e normal` would show one level down; the
//! levels below are each crate's own line here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One normal dependency of a manifest: its name and whether it is optional.
#[derive(Debug)]
struct Dep {
    name: String,
    optional: bool,
}

/// The parts of a `Cargo.toml` the checks need.
#[derive(Debug, Default)]
struct Manifest {
    /// `[dependencies]` and `[target.*.dependencies]`, in order.
    deps: Vec<Dep>,
    /// `[features]`: name → the items it enables.
    features: BTreeMap<String, Vec<String>>,
}

fn read_manifest(crate_dir: &str) -> Manifest {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let path = root.join(crate_dir).join("Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_manifest(&text)
}

fn parse_manifest(text: &str) -> Manifest {
    let mut m = Manifest::default();
    let mut section = String::new();
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_string();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            panic!("unexpected manifest line `{raw}`");
        };
        let (key, value) = (key.trim(), value.trim());
        let normal_deps = section == "dependencies"
            || (section.starts_with("target.") && section.ends_with(".dependencies"));
        if normal_deps {
            // `name.workspace = true` or `name = ...`.
            let name = key.split('.').next().unwrap().trim_matches('"').to_string();
            let optional = value.replace(' ', "").contains("optional=true");
            m.deps.push(Dep { name, optional });
        } else if section == "features" {
            assert!(
                value.starts_with('[') && value.ends_with(']'),
                "write feature `{key}` on one line"
            );
            let items = value
                .trim_matches(|c| c == '[' || c == ']')
                .split(',')
                .map(|s| s.trim().trim_matches('"').to_string())
                .filter(|s| !s.is_empty())
                .collect();
            m.features.insert(key.to_string(), items);
        }
    }
    m
}

impl Manifest {
    /// The dependencies a build with default features links: the
    /// non-optional ones plus the optional ones the `default` feature turns
    /// on, directly or through other features.
    fn default_deps(&self) -> BTreeSet<String> {
        let mut on: BTreeSet<String> = self
            .deps
            .iter()
            .filter(|d| !d.optional)
            .map(|d| d.name.clone())
            .collect();
        let mut todo = vec!["default".to_string()];
        let mut seen = BTreeSet::new();
        while let Some(feature) = todo.pop() {
            if !seen.insert(feature.clone()) {
                continue;
            }
            for item in self.features.get(&feature).into_iter().flatten() {
                // `dep:x`, `x/feature`, `x?/feature`, or another feature `x`
                // (an optional dependency is also a feature of its name).
                let name = item.strip_prefix("dep:").unwrap_or(item);
                let name = name.split('/').next().unwrap().trim_end_matches('?');
                if self.deps.iter().any(|d| d.name == name) && !item.contains("?/") {
                    on.insert(name.to_string());
                }
                if self.features.contains_key(name) {
                    todo.push(name.to_string());
                }
            }
        }
        on
    }

    fn all_deps(&self) -> BTreeSet<String> {
        self.deps.iter().map(|d| d.name.clone()).collect()
    }
}

/// Crates of the compiler: the IR, the optimizer, the code generators and
/// the frameworks they use.
fn is_compiler_side(name: &str) -> bool {
    matches!(
        name,
        "aoc"
            | "aoc-ir"
            | "aoc-passes"
            | "aoc-backend-x86"
            | "aoc-backend-ptx"
            | "egg"
            | "inkwell"
            | "llvm-sys"
            | "melior"
    ) || name.starts_with("cranelift")
}

#[test]
fn runtime_default_features_link_nothing_of_the_compiler() {
    let m = read_manifest("runtime");
    let linked = m.default_deps();
    assert!(
        linked.contains("aoc-plan"),
        "the runtime reads the contract from aoc-plan: {linked:?}"
    );
    let bad: Vec<_> = linked.iter().filter(|d| is_compiler_side(d)).collect();
    assert!(
        bad.is_empty(),
        "runtime/Cargo.toml: default features link {bad:?}"
    );
    // The reference interpreter stays behind its feature.
    assert!(
        m.deps.iter().any(|d| d.name == "aoc-ir" && d.optional),
        "aoc-ir is an optional dependency of the runtime (feature `reference`)"
    );
}

#[test]
fn compiler_side_depends_on_the_contract_not_the_runtime() {
    for dir in ["passes", "backends/x86", "backends/ptx"] {
        let deps = read_manifest(dir).all_deps();
        assert!(
            !deps.contains("aoc-runtime"),
            "{dir}/Cargo.toml: [dependencies] name aoc-runtime"
        );
        assert!(
            deps.contains("aoc-plan"),
            "{dir}/Cargo.toml: [dependencies] lack aoc-plan"
        );
    }
}

#[test]
fn plan_crate_stays_small() {
    let deps = read_manifest("plan").all_deps();
    let allowed = ["serde", "serde_json", "memmap2", "crc32fast"];
    let extra: Vec<_> = deps
        .iter()
        .filter(|d| !allowed.contains(&d.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "plan/Cargo.toml: aoc-plan depends only on {allowed:?}, found {extra:?} \
         (never aoc-ir, aoc-runtime, egg, LLVM, Cranelift, cudarc)"
    );
}

#[test]
fn the_parser_sees_what_cargo_sees() {
    // A check that cannot fail is no check: the parser must find forbidden
    // dependencies written in each form the workspace uses.
    let m = parse_manifest(
        r#"
[package]
name = "x"

[features]
default = ["gpu"]
gpu = ["dep:cudarc", "aoc-ir/serde"]

[dependencies]
aoc-plan.workspace = true
aoc-ir = { workspace = true, optional = true }
cudarc = { workspace = true, optional = true, features = ["nvrtc"] }
egg = "0.11" # comment

[target.'cfg(unix)'.dependencies]
cranelift-codegen.workspace = true

[dev-dependencies]
aoc-runtime.workspace = true
"#,
    );
    let linked = m.default_deps();
    for name in ["aoc-plan", "aoc-ir", "cudarc", "egg", "cranelift-codegen"] {
        assert!(linked.contains(name), "{name} missing from {linked:?}");
    }
    assert!(
        !m.all_deps().contains("aoc-runtime"),
        "dev-dependencies are not normal ones"
    );
    let no_default = parse_manifest(
        "[features]\ngpu = [\"dep:cudarc\"]\n[dependencies]\ncudarc = { workspace = true, optional = true }\n",
    );
    assert!(no_default.default_deps().is_empty());
}
