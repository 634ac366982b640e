//! How the watches stand with the API server: each watch reports through
//! its [`Link`]; `/readyz` asks [`Links::unready`].
//!
//! ```text
//!  watch ──failed──▶ Link: first failure logged at once, then one line per
//!        │                 SUMMARY_EVERY with the count, one when it connects
//!        │           Links: kind → Failing { since, cause }  ──▶ /readyz 503, why
//!        └─listed──▶ Links: kind → Connected                ──▶ /readyz 200 once all are
//! ```
//!
//! A watch retries about once a second while the API server is away: its
//! errors would flood the log, so each watch logs its first failure, then a
//! summary every [`SUMMARY_EVERY`], then one line when it lists again.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::watcher;

use super::metrics::Metrics;

/// How often a watch that keeps failing logs a summary line.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(30);

/// Why a watch failed, as an operator needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchFailure {
    /// 401: the API server refuses the controller's credentials.
    Unauthorized(String),
    /// 403: the controller may not list or watch the kind.
    Forbidden(String),
    /// Anything else: the server unreachable, TLS, a server error; the
    /// error and its sources.
    Failed(String),
}

// === impl WatchFailure ===

impl WatchFailure {
    /// Classifies a watch error.
    pub fn of(error: &watcher::Error) -> Self {
        let status = match error {
            watcher::Error::InitialListFailed(kube::Error::Api(status))
            | watcher::Error::WatchStartFailed(kube::Error::Api(status))
            | watcher::Error::WatchFailed(kube::Error::Api(status))
            | watcher::Error::WatchError(status) => Some(status),
            _ => None,
        };
        match status {
            Some(status) if status.code == 401 => Self::Unauthorized(status.message.clone()),
            Some(status) if status.code == 403 => Self::Forbidden(status.message.clone()),
            _ => Self::Failed(error_chain(error)),
        }
    }

    /// One sentence naming the server, the cause and, where there is one,
    /// the fix.
    pub fn describe(&self, server: &str, kind: &str) -> String {
        match self {
            Self::Unauthorized(message) => format!(
                "the API server at {server} rejects the controller's credentials \
                 (401 Unauthorized: {message}): the token is missing, invalid or expired; \
                 check KUBECONFIG, or the ServiceAccount token mounted in the pod"
            ),
            Self::Forbidden(message) => format!(
                "the API server at {server} forbids the controller to list and watch \
                 {kind} (403 Forbidden: {message}): grant what deploy/rbac/controller.yaml grants"
            ),
            Self::Failed(error) => {
                format!("cannot list or watch {kind} at the API server {server}: {error}")
            }
        }
    }
}

pub use wasmgpu_support::error_chain;

/// Where one watch stands.
#[derive(Clone, Debug)]
enum State {
    /// Started, not listed yet.
    Listing,
    /// Its last list or watch succeeded.
    Connected,
    /// Failing since `since`, last because of `cause`.
    Failing { since: Instant, cause: WatchFailure },
}

/// Every watch's state, by kind.
pub struct Links {
    server: String,
    kind_to_state: Mutex<BTreeMap<&'static str, State>>,
    metrics: Metrics,
}

// === impl Links ===

impl Links {
    /// No watch yet; `server` is the API server's URL, for messages.
    pub fn new(server: impl Into<String>, metrics: Metrics) -> Arc<Self> {
        Arc::new(Self {
            server: server.into().trim_end_matches('/').to_string(),
            kind_to_state: Mutex::new(BTreeMap::new()),
            metrics,
        })
    }

    /// The link of the watch of `kind`, counted as not listed yet. Make
    /// every link before serving `/readyz`.
    pub fn link(self: &Arc<Self>, kind: &'static str) -> Link {
        self.set(kind, State::Listing);
        Link {
            links: Arc::clone(self),
            kind,
            failing: None,
        }
    }

    fn set(&self, kind: &'static str, state: State) {
        self.metrics
            .watch_connected(kind, matches!(state, State::Connected));
        wasmgpu_support::lock(&self.kind_to_state).insert(kind, state);
    }

    /// Why this replica is not ready, one line per watch that is not
    /// connected; `None` when every watch is.
    pub fn unready(&self) -> Option<String> {
        let kind_to_state = wasmgpu_support::lock(&self.kind_to_state);
        let reasons: Vec<String> = kind_to_state
            .iter()
            .filter_map(|(kind, state)| match state {
                State::Connected => None,
                State::Listing => Some(format!(
                    "the {kind} watch has not listed yet (the index is not warm)"
                )),
                State::Failing { since, cause } => Some(format!(
                    "the {kind} watch is not connected (failing for {}s): {}",
                    since.elapsed().as_secs(),
                    cause.describe(&self.server, kind)
                )),
            })
            .collect();
        (!reasons.is_empty()).then(|| reasons.join("\n"))
    }
}

/// What one watch reports: its failures (logged at a bounded rate) and
/// its successful lists.
pub struct Link {
    links: Arc<Links>,
    kind: &'static str,
    failing: Option<Failing>,
}

/// A run of failures, until the next successful list.
struct Failing {
    since: Instant,
    failures: u64,
    /// Failures since the last line logged.
    unlogged: u64,
    logged_at: Instant,
    cause: WatchFailure,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link").field("kind", &self.kind).finish()
    }
}

// === impl Link ===

impl Link {
    /// The watched kind.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The list or watch failed with `error`; it is retried.
    pub fn failed(&mut self, error: &watcher::Error) {
        let cause = WatchFailure::of(error);
        let kind = self.kind;
        let server = &self.links.server;
        let now = Instant::now();
        self.links.metrics.watch_failure(kind);
        match &mut self.failing {
            None => {
                tracing::warn!(
                    kind,
                    %server,
                    error = %cause.describe(server, kind),
                    "Watch failed; retrying within a second"
                );
                self.failing = Some(Failing {
                    since: now,
                    failures: 1,
                    unlogged: 0,
                    logged_at: now,
                    cause: cause.clone(),
                });
            }
            Some(failing) => {
                failing.failures += 1;
                failing.unlogged += 1;
                let changed =
                    std::mem::discriminant(&failing.cause) != std::mem::discriminant(&cause);
                if changed || now.duration_since(failing.logged_at) >= SUMMARY_EVERY {
                    tracing::warn!(
                        kind,
                        %server,
                        error = %cause.describe(server, kind),
                        failing_for = ?now.duration_since(failing.since),
                        failures_since_last_line = failing.unlogged,
                        "Watch still failing"
                    );
                    failing.unlogged = 0;
                    failing.logged_at = now;
                }
                failing.cause = cause.clone();
            }
        }
        let since = self.failing.as_ref().map_or(now, |f| f.since);
        self.links.set(kind, State::Failing { since, cause });
    }

    /// A list succeeded: the watch is connected.
    pub fn connected(&mut self) {
        if let Some(failing) = self.failing.take() {
            tracing::info!(
                kind = self.kind,
                server = %self.links.server,
                after = ?failing.since.elapsed(),
                failures = failing.failures,
                "Watch connected again"
            );
        }
        self.links.set(self.kind, State::Connected);
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn api_error(code: u16, message: &str) -> watcher::Error {
        let status = Status::failure(message, "").with_code(code);
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn names_the_server_and_the_fix_of_bad_credentials() {
        let cause = WatchFailure::of(&api_error(401, "Unauthorized"));
        assert_eq!(cause, WatchFailure::Unauthorized("Unauthorized".into()));
        let text = cause.describe("https://api:6443", "Pod");
        assert!(text.contains("https://api:6443"), "{text}");
        assert!(text.contains("401 Unauthorized"), "{text}");
        let text =
            WatchFailure::of(&api_error(403, "pods is forbidden")).describe("https://api", "Pod");
        assert!(text.contains("403 Forbidden: pods is forbidden"), "{text}");
        assert!(text.contains("deploy/rbac/controller.yaml"), "{text}");
    }

    #[test]
    fn a_failure_keeps_the_causes_of_its_sources() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = watcher::Error::InitialListFailed(kube::Error::Service(Box::new(refused)));
        let WatchFailure::Failed(text) = WatchFailure::of(&error) else {
            panic!("not a failure: {:?}", WatchFailure::of(&error));
        };
        assert!(text.ends_with("ServiceError: refused"), "{text}");
    }

    #[test]
    fn ready_only_once_every_watch_listed_and_not_after_a_failure() {
        let links = Links::new("https://api:6443/", Metrics::new());
        let mut pods = links.link("Pod");
        let mut nodes = links.link("Node");
        assert!(
            links
                .unready()
                .expect("unready")
                .contains("Pod watch has not listed")
        );
        pods.connected();
        nodes.connected();
        assert_eq!(links.unready(), None);
        pods.failed(&api_error(401, "Unauthorized"));
        let why = links.unready().expect("unready");
        assert!(why.contains("the Pod watch is not connected"), "{why}");
        assert!(why.contains("https://api:6443 rejects"), "{why}");
        assert!(!why.contains("Node"), "{why}");
        pods.connected();
        assert_eq!(links.unready(), None);
    }
}
