//! The one reader of `-f FILE|DIR|-` for every command (`validate`, `convert`, `simulate`): files as
//! given, directories walked for `*.yaml`, `*.yml` and `*.json` (recursively, sorted), `-` for
//! stdin; then documents split and `kind: List` items flattened, each with its place in the input.
//!
//! Safe on hostile trees: symbolic links are followed but a directory is entered once (no loops),
//! FIFOs, sockets and devices are skipped with a note (reading one would block or never end), and
//! every file (and stdin) is capped at [`MAX_FILE_BYTES`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use karpenter_api::manifest::{list_item_lines, list_items, split_documents};
use serde_json::Value;

/// Largest file (or stdin) any command reads: 128 MiB, room for a `kubectl get pods -A -o yaml`
/// of about 20,000 pods with `managedFields`, and a bound on the memory one input can take.
pub const MAX_FILE_BYTES: u64 = 128 * 1024 * 1024;

/// The name stdin goes by in messages.
pub const STDIN_NAME: &str = "-";

/// Why the input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error(
        "{path}: larger than the {} MiB limit per file (split it, e.g. one `kubectl get` per namespace)",
        MAX_FILE_BYTES / (1024 * 1024)
    )]
    TooLarge { path: String },
    #[error("{path}: not UTF-8 text (manifests are YAML or JSON)")]
    NotUtf8 { path: String },
}

/// One input: a file (or stdin) and its text.
#[derive(Clone, Debug)]
pub struct Source {
    /// As shown in messages: the path, or `-` for stdin.
    pub name: String,
    pub text: String,
}

/// What was read, plus notes for people (skipped entries), printed on stderr by the commands.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub sources: Vec<Source>,
    pub notes: Vec<String>,
}

/// Reads every `-f` argument; `stdin` stands in for `-`.
pub fn read_sources(args: &[PathBuf], stdin: &mut dyn Read) -> Result<Sources, ReadError> {
    let mut out = Sources::default();
    let mut visited_dirs = BTreeSet::new();
    for arg in args {
        if arg.as_os_str() == STDIN_NAME {
            let text = read_capped(stdin, STDIN_NAME)?;
            if text.trim().is_empty() {
                out.notes.push(format!("{STDIN_NAME}: empty input"));
            }
            out.sources.push(Source {
                name: STDIN_NAME.into(),
                text,
            });
            continue;
        }
        let metadata = std::fs::metadata(arg).map_err(|e| io_error(arg, &e))?;
        if metadata.is_dir() {
            let before = out.sources.len();
            walk(arg, &mut visited_dirs, &mut out)?;
            if out.sources.len() == before {
                out.notes.push(format!(
                    "{}: no *.yaml, *.yml or *.json files in this directory",
                    arg.display()
                ));
            }
        } else {
            read_entry(arg, &metadata, &mut out)?;
        }
    }
    Ok(out)
}

fn io_error(path: &Path, err: &std::io::Error) -> ReadError {
    ReadError::Io {
        path: path.display().to_string(),
        message: err.to_string(),
    }
}

/// Reads a regular file, or notes why an entry that is not one is skipped.
fn read_entry(
    path: &Path,
    metadata: &std::fs::Metadata,
    out: &mut Sources,
) -> Result<(), ReadError> {
    if !metadata.is_file() {
        out.notes.push(format!(
            "{}: skipped: {} (only regular files are read; pipe other input with `-f -`)",
            path.display(),
            describe_file_type(metadata)
        ));
        return Ok(());
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge {
            path: path.display().to_string(),
        });
    }
    let mut file = std::fs::File::open(path).map_err(|e| io_error(path, &e))?;
    let text = read_capped(&mut file, &path.display().to_string())?;
    if text.trim().is_empty() {
        out.notes.push(format!("{}: empty file", path.display()));
    }
    out.sources.push(Source {
        name: path.display().to_string(),
        text,
    });
    Ok(())
}

#[cfg(unix)]
fn describe_file_type(metadata: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = metadata.file_type();
    if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

#[cfg(not(unix))]
fn describe_file_type(_: &std::fs::Metadata) -> &'static str {
    "not a regular file"
}

/// Reads at most [`MAX_FILE_BYTES`]; more is an error naming `name` (a file can grow after its
/// size was checked, and stdin has no size).
fn read_capped(reader: &mut dyn Read, name: &str) -> Result<String, ReadError> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_FILE_BYTES.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ReadError::Io {
            path: name.to_string(),
            message: e.to_string(),
        })?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge {
            path: name.to_string(),
        });
    }
    String::from_utf8(bytes).map_err(|_| ReadError::NotUtf8 {
        path: name.to_string(),
    })
}

fn is_manifest(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
}

/// Walks `dir` (sorted, recursive), entering each real directory once.
fn walk(dir: &Path, visited: &mut BTreeSet<PathBuf>, out: &mut Sources) -> Result<(), ReadError> {
    let canonical = std::fs::canonicalize(dir).map_err(|e| io_error(dir, &e))?;
    if !visited.insert(canonical) {
        out.notes.push(format!(
            "{}: skipped: directory already read (symbolic link loop or second link to it)",
            dir.display()
        ));
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| io_error(dir, &e))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(|e| io_error(dir, &e))?;
    entries.sort();
    for path in entries {
        // `metadata` follows symbolic links; a dangling one is noted, not fatal.
        let metadata = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(err) => {
                if is_manifest(&path) {
                    out.notes
                        .push(format!("{}: skipped: {err}", path.display()));
                }
                continue;
            }
        };
        if metadata.is_dir() {
            walk(&path, visited, out)?;
        } else if is_manifest(&path) {
            read_entry(&path, &metadata, out)?;
        }
    }
    Ok(())
}

/// Where an object sits in the input: file, 1-based document, item of a `kind: List`, and the line
/// it starts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub source: String,
    pub document: usize,
    /// 0-based index in the document's `items` when the document is a List.
    pub item: Option<usize>,
    /// 1-based line in the file.
    pub line: usize,
}

impl fmt::Display for Location {
    /// `FILE:DOC (line L)`, or `FILE:DOC items[I] (line L)` for an item of a List.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.source, self.document)?;
        if let Some(item) = self.item {
            write!(f, " items[{item}]")?;
        }
        write!(f, " (line {})", self.line)
    }
}

/// One object of the input, or why its document does not parse.
#[derive(Clone, Debug)]
pub struct Object {
    pub location: Location,
    pub value: Result<Value, String>,
    /// The document's text when the object is a whole document (not a List item); what `convert`
    /// passes through byte for byte.
    pub text: Option<String>,
}

/// The objects of `source`: its documents, with `kind: List` documents replaced by their items.
pub fn objects(source: &Source) -> Vec<Object> {
    let mut out = Vec::new();
    for document in split_documents(&source.text) {
        let location = Location {
            source: source.name.clone(),
            document: document.index,
            item: None,
            line: document.line,
        };
        let value = match document.value {
            Ok(value) => value,
            Err(message) => {
                out.push(Object {
                    location,
                    value: Err(message),
                    text: Some(document.text),
                });
                continue;
            }
        };
        if list_items(&value).is_none() {
            out.push(Object {
                location,
                value: Ok(value),
                text: Some(document.text),
            });
            continue;
        }
        let lines = list_item_lines(&document.text);
        let mut value = value;
        let items = match value.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        for (i, item) in items.into_iter().enumerate() {
            let line = lines.get(i).map_or(document.line, |l| {
                l.saturating_add(document.text_line).saturating_sub(1)
            });
            out.push(Object {
                location: Location {
                    item: Some(i),
                    line,
                    ..location.clone()
                },
                value: Ok(item),
                text: None,
            });
        }
    }
    out
}

/// `kind`, `metadata.name` and `metadata.namespace` of an object (empty when missing).
pub fn identity(value: &Value) -> (&str, &str, &str) {
    let text = |pointer: &str| value.pointer(pointer).and_then(Value::as_str).unwrap_or("");
    (
        text("/kind"),
        text("/metadata/name"),
        text("/metadata/namespace"),
    )
}

/// Finds objects that share a name: what the API server refuses on create ("already exists").
/// Keys are (API group, kind, namespace, name); cluster-scoped kinds pass an empty namespace.
#[derive(Clone, Debug, Default)]
pub struct DuplicateNames {
    seen: BTreeMap<(String, String, String, String), Location>,
}

impl DuplicateNames {
    /// Records the object; returns the location of an earlier one with the same key.
    pub fn check(
        &mut self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        location: &Location,
    ) -> Option<Location> {
        if name.is_empty() {
            return None;
        }
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let key = (
            group.to_string(),
            kind.to_string(),
            namespace.to_string(),
            name.to_string(),
        );
        match self.seen.get(&key) {
            Some(first) => Some(first.clone()),
            None => {
                self.seen.insert(key, location.clone());
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(text: &str) -> Source {
        Source {
            name: "f.yaml".into(),
            text: text.into(),
        }
    }

    #[test]
    fn lists_are_flattened_with_item_lines() {
        let objects = objects(&source(
            "kind: ConfigMap\n---\nkind: List\nitems:\n- kind: Pod\n  metadata: {name: a}\n- kind: Pod\n",
        ));
        let places: Vec<String> = objects.iter().map(|o| o.location.to_string()).collect();
        assert_eq!(
            places,
            [
                "f.yaml:1 (line 1)",
                "f.yaml:2 items[0] (line 5)",
                "f.yaml:2 items[1] (line 7)"
            ]
        );
        assert!(objects[0].text.is_some() && objects[1].text.is_none());
    }

    #[test]
    fn duplicates_are_per_group_kind_namespace() {
        let mut names = DuplicateNames::default();
        let at = Location {
            source: "f".into(),
            document: 1,
            item: None,
            line: 1,
        };
        assert!(
            names
                .check("apps/v1", "Deployment", "a", "web", &at)
                .is_none()
        );
        assert!(
            names
                .check("apps/v1", "Deployment", "b", "web", &at)
                .is_none()
        );
        assert!(
            names
                .check("apps/v1", "StatefulSet", "a", "web", &at)
                .is_none()
        );
        assert_eq!(
            names.check("apps/v1", "Deployment", "a", "web", &at),
            Some(at)
        );
    }

    #[test]
    fn stdin_over_the_cap_is_an_error_naming_the_cap() {
        let mut big = std::io::repeat(b'a').take(MAX_FILE_BYTES + 1);
        let err = read_sources(&[PathBuf::from("-")], &mut big).unwrap_err();
        assert!(err.to_string().contains("128 MiB"), "{err}");
        let mut empty = std::io::empty();
        let read = read_sources(&[PathBuf::from("-")], &mut empty).unwrap();
        assert_eq!(read.notes, ["-: empty input"]);
    }
}
