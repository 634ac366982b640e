//! What a policy says during one call: its `log` lines and what it writes to
//! stderr (a panic message, typically), bounded by the same limits.
//!
//! ```text
//!  log("…") ──────────────┐
//!                         ├─▶ GuestLog: ≤ log_lines lines each, ≤ log_line_bytes per line;
//!  stderr (write, flush) ─┘   the rest dropped and counted — never refused
//! ```
//!
//! A write to stderr never fails: a guest whose writes were refused would
//! panic in `eprintln!` and lose its round for having logged. Stderr keeps
//! its first lines and its last few (where a panic message is), and counts
//! the ones between.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

use super::bounds::cut;

/// Stderr lines kept from the end of the output, whatever came before.
const STDERR_TAIL: usize = 8;
/// The permit a stderr write gets: any size, taken whole.
const WRITE_PERMIT: usize = 64 << 10;

/// The policy's log for one call; clones share it.
#[derive(Clone)]
pub(crate) struct GuestLog(Arc<Mutex<Lines>>);

struct Lines {
    max_lines: usize,
    max_bytes: usize,
    /// `log` lines, in order.
    logged: Vec<String>,
    /// The first stderr lines.
    stderr_head: Vec<String>,
    /// The last stderr lines, once the head is full.
    stderr_tail: VecDeque<String>,
    /// The stderr line being written (cut at `max_bytes`).
    partial: Vec<u8>,
    partial_cut: bool,
    /// Lines over the limits, from either.
    dropped: usize,
}

impl GuestLog {
    /// A log that keeps at most `max_lines` lines of `log` and as many of
    /// stderr, each cut to `max_bytes`.
    pub(crate) fn new(max_lines: usize, max_bytes: usize) -> Self {
        GuestLog(Arc::new(Mutex::new(Lines {
            max_lines,
            max_bytes,
            logged: Vec::new(),
            stderr_head: Vec::new(),
            stderr_tail: VecDeque::new(),
            partial: Vec::new(),
            partial_cut: false,
            dropped: 0,
        })))
    }

    /// The guest's stderr, feeding this log.
    pub(crate) fn stderr(&self) -> Stderr {
        Stderr(self.clone())
    }

    /// Records one `log` line.
    pub(crate) fn log(&self, mut line: String) {
        let mut lines = self.lock();
        if lines.logged.len() >= lines.max_lines {
            lines.dropped += 1;
            return;
        }
        cut(&mut line, lines.max_bytes);
        lines.logged.push(line);
    }

    /// The lines kept, `log` first, then stderr as `stderr: …` lines, and
    /// how many were dropped. Empties the log.
    pub(crate) fn take(&self) -> (Vec<String>, usize) {
        let mut lines = self.lock();
        lines.end_line();
        let mut out = std::mem::take(&mut lines.logged);
        let stderr = std::mem::take(&mut lines.stderr_head)
            .into_iter()
            .chain(std::mem::take(&mut lines.stderr_tail));
        out.extend(stderr.map(|l| format!("stderr: {l}")));
        (out, std::mem::take(&mut lines.dropped))
    }

    fn lock(&self) -> MutexGuard<'_, Lines> {
        wasmgpu_support::lock(&self.0)
    }
}

impl Lines {
    fn write(&mut self, bytes: &[u8]) {
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let (text, ends) = match piece.strip_suffix(b"\n") {
                Some(text) => (text, true),
                None => (piece, false),
            };
            let room = self.max_bytes.saturating_sub(self.partial.len());
            if text.len() > room {
                self.partial.extend_from_slice(&text[..room]);
                self.partial_cut = true;
            } else {
                self.partial.extend_from_slice(text);
            }
            if ends {
                self.end_line();
            }
        }
    }

    /// Ends the stderr line being written, if any.
    fn end_line(&mut self) {
        if self.partial.is_empty() && !self.partial_cut {
            return;
        }
        let mut line = String::from_utf8_lossy(&self.partial).into_owned();
        if self.partial_cut {
            cut(&mut line, self.max_bytes);
            if !line.ends_with('…') {
                line.push('…');
            }
        }
        self.partial.clear();
        self.partial_cut = false;
        let noise = line.trim().is_empty() || line.starts_with("note: run with `RUST_BACKTRACE");
        if noise {
            return;
        }
        let head = self
            .max_lines
            .saturating_sub(STDERR_TAIL.min(self.max_lines));
        if self.stderr_head.len() < head {
            self.stderr_head.push(line);
            return;
        }
        self.stderr_tail.push_back(line);
        if self.stderr_tail.len() > self.max_lines - head {
            self.stderr_tail.pop_front();
            self.dropped += 1;
        }
    }
}

// === impl Stderr ===

/// The guest's stderr: takes every write whole, into the [`GuestLog`].
#[derive(Clone)]
pub(crate) struct Stderr(GuestLog);

impl OutputStream for Stderr {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.0.lock().write(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(WRITE_PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Stderr {
    async fn ready(&mut self) {}
}

impl AsyncWrite for Stderr {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.0.lock().write(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for Stderr {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Stderr {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_past_the_limit_are_dropped_and_counted_and_long_ones_cut() {
        let log = GuestLog::new(3, 8);
        for i in 0..5 {
            log.log(format!("line {i}"));
        }
        log.log("x".repeat(20));
        let (lines, dropped) = log.take();
        assert_eq!(lines, ["line 0", "line 1", "line 2"]);
        assert_eq!(dropped, 3);
        let log = GuestLog::new(3, 8);
        log.log("é".repeat(5));
        assert_eq!(log.take().0, ["éééé…"], "cut on a character boundary");
    }

    #[test]
    fn stderr_takes_every_write_and_keeps_its_head_and_tail() {
        let log = GuestLog::new(10, 16);
        let mut stderr = log.stderr();
        for i in 0..1000 {
            assert_eq!(stderr.check_write().unwrap(), WRITE_PERMIT);
            stderr
                .write(Bytes::from(format!("noise {i}\n")))
                .expect("never refused");
        }
        stderr
            .write(Bytes::from_static(b"panicked at src/lib.rs:1: boom"))
            .unwrap();
        let (lines, dropped) = log.take();
        assert_eq!(lines.len(), 10);
        assert_eq!(lines[0], "stderr: noise 0");
        assert_eq!(lines[1], "stderr: noise 1");
        assert_eq!(lines[8], "stderr: noise 999");
        assert_eq!(
            lines[9], "stderr: panicked at src/…",
            "the last line, unfinished, cut to 16 bytes"
        );
        assert_eq!(dropped, 1001 - 10);
    }

    #[test]
    fn a_long_stderr_line_written_in_pieces_is_one_cut_line() {
        let log = GuestLog::new(100, 1024);
        let mut stderr = log.stderr();
        for _ in 0..4 {
            stderr.write(Bytes::from(vec![b'a'; 1026])).unwrap();
        }
        stderr.write(Bytes::from_static(b"\nnext\n")).unwrap();
        let (lines, dropped) = log.take();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0].len(), "stderr: ".len() + 1024 + '…'.len_utf8());
        assert_eq!(lines[1], "stderr: next");
        assert_eq!(dropped, 0);
    }

    #[test]
    fn log_and_stderr_each_keep_up_to_the_limit() {
        let log = GuestLog::new(2, 64);
        let mut stderr = log.stderr();
        log.log("a".into());
        log.log("b".into());
        log.log("c".into());
        stderr.write(Bytes::from_static(b"x\ny\nz\n")).unwrap();
        let (lines, dropped) = log.take();
        assert_eq!(lines, ["a", "b", "stderr: y", "stderr: z"]);
        assert_eq!(dropped, 2);
    }
}
