//! `docs/architecture.md` says which of our crates may depend on which; this keeps it true.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .unwrap()
}

/// Our crates named in one `[dependencies]` section (not dev- or build-dependencies).
fn declared_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut section = String::new();
    let mut deps = BTreeSet::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_string();
            continue;
        }
        if section == "[dependencies]" && line.starts_with("karpenter") {
            let name = line
                .split(|c: char| c == '.' || c == '=' || c.is_whitespace())
                .next()
                .unwrap();
            deps.insert(name.to_string());
        }
    }
    deps
}

/// The "Who depends on whom" table: crate → the crates it names.
fn documented_dependencies(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let start = doc
        .find("## Who depends on whom")
        .expect("docs/architecture.md has a \"Who depends on whom\" section");
    let section = &doc[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    let mut table = BTreeMap::new();
    for row in section[..end].lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let names = |cell: &str| -> BTreeSet<String> {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        };
        let krate = names(cells[1]).into_iter().next().unwrap();
        table.insert(krate, names(cells[2]));
    }
    table
}

#[test]
fn the_documented_arrows_are_the_crates_dependencies() {
    let root = workspace_root();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let documented = documented_dependencies(&doc);
    let mut actual = BTreeMap::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        actual.insert(name, declared_dependencies(&manifest));
    }
    assert!(actual.len() >= 8, "found only {:?}", actual.keys());
    assert_eq!(
        documented, actual,
        "docs/architecture.md \"Who depends on whom\" (left) differs from the crates' [dependencies] (right)"
    );
}

#[test]
fn the_parsers_read_what_they_should() {
    let manifest = "[dependencies]\nkarpenter-api.workspace = true\nkarpenter-core = { workspace = true }\nserde = \"1\"\n[dev-dependencies]\nkarpenter-testapi.workspace = true\n";
    assert_eq!(
        declared_dependencies(manifest),
        BTreeSet::from(["karpenter-api".to_string(), "karpenter-core".to_string()])
    );
    let doc = "## Who depends on whom (checked)\n| crate | depends on |\n|---|---|\n| `a` | — |\n| `b` | `a`, `c` (why) |\n\n## Next\n| `z` | `y` |\n";
    let table = documented_dependencies(doc);
    assert_eq!(table.len(), 2);
    assert!(table["a"].is_empty());
    assert_eq!(
        table["b"],
        BTreeSet::from(["a".to_string(), "c".to_string()])
    );
}

/// A plain `cargo run`/`cargo build` at the root builds every default member's library: the aws
/// provider (the AWS SDK) must not be one, nor the dev tools `karpenter-bench` (a second binary)
/// and `karpenter-envtest`; every other crate must (so a plain `cargo test` covers them;
/// `scripts/test.sh` tests the whole workspace).
#[test]
fn every_crate_but_the_aws_provider_and_the_dev_tools_is_a_default_member() {
    let root = workspace_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let start = manifest.find("default-members = [").unwrap();
    let list = &manifest[start..start + manifest[start..].find(']').unwrap()];
    let members: BTreeSet<String> = list
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|path| path.trim_start_matches("crates/").to_string())
        .collect();
    let mut expected = BTreeSet::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("Cargo.toml").exists() {
            expected.insert(dir.file_name().unwrap().to_string_lossy().to_string());
        }
    }
    assert!(expected.remove("karpenter-aws"));
    // Dev tools with binaries or processes of their own: a second binary among the default
    // members makes every `cargo run` of the README ambiguous (tests/it/readme_as_typed.rs).
    assert!(expected.remove("karpenter-bench"));
    assert!(expected.remove("karpenter-envtest"));
    assert_eq!(members, expected);
}

/// One `[dependencies]` entry: its name, the features it asks for, whether it is optional.
#[derive(Debug)]
struct Dependency {
    name: String,
    features: Vec<String>,
    optional: bool,
}

/// The `[dependencies]` entries and the `[features]` table of one manifest.
fn dependencies_and_features(manifest: &str) -> (Vec<Dependency>, BTreeMap<String, Vec<String>>) {
    let quoted = |text: &str| -> Vec<String> {
        text.split('"')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut section = String::new();
    let mut deps = Vec::new();
    let mut features = BTreeMap::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_string();
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_end_matches(".workspace").to_string();
        if section == "[dependencies]" {
            let asked = value
                .split_once("features")
                .map(|(_, rest)| quoted(&rest[..rest.find(']').unwrap_or(rest.len())]))
                .unwrap_or_default();
            deps.push(Dependency {
                name: key,
                features: asked,
                optional: value.contains("optional = true"),
            });
        } else if section == "[features]" {
            features.insert(key, quoted(value));
        }
    }
    (deps, features)
}

/// Every external crate `krate` (with `features` on) links through our crates' `[dependencies]`,
/// with the features asked of it.
fn linked_external_crates(
    root: &Path,
    krate: &str,
    features: &[String],
) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut todo = vec![(krate.to_string(), features.to_vec())];
    let mut seen = BTreeSet::new();
    while let Some((name, on)) = todo.pop() {
        if !seen.insert((name.clone(), on.clone())) {
            continue;
        }
        let manifest =
            std::fs::read_to_string(root.join("crates").join(&name).join("Cargo.toml")).unwrap();
        let (deps, table) = dependencies_and_features(&manifest);
        let enabled: BTreeSet<String> = on
            .iter()
            .flat_map(|f| table.get(f).cloned().unwrap_or_default())
            .filter_map(|entry| entry.strip_prefix("dep:").map(str::to_string))
            .collect();
        for dep in deps {
            if dep.optional && !enabled.contains(&dep.name) {
                continue;
            }
            if dep.name.starts_with("karpenter") {
                todo.push((dep.name, dep.features));
            } else {
                out.entry(dep.name).or_default().extend(dep.features);
            }
        }
    }
    out
}

/// The pure rooms stay pure: the core, the API types, the catalogue, the `-f` reader and the
/// `simulate` pipeline (with the sim provider it runs) link no async runtime, no kube client, no
/// HTTP stack and no AWS SDK. A new I/O dependency fails here, not in a review.
#[test]
fn the_pure_crates_link_no_io_stack() {
    let root = workspace_root();
    let is_io = |name: &str, features: &BTreeSet<String>| {
        [
            "tokio",
            "hyper",
            "hyper-util",
            "reqwest",
            "axum",
            "tower",
            "futures",
            "prometheus-client",
        ]
        .contains(&name)
            || name.starts_with("aws-")
            || (name == "kube"
                && features.iter().any(|f| {
                    ["client", "runtime", "rustls-tls", "openssl-tls", "ws"].contains(&f.as_str())
                }))
    };
    for krate in [
        "karpenter-api",
        "karpenter-core",
        "karpenter-catalog",
        "karpenter-input",
        "karpenter-simulate",
    ] {
        let io: Vec<String> = linked_external_crates(root, krate, &[])
            .into_iter()
            .filter(|(name, features)| is_io(name, features))
            .map(|(name, features)| format!("{name} {features:?}"))
            .collect();
        assert!(io.is_empty(), "{krate} links I/O crates: {io:?}");
    }
    // The check itself sees I/O where it is: the sim provider with its `cluster` feature, the controller.
    let cluster = linked_external_crates(root, "karpenter-sim", &["cluster".to_string()]);
    assert!(
        cluster.contains_key("tokio") && cluster["kube"].contains("client"),
        "{cluster:?}"
    );
    assert!(linked_external_crates(root, "karpenter-controller", &[]).contains_key("tokio"));
}
