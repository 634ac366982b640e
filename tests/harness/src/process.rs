//! Running the control-plane binary as a child process.
//!
//! The child is started with `serve --stop-on-stdin-eof` and its stdin is a
//! pipe that this process never writes to. The pipe closes when this process
//! exits, however it exits (end of the test run, a panic, a signal), and the
//! control plane then stops and deletes its data. Nothing has to run at exit.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The line the control plane prints on stdout once it is ready starts with this.
const READY_PREFIX: &str = "wasmgpu control plane ready:";

/// How many lines of the server's log are kept for error messages.
const LOG_TAIL_LINES: usize = 60;

/// How long a stop may take before the child is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A running control plane.
pub(crate) struct ControlPlane {
    pub server: String,
    pub version: String,
    pub kubeconfig_path: PathBuf,
    pub ready_in: Duration,
    pub log: LogTail,
    // Held, never written: closing it stops the server.
    _stdin: Mutex<ChildStdin>,
    _child: Mutex<Child>,
}

/// What the stdout reader saw.
enum Stdout {
    Ready(String),
    Exited,
}

impl ControlPlane {
    /// Starts `binary serve` and waits at most `timeout` until it is ready.
    pub fn start(binary: &Path, timeout: Duration, log_file: Option<&Path>) -> Result<Self> {
        let started = Instant::now();
        let mut child = Command::new(binary)
            .args(["serve", "--stop-on-stdin-eof"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", binary.display()))?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");

        let log = LogTail::default();
        let log_file = match log_file {
            Some(path) => Some(
                File::create(path)
                    .with_context(|| format!("creating the log file {}", path.display()))?,
            ),
            None => None,
        };
        let log_drained = log.collect(stderr, log_file);

        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("control-plane-stdout".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if line.starts_with(READY_PREFIX) {
                        let _ = tx.send(Stdout::Ready(line));
                    }
                }
                let _ = tx.send(Stdout::Exited);
            })
            .context("spawning a thread")?;

        let ready_line = match rx.recv_timeout(timeout) {
            Ok(Stdout::Ready(line)) => line,
            Ok(Stdout::Exited) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                // The log reader may still hold the last lines the server wrote.
                let _ = log_drained.recv_timeout(Duration::from_secs(5));
                bail!(
                    "the control plane ({}) exited before it was ready ({status}); its log ends with:\n{}",
                    binary.display(),
                    log.tail()
                );
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                stop(child, stdin, &rx);
                bail!(
                    "the control plane ({}) was not ready after {timeout:?}; its log ends with:\n{}",
                    binary.display(),
                    log.tail()
                );
            }
        };
        let ready = ReadyLine::parse(&ready_line).with_context(|| {
            format!("unexpected ready line from the control plane: {ready_line}")
        })?;
        Ok(Self {
            server: ready.server,
            version: ready.version,
            kubeconfig_path: ready.kubeconfig,
            ready_in: started.elapsed(),
            log,
            _stdin: Mutex::new(stdin),
            _child: Mutex::new(child),
        })
    }
}

/// Stops a child that is not ready: closing stdin asks it to stop and clean
/// up; it is killed if it has not exited after [`STOP_TIMEOUT`].
fn stop(mut child: Child, stdin: ChildStdin, stdout: &mpsc::Receiver<Stdout>) {
    drop(stdin);
    loop {
        match stdout.recv_timeout(STOP_TIMEOUT) {
            Ok(Stdout::Ready(_)) => continue,
            Ok(Stdout::Exited) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                break;
            }
        }
    }
    let _ = child.wait();
}

/// `wasmgpu control plane ready: server=URL version=V ready-in=D kubeconfig=PATH`
#[derive(Debug, PartialEq)]
struct ReadyLine {
    server: String,
    version: String,
    kubeconfig: PathBuf,
}

impl ReadyLine {
    fn parse(line: &str) -> Option<Self> {
        let rest = line.strip_prefix(READY_PREFIX)?;
        // The path runs to the end of the line: it may hold spaces.
        let (fields, kubeconfig) = rest.split_once(" kubeconfig=")?;
        let field = |key: &str| {
            fields
                .split_whitespace()
                .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
                .map(str::to_owned)
        };
        Some(Self {
            server: field("server")?,
            version: field("version")?,
            kubeconfig: PathBuf::from(kubeconfig),
        })
    }
}

/// The last lines of the server's log (its stderr), kept for error messages.
#[derive(Clone, Default)]
pub(crate) struct LogTail(Arc<Mutex<VecDeque<String>>>);

impl LogTail {
    /// Reads `stderr` to its end on a thread of its own, so the child never
    /// blocks on a full pipe; every line also goes to `file` when given. The
    /// returned channel is signalled (or closed) once stderr is read to its end.
    fn collect(
        &self,
        stderr: impl std::io::Read + Send + 'static,
        mut file: Option<File>,
    ) -> mpsc::Receiver<()> {
        let (drained_tx, drained) = mpsc::channel();
        let lines = self.0.clone();
        let spawned = std::thread::Builder::new()
            .name("control-plane-log".into())
            .spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(file) = file.as_mut() {
                        let _ = writeln!(file, "{line}");
                    }
                    let mut lines = lines.lock().unwrap_or_else(|e| e.into_inner());
                    if lines.len() == LOG_TAIL_LINES {
                        lines.pop_front();
                    }
                    lines.push_back(line);
                }
                let _ = drained_tx.send(());
            });
        if let Err(error) = spawned {
            self.push(format!("(the log could not be collected: {error})"));
        }
        drained
    }

    fn push(&self, line: String) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(line);
    }

    /// The kept lines, one per line, indented.
    pub fn tail(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if lines.is_empty() {
            return "  (nothing)".to_owned();
        }
        lines.iter().map(|l| format!("  {l}\n")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_ready_line() {
        let line = "wasmgpu control plane ready: server=https://127.0.0.1:40123 \
                    version=v1.37.2 ready-in=2.5s kubeconfig=/tmp/a b/kubeconfig";
        assert_eq!(
            ReadyLine::parse(line),
            Some(ReadyLine {
                server: "https://127.0.0.1:40123".into(),
                version: "v1.37.2".into(),
                kubeconfig: "/tmp/a b/kubeconfig".into(),
            })
        );
        assert_eq!(ReadyLine::parse("I1130 some log line"), None);
    }
}
