//! Standard output for commands.
//!
//! `print!` panics when standard output is closed (`wasmgpu … | head -n1`)
//! or full (`> /dev/full`). Commands write through [`print`] instead: a
//! write error is an error, and a closed pipe ends the command quietly with
//! the status a Unix tool killed by SIGPIPE has (141), as `cat` or `grep`
//! would.

use std::io::{self, Write};
use std::process::ExitCode;

/// The reader of standard output went away (EPIPE).
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub(crate) struct StdoutClosed;

/// The exit status after [`StdoutClosed`]: 128 + SIGPIPE, as the shell
/// reports for a tool the signal ended.
pub(crate) const CLOSED_STATUS: u8 = 141;

/// Writes `text` to standard output and flushes it.
pub(crate) fn print(text: &str) -> anyhow::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|error| match error.kind() {
            io::ErrorKind::BrokenPipe => anyhow::Error::new(StdoutClosed),
            _ => anyhow::Error::new(error).context("cannot write to standard output"),
        })
}

/// Writes `text` and a newline to standard output.
pub(crate) fn println(text: &str) -> anyhow::Result<()> {
    print(&format!("{text}\n"))
}

/// Writes `value` as pretty-printed JSON and a newline to standard output.
pub(crate) fn json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println(&serde_json::to_string_pretty(value)?)
}

/// The exit status for a command's result: a closed standard output is no
/// error (nothing more is printed), other errors are returned.
pub(crate) fn status(result: anyhow::Result<ExitCode>) -> anyhow::Result<ExitCode> {
    match result {
        Err(error) if error.chain().any(|e| e.is::<StdoutClosed>()) => {
            Ok(ExitCode::from(CLOSED_STATUS))
        }
        other => other,
    }
}
