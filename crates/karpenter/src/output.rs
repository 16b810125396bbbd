//! The one printer of the command line: what a command produces goes to stdout (documents,
//! reports, `-o table|json|yaml` renderings), what it says to people goes to stderr (notes,
//! warnings, errors, progress). Commands print nothing themselves, so the two streams, the
//! formats and the house table style are decided here once; tests pin the bytes.

use std::fmt::Display;
use std::io::Write;

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use serde::Serialize;

/// `-o` of the commands that render a result several ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

/// `-o` of the commands that print manifests (`crds`, `convert`): YAML
/// documents, or a JSON `kind: List` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ManifestFormat {
    Yaml,
    Json,
}

/// Writes `text` to stdout as it is.
pub fn text(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(err) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        stdout_failed(&err);
    }
}

/// Writes one line to stdout.
pub fn line(line: &str) {
    text(&format!("{line}\n"));
}

/// Stdout cannot be written. A closed pipe (`karpenter crds | head`) means the reader has what it
/// wanted: stop quietly with success, as `cat` and `rg` do, instead of a panic and a backtrace.
/// Anything else (a full disk) is an error, said once.
fn stdout_failed(err: &std::io::Error) -> ! {
    if err.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: writing to stdout: {err}");
    std::process::exit(1);
}

/// Writes `value` to stdout as pretty JSON, with a final newline. Streamed: a plan of 200,000
/// pods is ~50 MB of JSON, which as one string would cost more memory than the solve.
pub fn json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if let Err(err) = serde_json::to_writer_pretty(&mut out, value) {
        if let Some(kind) = err.io_error_kind() {
            stdout_failed(&std::io::Error::from(kind));
        }
        return Err(err.into());
    }
    if let Err(err) = out.write_all(b"\n").and_then(|()| out.flush()) {
        stdout_failed(&err);
    }
    Ok(())
}

/// Writes `value` to stdout as one YAML document.
pub fn yaml<T: Serialize>(value: &T) -> anyhow::Result<()> {
    text(&serde_saphyr::to_string(value)?);
    Ok(())
}

/// Writes `value` as JSON or YAML; `render` makes the table for people.
pub fn render<T: Serialize>(
    format: Format,
    value: &T,
    render: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    match format {
        Format::Json => json(value),
        Format::Yaml => yaml(value),
        Format::Table => {
            text(&render(value));
            Ok(())
        }
    }
}

/// Writes YAML documents as one stream, each after a `---` line and ending with a newline.
pub fn yaml_documents<S: AsRef<str>>(documents: &[S]) {
    for doc in documents {
        let doc = doc.as_ref();
        text(&format!("---\n{doc}"));
        if !doc.ends_with('\n') {
            line("");
        }
    }
}

/// A table in the house style (compact UTF-8 borders, columns fitted to the terminal).
pub fn table<I, S>(header: I) -> Table
where
    I: IntoIterator<Item = S>,
    S: Into<comfy_table::Cell>,
{
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    table.set_header(header);
    table
}

/// A report of one result as `key value` lines, the keys in a column (`bench disruption`'s table).
pub fn key_values<K: Display, V: Display>(rows: &[(K, V)]) -> String {
    let width = rows
        .iter()
        .map(|(key, _)| key.to_string().chars().count())
        .max()
        .unwrap_or(0);
    rows.iter()
        .map(|(key, value)| format!("{:<width$} {value}\n", key.to_string()))
        .collect()
}

/// How a [`StreamedTable`] column lines up its cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// One column of a [`StreamedTable`]: its header and its width in characters.
#[derive(Clone, Debug)]
pub struct Column {
    name: &'static str,
    width: usize,
    align: Align,
}

impl Column {
    pub fn new(name: &'static str, width: usize, align: Align) -> Self {
        Column { name, width, align }
    }

    fn pad(&self, cell: &str) -> String {
        let width = self.width;
        match self.align {
            Align::Left => format!("{cell:<width$}"),
            Align::Right => format!("{cell:>width$}"),
        }
    }
}

/// A table printed a row at a time as results arrive, for runs that take minutes (`bench
/// scheduling`): fixed-width columns, as the house table cannot fit widths it has not seen yet,
/// and the header before the first row.
#[derive(Debug)]
pub struct StreamedTable {
    columns: Vec<Column>,
    header_printed: bool,
}

impl StreamedTable {
    pub fn new(columns: Vec<Column>) -> Self {
        StreamedTable {
            columns,
            header_printed: false,
        }
    }

    /// Prints one row (and the header first); cells beyond the columns are left out.
    pub fn row<S: AsRef<str>>(&mut self, cells: &[S]) {
        if !self.header_printed {
            self.header_printed = true;
            let header: Vec<&str> = self.columns.iter().map(|c| c.name).collect();
            line(&self.format(&header));
        }
        line(&self.format(cells));
    }

    fn format<S: AsRef<str>>(&self, cells: &[S]) -> String {
        self.columns
            .iter()
            .zip(cells)
            .map(|(column, cell)| column.pad(cell.as_ref()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// An error and its causes on one line, `outer: inner: …`, each cause once. Many errors (kube's,
/// the AWS SDK's) already print their source in their own message and return it from `source()`
/// too; `{:#}` would then say it twice.
pub fn error_chain(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// A spinner on stderr while something long runs (drawn only when stderr is a terminal); the
/// caller clears it with `finish_and_clear`.
pub fn spinner(message: String) -> indicatif::ProgressBar {
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    bar.set_message(message);
    bar.enable_steady_tick(std::time::Duration::from_millis(100));
    bar
}

/// Says something to people on stderr, as it is.
pub fn say(message: impl Display) {
    eprintln!("{message}");
}

/// `note: ...` on stderr: worth knowing, nothing wrong.
pub fn note(message: impl Display) {
    say(format_args!("note: {message}"));
}

/// `warning: ...` on stderr: the command went on, but the result may not be what was meant.
pub fn warning(message: impl Display) {
    say(format_args!("warning: {message}"));
}

/// `error: ...` on stderr.
pub fn error(message: impl Display) {
    say(format_args!("error: {message}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose message already holds its source's text (as kube's and the AWS SDK's do).
    #[derive(Debug)]
    struct Repeats(std::io::Error);
    impl std::fmt::Display for Repeats {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "failed to read kubeconfig: {}", self.0)
        }
    }
    impl std::error::Error for Repeats {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_error_chain_says_each_cause_once() {
        let err = anyhow::Error::new(Repeats(std::io::Error::other("no such file")))
            .context("cannot read kubeconfig /x");
        assert_eq!(
            format!("{err:#}"),
            "cannot read kubeconfig /x: failed to read kubeconfig: no such file: no such file"
        );
        assert_eq!(
            error_chain(&err),
            "cannot read kubeconfig /x: failed to read kubeconfig: no such file"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_chain(&plain), "outer: inner");
    }

    #[test]
    fn tables_have_the_house_style() {
        let mut t = table(["A", "B"]);
        t.add_row(["x", "y"]);
        let rendered = t.to_string();
        assert!(rendered.starts_with('┌'), "{rendered}");
        assert!(rendered.contains("│ A ┆ B │"), "{rendered}");
    }

    #[test]
    fn streamed_rows_keep_their_column_widths() {
        let table = StreamedTable::new(vec![
            Column::new("name", 6, Align::Left),
            Column::new("n", 4, Align::Right),
        ]);
        assert_eq!(table.format(&["name", "n"]), "name      n");
        assert_eq!(table.format(&["ab", "12345"]), "ab     12345");
    }

    #[test]
    fn key_values_line_up_the_values() {
        let report = key_values(&[("nodes", "3"), ("decide pass", "0.1 s")]);
        assert_eq!(report, "nodes       3\ndecide pass 0.1 s\n");
    }
}
