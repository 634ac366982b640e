//! A real OCI registry for tests: the CNCF distribution registry (built by
//! `tests/registry/build.sh`, `make registry`), serving TLS with a
//! certificate from a CA made for this registry alone, and basic
//! authentication from an htpasswd file (bcrypt).
//!
//! ```text
//!  Registry::start()
//!    tmp/ca.pem  tmp/cert.pem tmp/key.pem   rcgen: CA ─signs─▶ 127.0.0.1, localhost
//!    tmp/htpasswd                           bcrypt: <user>:<hash>
//!    tmp/config.yml ──▶ registry serve      127.0.0.1:<free port>, storage tmp/data
//! ```
//!
//! The process is killed when the [`Registry`] is dropped.

use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// Names the registry binary; `make` sets it.
pub const REGISTRY_ENV: &str = "WASMGPU_REGISTRY";

/// A running registry.
pub struct Registry {
    /// `127.0.0.1:<port>`.
    pub address: String,
    /// The CA that signed its certificate (PEM).
    pub ca_pem: String,
    /// The same, on disk.
    pub ca_path: PathBuf,
    /// The one user.
    pub username: String,
    /// Its password.
    pub password: String,
    log: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

/// Names the ORAS CLI binary (built next to the registry); `make` sets it.
pub const ORAS_ENV: &str = "WASMGPU_ORAS";

/// The registry binary: `$WASMGPU_REGISTRY`, or the cache entry
/// `tests/registry/build.sh` builds for the sources in this checkout.
pub fn registry_binary() -> Result<PathBuf> {
    built(REGISTRY_ENV, "--path", "the test registry")
}

/// The ORAS CLI (`oras.land/oras`, a tool of `tests/registry/go.mod`):
/// `$WASMGPU_ORAS`, or the one `tests/registry/build.sh` builds next to the
/// registry.
pub fn oras_binary() -> Result<PathBuf> {
    built(ORAS_ENV, "--oras-path", "the ORAS CLI")
}

/// `$env` when set, else what `tests/registry/build.sh <flag>` names; it
/// must exist.
fn built(env: &str, flag: &str, what: &str) -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!(
                "{env}={} does not exist: run `make registry` to build it",
                path.display()
            );
        }
        return Ok(path);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../registry/build.sh");
    let output = Command::new(&script)
        .arg(flag)
        .output()
        .with_context(|| format!("running {} {flag}", script.display()))?;
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if !output.status.success() || !path.is_file() {
        bail!(
            "{what} is not built for these sources (expected at {}): run `make registry` \
             (or tests/registry/build.sh), or set {env}",
            path.display()
        );
    }
    Ok(path)
}

// === impl Registry ===

impl Registry {
    /// Starts a registry with TLS and basic authentication; waits until it
    /// accepts connections.
    pub fn start() -> Result<Self> {
        let binary = registry_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("wasmgpu-registry-")
            .tempdir()?;
        let (ca_pem, cert_pem, key_pem) = certificates()?;
        let ca_path = dir.path().join("ca.pem");
        std::fs::write(&ca_path, &ca_pem)?;
        std::fs::write(dir.path().join("cert.pem"), cert_pem)?;
        std::fs::write(dir.path().join("key.pem"), key_pem)?;
        let (username, password) = ("wasmgpu".to_string(), format!("pw-{}", std::process::id()));
        // The lowest cost bcrypt allows: the registry checks it on every request.
        let hash = bcrypt::hash(&password, 4).context("hashing the registry password")?;
        std::fs::write(dir.path().join("htpasswd"), format!("{username}:{hash}\n"))?;
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let address = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\n\
             log:\n  level: info\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n\
             http:\n  addr: {address}\n  secret: wasmgpu-test\n  tls:\n    certificate: {dir}/cert.pem\n    key: {dir}/key.pem\n\
             auth:\n  htpasswd:\n    realm: wasmgpu-test\n    path: {dir}/htpasswd\n",
            data = dir.path().join("data").display(),
            dir = dir.path().display(),
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config)?;
        let log = dir.path().join("registry.log");
        let child = Command::new(&binary)
            .arg("serve")
            .arg(&config_path)
            // No tracing exporter: nothing to send spans to.
            .env("OTEL_TRACES_EXPORTER", "none")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(dir.path().join("registry.err"))?)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let mut registry = Self {
            address,
            ca_pem,
            ca_path,
            username,
            password,
            log,
            child,
            _dir: dir,
        };
        registry.wait_ready(Duration::from_secs(30))?;
        Ok(registry)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("the registry exited ({status}):\n{}", self.log_tail());
            }
            if TcpStream::connect_timeout(
                &self.address.parse().expect("an address"),
                Duration::from_millis(200),
            )
            .is_ok()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the registry did not listen on {} within {timeout:?}:\n{}",
                    self.address,
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `oci://<address>/<repository>:<tag>`.
    pub fn reference(&self, repository: &str, tag: &str) -> String {
        format!("oci://{}/{repository}:{tag}", self.address)
    }

    /// A `.dockerconfigjson` with this registry's user.
    pub fn docker_config(&self) -> String {
        serde_json::json!({
            "auths": { &self.address: { "username": self.username, "password": self.password } }
        })
        .to_string()
    }

    /// The end of the registry's log (both streams).
    pub fn log_tail(&self) -> String {
        let mut text = String::new();
        for file in [self.log.clone(), self.log.with_file_name("registry.err")] {
            let log = std::fs::read_to_string(&file).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            text += &lines[lines.len().saturating_sub(30)..].join("\n");
            text.push('\n');
        }
        text
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA, and a server certificate for 127.0.0.1 and localhost it signed:
/// `(ca, cert, key)` as PEM.
fn certificates() -> Result<(String, String, String)> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "wasmgpu test registry CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut server = CertificateParams::new(vec!["localhost".to_string()])?;
    server
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    server
        .distinguished_name
        .push(DnType::CommonName, "wasmgpu test registry");
    let cert = server.signed_by(&key, &issuer)?;
    Ok((ca_cert.pem(), cert.pem(), key.serialize_pem()))
}
