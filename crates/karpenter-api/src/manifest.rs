//! Multi-document YAML manifests, split so each document keeps its original text and a 1-based
//! index (what `validate` prints and what `convert` passes through untouched).

use serde_json::Value;

/// One YAML document of a manifest.
#[derive(Clone, Debug)]
pub struct Document {
    /// 1-based position among the file's non-empty documents.
    pub index: usize,
    /// The document's text, without the `---` separator.
    pub text: String,
    /// The parsed document, or why it does not parse.
    pub value: Result<Value, String>,
}

/// Splits `text` at `---` lines and parses each non-empty document.
pub fn split_documents(text: &str) -> Vec<Document> {
    let mut chunks: Vec<String> = vec![String::new()];
    for line in text.lines() {
        let is_separator = line == "---" || line.starts_with("--- ") || line.starts_with("---\t");
        if is_separator {
            chunks.push(String::new());
            // `--- value` puts content on the separator line itself.
            let rest = line[3..].trim();
            if !rest.is_empty()
                && !rest.starts_with('#')
                && let Some(last) = chunks.last_mut()
            {
                last.push_str(rest);
                last.push('\n');
            }
        } else if line == "..." {
            continue;
        } else if let Some(last) = chunks.last_mut() {
            last.push_str(line);
            last.push('\n');
        }
    }
    chunks
        .into_iter()
        .filter(|chunk| {
            chunk
                .lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .enumerate()
        .map(|(i, text)| {
            let value = serde_saphyr::from_str::<Value>(&text).map_err(|err| err.to_string());
            Document {
                index: i + 1,
                text,
                value,
            }
        })
        .collect()
}

/// Renders documents as multi-document YAML.
pub fn to_yaml_documents(docs: &[Value]) -> Result<String, String> {
    let mut out = String::new();
    for (i, doc) in docs.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let text = serde_saphyr::to_string(doc).map_err(|err| err.to_string())?;
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
    fn splits_and_counts_non_empty_documents() {
        let docs = split_documents("---\n# only a comment\n---\na: 1\n---\nb: [\n...\n");
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].index, 1);
        assert_eq!(docs[0].value.as_ref().unwrap()["a"], 1);
        assert!(docs[1].value.is_err());
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
