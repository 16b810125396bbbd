//! Reading `-f FILE|DIR|-` arguments shared by `validate` and `convert`.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// One manifest source: a file (or `-` for stdin) and its text.
pub struct Source {
    /// As shown in messages: the path, or `-` for stdin.
    pub name: String,
    pub text: String,
}

/// Expands `-f` arguments: files as given, directories to every `*.yaml`/`*.yml` inside
/// (recursively, sorted), `-` to stdin.
pub fn read_sources(args: &[PathBuf]) -> anyhow::Result<Vec<Source>> {
    let mut sources = Vec::new();
    for arg in args {
        if arg.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading stdin")?;
            sources.push(Source {
                name: "-".into(),
                text,
            });
        } else if arg.is_dir() {
            let mut files = Vec::new();
            collect_yaml(arg, &mut files)?;
            files.sort();
            for file in files {
                sources.push(read_file(&file)?);
            }
        } else {
            sources.push(read_file(arg)?);
        }
    }
    Ok(sources)
}

fn read_file(path: &Path) -> anyhow::Result<Source> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Source {
        name: path.display().to_string(),
        text,
    })
}

fn collect_yaml(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in
        std::fs::read_dir(dir).with_context(|| format!("reading directory {}", dir.display()))?
    {
        let path = entry
            .with_context(|| format!("reading directory {}", dir.display()))?
            .path();
        if path.is_dir() {
            collect_yaml(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
    Ok(())
}
