//! Loading `tests/fixtures/manifests` (repository root).

use std::path::{Path, PathBuf};

use karpenter_api::manifest::{Document, split_documents};

/// This crate's directory as `cargo test` names it when it runs the binary, so a test binary
/// built from another checkout sharing the target directory (and not rebuilt, the crate being
/// unchanged) still reads this checkout's files; the path it was built in otherwise.
pub fn crate_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

pub fn root() -> PathBuf {
    crate_dir().join("../../tests/fixtures/manifests")
}

pub fn documents(path: &Path) -> Vec<Document> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    split_documents(&text)
}

pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// An invalid fixture and what it must be rejected with.
pub struct InvalidCase {
    /// `schema`, `cel` or `runtime`: which layer of the API server rejects it.
    pub layer: String,
    pub path: String,
    pub message: String,
    pub value: serde_json::Value,
}

pub fn invalid_case(name: &str) -> InvalidCase {
    let file = root().join("invalid").join(format!("{name}.yaml"));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let header = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
            .unwrap_or_else(|| panic!("{name}: missing header {key}"))
            .to_string()
    };
    let docs = split_documents(&text);
    assert_eq!(docs.len(), 1, "{name}: one document per invalid case");
    let value = docs[0]
        .value
        .clone()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    InvalidCase {
        layer: header("layer"),
        path: header("expect-path"),
        message: header("expect-message"),
        value,
    }
}

/// Every invalid case name (file stem).
pub fn invalid_case_names() -> Vec<String> {
    yaml_files(&root().join("invalid"))
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect()
}
