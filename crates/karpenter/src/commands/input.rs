//! `-f FILE|DIR|-` for every command, through the one shared reader
//! (`karpenter_input`); its notes (skipped entries, empty input) go to stderr.

use std::path::PathBuf;

use karpenter_input::{Sources, read_sources};

use crate::output;

/// Exit code when the input held nothing the command could check or use (empty files, empty
/// stdin, only skipped documents): never a silent success.
pub const EXIT_NOTHING_CHECKED: u8 = 2;

/// Reads the `-f` arguments and prints the reader's notes on stderr.
pub fn read_inputs(files: &[PathBuf]) -> anyhow::Result<Sources> {
    let read = read_sources(files, &mut std::io::stdin().lock())?;
    for note in &read.notes {
        output::note(note);
    }
    Ok(read)
}
