//! The control plane's lifecycle: it stops and deletes its data when the test
//! process ends (a panic included) or on SIGTERM, and a start that cannot
//! succeed is a clear error rather than a hang.
//!
//! Each case runs in a process of its own (this test binary, re-run on the
//! `child` test below), since the harness starts one control plane per process.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use wasmgpu_test_harness::{
    CONTROL_PLANE_ENV, DEFAULT_WAIT, START_TIMEOUT_ENV, TestContext, control_plane_binary,
};

/// Tells the `child` test what to do.
const CHILD_ENV: &str = "WASMGPU_LIFECYCLE_CHILD";

/// Not a test of its own: the body of the child processes the tests below
/// start. Without [`CHILD_ENV`] it does nothing.
#[tokio::test]
#[ignore = "run by the other tests of this file, in a process of its own"]
async fn child() -> Result<()> {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return Ok(());
    };
    match mode.split_once(':') {
        Some(("panic", report)) => {
            let ctx = TestContext::new("lifecycle").await?;
            std::fs::write(
                report,
                ctx.cluster()
                    .kubeconfig_path()
                    .as_os_str()
                    .as_encoded_bytes(),
            )?;
            panic!("a test panics while the control plane runs");
        }
        _ => {
            let error = TestContext::new("lifecycle")
                .await
                .err()
                .context("the start succeeded")?;
            println!("START ERROR: {error:#}");
            Err(error)
        }
    }
}

/// Runs the `child` test in a new process with `env`, bounded in time.
fn run_child(env: &[(&str, &str)]) -> Result<Output> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args([
        "--ignored",
        "--exact",
        "child",
        "--nocapture",
        "--test-threads=1",
    ]);
    command.envs(env.iter().copied()).stdin(Stdio::null());
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(output) => Ok(output?),
        Err(_) => {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(pid.to_string())
                .status();
            bail!("the child test process did not finish within 120s")
        }
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Waits, bounded, until `path` is gone. Polls: the deletion is another
/// process's and offers nothing to wait on.
fn wait_gone(path: &Path) -> Result<()> {
    let deadline = Instant::now() + DEFAULT_WAIT;
    while path.exists() {
        ensure!(
            Instant::now() < deadline,
            "{} still exists after {DEFAULT_WAIT:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

#[test]
fn the_control_plane_stops_and_cleans_up_when_a_test_panics() -> Result<()> {
    control_plane_binary()?;
    let dir = tempfile::tempdir()?;
    let report = dir.path().join("kubeconfig-path");
    let output = run_child(&[(CHILD_ENV, &format!("panic:{}", report.display()))])?;
    ensure!(
        !output.status.success(),
        "the child test must fail:\n{}",
        text(&output)
    );
    ensure!(
        text(&output).contains("a test panics while the control plane runs"),
        "the child did not get to its panic:\n{}",
        text(&output)
    );
    let kubeconfig = PathBuf::from(std::fs::read_to_string(&report)?);
    let data_dir = kubeconfig
        .parent()
        .context("kubeconfig path without a parent")?;
    wait_gone(data_dir)
}

#[test]
fn a_missing_binary_says_which_make_target_builds_it() -> Result<()> {
    let output = run_child(&[
        (CHILD_ENV, "start"),
        (CONTROL_PLANE_ENV, "/nonexistent/control-plane"),
    ])?;
    let text = text(&output);
    ensure!(!output.status.success(), "{text}");
    ensure!(
        text.contains("START ERROR:") && text.contains("make control-plane"),
        "{text}"
    );
    Ok(())
}

fn fake_server(dir: &Path, script: &str) -> Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fake-control-plane");
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n"))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path
        .to_str()
        .context("temporary path is not UTF-8")?
        .to_owned())
}

#[test]
fn a_server_that_never_gets_ready_times_out_with_its_log() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // Logs a line, then waits for its stdin to close, as the real one does.
    let fake = fake_server(dir.path(), "echo 'etcd: disk on fire' >&2\ncat >/dev/null")?;
    let started = Instant::now();
    let output = run_child(&[
        (CHILD_ENV, "start"),
        (CONTROL_PLANE_ENV, &fake),
        (START_TIMEOUT_ENV, "2"),
    ])?;
    let text = text(&output);
    ensure!(
        text.contains("was not ready after 2s") && text.contains("etcd: disk on fire"),
        "{text}"
    );
    ensure!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    Ok(())
}

#[test]
fn a_server_that_exits_early_is_reported_with_its_log() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let fake = fake_server(dir.path(), "echo 'bad flag --frobnicate' >&2\nexit 3")?;
    let output = run_child(&[(CHILD_ENV, "start"), (CONTROL_PLANE_ENV, &fake)])?;
    let text = text(&output);
    ensure!(
        text.contains("exited before it was ready")
            && text.contains("exit status: 3")
            && text.contains("bad flag --frobnicate"),
        "{text}"
    );
    Ok(())
}

#[test]
fn sigterm_stops_the_control_plane_and_deletes_its_data() -> Result<()> {
    let binary = control_plane_binary()?;
    let mut server = Command::new(binary)
        .arg("serve")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = server.stdout.take().context("stdout is piped")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let ready = rx.recv_timeout(Duration::from_secs(180));
    let kill = |signal: &str| {
        Command::new("kill")
            .arg(signal)
            .arg(server.id().to_string())
            .status()
    };
    let Ok(ready) = ready else {
        let _ = kill("-KILL");
        bail!("the control plane was not ready within 180s");
    };
    let kubeconfig = PathBuf::from(
        ready
            .split_once(" kubeconfig=")
            .context("no kubeconfig in the ready line")?
            .1,
    );
    ensure!(kubeconfig.is_file(), "{ready}");

    kill("-TERM")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(server.wait());
    });
    let status = rx
        .recv_timeout(Duration::from_secs(60))
        .context("no exit within 60s of SIGTERM")??;
    ensure!(status.success(), "exit after SIGTERM: {status}");
    ensure!(
        !kubeconfig.parent().context("no parent")?.exists(),
        "the data directory is still there"
    );
    Ok(())
}
