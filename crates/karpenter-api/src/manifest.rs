//! Multi-document YAML manifests, split so each document keeps its original text, a 1-based
//! index (what `validate` prints and what `convert` passes through untouched) and the line it
//! starts on; `kind: List` items with their lines; near misses of Karpenter's kinds.

use std::sync::Arc;

use serde_json::Value;

use crate::validation::ValidationError;

/// Why a YAML document does not parse, worded for the manifest's author: the file's line, the
/// parser's message without its advice to library callers, and what to do when a parser limit
/// was hit.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{}{message}{hint}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
pub struct YamlError {
    /// The file line the parser stopped at, when it says.
    pub line: Option<usize>,
    pub message: String,
    hint: &'static str,
    /// The parser's own error. Not the `source()`: a chain printer would repeat the advice to
    /// library callers that `message` replaces.
    parser: Arc<serde_saphyr::Error>,
}

impl YamlError {
    /// The parser's error, as it reported it.
    pub fn parser_error(&self) -> &serde_saphyr::Error {
        &self.parser
    }
}

/// One YAML document of a manifest.
#[derive(Clone, Debug)]
pub struct Document {
    /// 1-based position among the file's non-empty documents.
    pub index: usize,
    /// 1-based line of the file where the document's content starts (past blank and comment
    /// lines).
    pub line: usize,
    /// 1-based line of the file where `text` starts (lines in `text` count from here).
    pub text_line: usize,
    /// The document's text, without the `---` separator.
    pub text: String,
    /// The parsed document, or why it does not parse (lines in the message are the file's).
    pub value: Result<Value, YamlError>,
}

/// Deepest nesting a manifest may have. Kubernetes objects (even with `managedFields`) stay
/// well under 30 levels (`managedFields` included); the limit keeps a hostile input from exhausting the stack.
pub const MAX_YAML_DEPTH: usize = 64;

/// Splits `text` at `---` lines and parses each non-empty document.
pub fn split_documents(text: &str) -> Vec<Document> {
    // (first line number, text) per chunk.
    let mut chunks: Vec<(usize, String)> = vec![(1, String::new())];
    for (number, line) in text.lines().enumerate() {
        let line_number = number.saturating_add(1);
        let is_separator = line == "---" || line.starts_with("--- ") || line.starts_with("---\t");
        if is_separator {
            // `--- value` puts content on the separator line itself.
            let rest = line[3..].trim();
            if !rest.is_empty() && !rest.starts_with('#') {
                chunks.push((line_number, format!("{rest}\n")));
            } else {
                chunks.push((line_number.saturating_add(1), String::new()));
            }
        } else if line == "..." {
            continue;
        } else if let Some((_, last)) = chunks.last_mut() {
            last.push_str(line);
            last.push('\n');
        }
    }
    chunks
        .into_iter()
        .filter(|(_, chunk)| {
            chunk
                .lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .enumerate()
        .map(|(i, (start, text))| {
            let value = parse_yaml(&text, start);
            // Point at the document's first line of content, past blank and comment lines.
            let line = text
                .lines()
                .position(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                .map_or(start, |offset| start.saturating_add(offset));
            Document {
                index: i + 1,
                line,
                text_line: start,
                text,
                value,
            }
        })
        .collect()
}

/// Parses one YAML (or JSON) document. Parser budgets scale with the input, so any input the
/// readers' size cap lets through loads (a `kubectl get pods -A -o yaml` List of thousands of
/// pods with `managedFields` needs millions of nodes); only nesting depth and alias expansion
/// stay bounded. `first_line` is the document's line in its file, so errors name file lines.
pub fn parse_yaml(text: &str, first_line: usize) -> Result<Value, YamlError> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    let mut budget = serde_saphyr::Budget::default();
    // Every node and event takes at least one byte of input (a few more for flow collections'
    // separators), so input-sized limits never bind on real manifests.
    let size = text.len().saturating_add(1024);
    budget.max_reader_input_bytes = None;
    budget.max_events = size.saturating_mul(2);
    budget.max_nodes = size;
    budget.max_total_scalar_bytes = size;
    budget.max_depth = MAX_YAML_DEPTH;
    options.budget = Some(budget);
    serde_saphyr::from_str_with_options::<Value>(text, options).map_err(|err| {
        let line = err
            .location()
            .and_then(|l| usize::try_from(l.line()).ok())
            .filter(|l| *l > 0)
            .map(|l| l.saturating_add(first_line).saturating_sub(1));
        let mut message = first_line_of(&err.to_string());
        // The parser's own " at line L, column C" counts from the document, not the file.
        if line.is_some()
            && let Some(at) = message.find(" at line ")
        {
            message.truncate(at);
        }
        let mut message = without_parser_advice(&message);
        // The parser names its limits as Rust values ("budget breached: Depth { depth: 65 }").
        let over_budget = matches!(err, serde_saphyr::Error::Budget { .. })
            || message.starts_with("budget breached");
        let hint = if over_budget {
            message = if message.contains("Depth") {
                format!("nested deeper than {MAX_YAML_DEPTH} levels")
            } else {
                "YAML aliases expand to more nodes than the input holds".to_string()
            };
            " (a parser limit was hit: expand the aliases or split the object, e.g. `kubectl get ... -o json` per namespace)"
        } else {
            ""
        };
        YamlError {
            line,
            message,
            hint,
            parser: Arc::new(err),
        }
    })
}

/// The parser's advice to its own caller ("set DuplicateKeyPolicy in Options if acceptable", "use
/// from_str_multiple") is about library calls, not something a manifest's author can do: replaced
/// by what they can.
fn without_parser_advice(message: &str) -> String {
    const ADVICE: [(&str, &str); 3] = [
        (
            ", set DuplicateKeyPolicy in Options if acceptable",
            " (a key may appear once per mapping, and the API server refuses the document too: keep one)",
        ),
        (
            "; use from_str_multiple or from_str_multiple_with_options",
            " (this input is one document: remove the `---` separators, or split the file)",
        ),
        (
            " rejected by the configured policy",
            " (YAML reads it as infinity: quote it to keep it as text, e.g. \"1e999\")",
        ),
    ];
    for (advice, instead) in ADVICE {
        if let Some(at) = message.find(advice) {
            let (before, after) = message.split_at(at);
            return format!("{before}{instead}{}", &after[advice.len()..]);
        }
    }
    message.to_string()
}

fn first_line_of(message: &str) -> String {
    message
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The items of a `kind: List` (what `kubectl get -o yaml` prints) or of a typed list such as
/// `PodList`; `None` for any other document.
pub fn list_items(value: &Value) -> Option<&[Value]> {
    let kind = value.get("kind").and_then(Value::as_str)?;
    if kind != "List" && !kind.ends_with("List") {
        return None;
    }
    match value.get("items") {
        Some(Value::Array(items)) => Some(items),
        Some(Value::Null) | None if kind == "List" => Some(&[]),
        _ => None,
    }
}

/// 1-based lines (relative to the document's text) where each item of a top-level block
/// `items:` sequence starts, as `kubectl get -o yaml` lays them out. Empty for flow or JSON
/// lists (callers then fall back to the document's line).
pub fn list_item_lines(text: &str) -> Vec<usize> {
    let mut lines = text.lines().enumerate();
    if !lines.any(|(_, l)| l.trim_end() == "items:") {
        return Vec::new();
    }
    let mut indent: Option<usize> = None;
    let mut out = Vec::new();
    for (number, line) in lines {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let this_indent = line.len() - trimmed.len();
        let is_item = trimmed == "-" || trimmed.starts_with("- ");
        match indent {
            None if is_item => indent = Some(this_indent),
            None => return Vec::new(),
            Some(i) if this_indent < i || (this_indent == i && !is_item) => break,
            Some(_) => {}
        }
        if is_item && Some(this_indent) == indent {
            out.push(number.saturating_add(1));
        }
    }
    out
}

/// The Karpenter kinds, by API group (v1).
const KARPENTER_KINDS: [(&str, &str); 5] = [
    ("karpenter.sh/v1", "NodePool"),
    ("karpenter.sh/v1", "NodeClaim"),
    ("karpenter.k8s.aws/v1", "EC2NodeClass"),
    ("karpenter.sh/v1alpha1", "NodeOverlay"),
    ("autoscaling.x-k8s.io/v1beta1", "CapacityBuffer"),
];

/// A document that is almost a Karpenter v1 object: a Karpenter API group with an unknown version
/// or kind (`karpenter.sh/v2`, `kind: Nodepool`), or a Karpenter kind under another apiVersion.
/// Such a document was meant to be checked, so it is an error rather than something to skip.
pub fn karpenter_near_miss(api_version: &str, kind: &str) -> Option<ValidationError> {
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    let karpenter_group = group == "karpenter.sh" || group == "karpenter.k8s.aws";
    let same_kind = KARPENTER_KINDS
        .iter()
        .find(|(_, k)| k.eq_ignore_ascii_case(kind));
    if let Some((v1, k)) = same_kind {
        if *k != kind {
            return Some(ValidationError::new(
                "kind",
                format!("Unsupported value: {kind:?}: kinds are case-sensitive"),
                format!("did you mean `kind: {k}` (apiVersion: {v1})?"),
            ));
        }
        if api_version != *v1 {
            return Some(ValidationError::new(
                "apiVersion",
                format!("Unsupported value: {api_version:?}: {k} is served as {v1}"),
                format!("use `apiVersion: {v1}`"),
            ));
        }
        return None;
    }
    if karpenter_group {
        let kinds: Vec<&str> = KARPENTER_KINDS
            .iter()
            .filter(|(v, _)| *v == format!("{group}/v1"))
            .map(|(_, k)| *k)
            .collect();
        return Some(ValidationError::new(
            "kind",
            format!("Unsupported value: {kind:?}: {api_version} has no such kind"),
            format!("kinds of {group}/v1: {}", kinds.join(", ")),
        ));
    }
    None
}

/// Renders documents as multi-document YAML.
pub fn to_yaml_documents(docs: &[Value]) -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for (i, doc) in docs.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let text = serde_saphyr::to_string(doc)?;
        out.push_str(&text);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_key_says_what_the_author_can_do_not_the_parser_option() {
        let err = parse_yaml("a: 1\nb: 2\na: 3\n", 10)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("DuplicateKeyPolicy"), "{err}");
        assert!(err.contains("duplicate mapping key"), "{err}");
        assert!(err.contains("keep one"), "{err}");
        assert!(err.starts_with("line 12"), "{err}");
        let err = parse_yaml("a: 1\n---\nb: 2\n", 1).unwrap_err().to_string();
        assert!(!err.contains("from_str_multiple"), "{err}");
        assert!(err.contains("one document"), "{err}");
    }

    #[test]
    fn splits_and_counts_non_empty_documents() {
        let docs = split_documents("---\n# only a comment\n---\na: 1\n---\nb: [\n...\n");
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].index, 1);
        assert_eq!(docs[0].value.as_ref().unwrap()["a"], 1);
        assert!(docs[1].value.is_err());
    }

    #[test]
    fn documents_know_their_first_line_and_errors_name_file_lines() {
        let docs = split_documents("# c\na: 1\n---\nb: 2\n---\nc: [\n");
        assert_eq!(docs.iter().map(|d| d.line).collect::<Vec<_>>(), [2, 4, 6]);
        let err = docs[2].value.as_ref().unwrap_err().to_string();
        assert!(
            err.starts_with("line 6") || err.starts_with("line 7"),
            "{err}"
        );
    }

    #[test]
    fn list_items_and_their_lines() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- kind: Pod\n  metadata:\n    name: a\n- kind: Pod\n  metadata: {name: b}\nmetadata: {}\n";
        let value = parse_yaml(text, 1).unwrap();
        assert_eq!(list_items(&value).unwrap().len(), 2);
        assert_eq!(list_item_lines(text), [4, 7]);
        let empty = parse_yaml("kind: List\nitems: []\n", 1).unwrap();
        assert_eq!(list_items(&empty).unwrap().len(), 0);
        assert!(list_items(&parse_yaml("kind: Pod\n", 1).unwrap()).is_none());
    }

    #[test]
    fn deep_nesting_hits_the_budget_with_advice() {
        let deep = format!(
            "{}1{}",
            "[".repeat(MAX_YAML_DEPTH + 10),
            "]".repeat(MAX_YAML_DEPTH + 10)
        );
        let err = parse_yaml(&deep, 1).unwrap_err().to_string();
        assert!(err.contains("parser limit"), "{err}");
    }

    #[test]
    fn near_misses_of_karpenter_kinds() {
        assert_eq!(
            karpenter_near_miss("karpenter.sh/v2", "NodePool")
                .unwrap()
                .path,
            "apiVersion"
        );
        assert_eq!(
            karpenter_near_miss("karpenter.sh/v1", "Nodepool")
                .unwrap()
                .path,
            "kind"
        );
        assert_eq!(
            karpenter_near_miss("karpenter.sh/v1", "Provisioner")
                .unwrap()
                .path,
            "kind"
        );
        assert!(karpenter_near_miss("karpenter.sh/v1", "NodePool").is_none());
        assert!(karpenter_near_miss("v1", "ConfigMap").is_none());
    }

    #[test]
    fn block_scalars_survive() {
        let docs = split_documents("a: |\n  line\n  --- not a separator\n");
        assert_eq!(docs.len(), 1);
        assert_eq!(
            docs[0].value.as_ref().unwrap()["a"],
            "line\n--- not a separator\n"
        );
    }
}
