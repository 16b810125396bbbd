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
/// provider (the AWS SDK) must not be one, every other crate must (so `cargo test` covers them).
#[test]
fn every_crate_but_the_aws_provider_is_a_default_member() {
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
    assert_eq!(members, expected);
}
