//! The README and `docs/` tell the truth: every `cargo run -- ...` example of the README runs
//! cleanly with the built binary, and no page reads like a work log ("in progress", "issue 9").

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The arguments of every `cargo run -- ARGS` line in the README's ```sh blocks: a trailing
/// `# comment` is dropped, and of a pipeline (`cargo run -- crds | kubectl apply -f -`) only the
/// karpenter part is kept.
fn readme_examples(readme: &str) -> Vec<Vec<String>> {
    let mut examples = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        let trimmed = line.trim();
        if let Some(fence) = trimmed.strip_prefix("```") {
            in_sh = !in_sh && (fence == "sh" || fence == "bash" || fence == "shell");
            continue;
        }
        let Some(command) = in_sh
            .then(|| trimmed.strip_prefix("cargo run -- "))
            .flatten()
        else {
            continue;
        };
        let command = command.split(" # ").next().unwrap_or_default();
        let command = command.split('|').next().unwrap_or_default();
        examples.push(command.split_whitespace().map(str::to_string).collect());
    }
    examples
}

#[test]
fn the_readme_examples_are_found() {
    let examples = readme_examples(
        "```sh\ncargo run -- simulate -f a   # note\ncargo run -- crds | kubectl apply -f -\n```\n```\ncargo run -- not-sh\n```\n",
    );
    assert_eq!(
        examples,
        [vec!["simulate", "-f", "a"], vec!["crds"]],
        "{examples:?}"
    );
}

#[test]
fn every_cargo_run_example_of_the_readme_runs_cleanly() {
    let examples = readme_examples(&read(&repo().join("README.md")));
    assert!(examples.len() >= 6, "{examples:?}");
    for args in examples {
        let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .args(&args)
            .current_dir(repo())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "`cargo run -- {}` exited with {:?}:\n{stderr}{}",
            args.join(" "),
            output.status.code(),
            String::from_utf8_lossy(&output.stdout)
        );
        // Warnings are part of some examples' output (what `convert` could not carry over, the
        // same object in two seed guides); errors never are.
        assert!(
            !stderr.contains("error"),
            "`cargo run -- {}` is not clean:\n{stderr}",
            args.join(" ")
        );
        assert!(
            !output.stdout.is_empty(),
            "`{}` printed nothing",
            args.join(" ")
        );
    }
}

/// Words of a work log, not of documentation: what the code does not do yet is said as what it
/// does not do, and "issue N" points at a tracker a reader of the repository cannot open. Returns
/// what matched.
fn status_word(line: &str) -> Option<&'static str> {
    let lower = line.to_lowercase();
    let word = |text: &str, word: &str| {
        text.match_indices(word).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + word.len()..].chars().next();
            !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
        })
    };
    let followed_by = |text: &str, prefix: &str, next: &dyn Fn(char) -> bool| {
        text.match_indices(prefix)
            .any(|(at, _)| text[at + prefix.len()..].chars().next().is_some_and(next))
    };
    let checks: [(&str, bool); 9] = [
        ("in progress", word(&lower, "in progress")),
        ("(next)", lower.contains("(next)")),
        ("not done", word(&lower, "not done")),
        ("TODO/FIXME", word(line, "TODO") || word(line, "FIXME")),
        (
            "issue N",
            followed_by(&lower, "issue ", &|c| c.is_ascii_digit())
                || followed_by(&lower, "issues ", &|c| c.is_ascii_digit()),
        ),
        // As a status ("Not yet: ...", "(not yet)"), not as a state ("a node not yet Ready").
        (
            "not yet",
            word(line, "Not yet")
                || followed_by(&lower, "not yet", &|c| "):.,;".contains(c))
                || [
                    "not available yet",
                    "not implemented yet",
                    "not supported yet",
                ]
                .iter()
                .any(|p| lower.contains(p)),
        ),
        (
            "until ... lands",
            lower.match_indices("until ").any(|(at, _)| {
                let rest = &lower[at..];
                rest.find(" lands").is_some_and(|end| end < 50)
            }),
        ),
        ("karpenter-aws.md", lower.contains("karpenter-aws.md")),
        ("karpenter-core.md", lower.contains("karpenter-core.md")),
    ];
    checks
        .into_iter()
        .find(|(_, hit)| *hit)
        .map(|(name, _)| name)
}

fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![
        repo().join("README.md"),
        repo().join("charts/karpenter/README.md"),
    ];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files.retain(|path| path.exists());
    files
}

#[test]
fn readme_and_docs_have_no_status_words() {
    let mut found = Vec::new();
    for file in markdown_files() {
        for (number, line) in read(&file).lines().enumerate() {
            if let Some(word) = status_word(line) {
                found.push(format!(
                    "{}:{}: {word}: {line}",
                    file.strip_prefix(repo()).unwrap_or(&file).display(),
                    number + 1,
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "status words in the docs:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_status_words_catch_what_they_are_for() {
    for bad in [
        "the aws provider (in progress: settings)",
        "and (next) consolidation run",
        "reservations: not done",
        "| `aws` (not yet) |",
        "## Not yet",
        "the rest of issue 11",
        "## Memory (issue 9, after the index)",
        "// TODO: later",
        "until disruption lands, nodes stay",
        "see karpenter-aws.md §3.2",
    ] {
        assert!(status_word(bad).is_some(), "{bad}");
    }
    for fine in [
        "NodeClaims not yet initialized count as in flight",
        "a pod not yet Ready",
        "the next NodeClaim",
        "the issue of tokens",
        "TODOS",
    ] {
        assert_eq!(status_word(fine), None, "{fine}");
    }
}

/// The backticked paths of one section of `docs/architecture.md` (up to the next `## `).
fn paths_in_section(doc: &str, heading: &str) -> Vec<String> {
    let Some(start) = doc.find(heading) else {
        return Vec::new();
    };
    let section = &doc[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    section[..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|name| name.contains('/') && !name.contains(' '))
        .map(str::to_string)
        .collect()
}

/// The map is one hop from a concept to its code: every file it names exists, and it links every
/// doc.
#[test]
fn the_architecture_map_names_files_that_exist_and_links_every_doc() {
    let root = repo();
    let doc = read(&root.join("docs/architecture.md"));
    let paths = paths_in_section(&doc, "## Where each concept lives");
    assert!(
        paths.len() > 40,
        "the concept table names only {} paths",
        paths.len()
    );
    let missing: Vec<&String> = paths.iter().filter(|p| !root.join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names files that do not exist: {missing:?}"
    );
    let mut unlinked = Vec::new();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        if name.ends_with(".md")
            && name != "architecture.md"
            && !doc.contains(&format!("]({name})"))
        {
            unlinked.push(name);
        }
    }
    assert!(
        unlinked.is_empty(),
        "docs/architecture.md does not link: {unlinked:?}"
    );
}

#[test]
fn the_map_check_reads_paths_of_its_section_only() {
    let doc = "## A\n`x/y.rs`\n## Where each concept lives\n| c | `a/b.rs`, `c/d.rs` |\n`not a/path`\n## Next\n`e/f.rs`\n";
    assert_eq!(
        paths_in_section(doc, "## Where each concept lives"),
        vec!["a/b.rs".to_string(), "c/d.rs".to_string()]
    );
}
