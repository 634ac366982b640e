//! Typed policy errors.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The wasmtime error behind a [`PolicyError`], kept whole (not as text):
/// [`Cause::error`] gives it back for downcasting, and `Display` shows its
/// whole context chain (`outer: inner: root`). Equality compares that text,
/// so `PolicyError` stays comparable in tests.
#[derive(Clone)]
pub struct Cause(Arc<wasmtime::Error>);

impl Cause {
    /// Keeps `error`.
    pub fn new(error: wasmtime::Error) -> Self {
        Cause(Arc::new(error))
    }

    /// A cause that is only a message (no wasmtime error behind it).
    pub fn msg(message: impl fmt::Display + fmt::Debug + Send + Sync + 'static) -> Self {
        Cause::new(wasmtime::Error::msg(message))
    }

    /// The wasmtime error.
    pub fn error(&self) -> &wasmtime::Error {
        &self.0
    }

    /// Whether any error of the chain says `text`.
    pub fn contains(&self, text: &str) -> bool {
        self.to_string().contains(text)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cause({:#})", self.0)
    }
}

impl std::error::Error for Cause {}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

/// Why loading or running a policy failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum PolicyError {
    /// The bytes are not WebAssembly at all.
    #[error("not a WebAssembly binary ({0})")]
    NotWasm(String),
    /// A core module where a component is needed.
    #[error(
        "a core WebAssembly module, not a component: build the policy with `--target wasm32-wasip2` \
         (or wrap a core module with `wasm-tools component new`)"
    )]
    CoreModule,
    /// The component does not compile.
    #[error("the component does not compile: {0}")]
    Compile(#[source] Cause),
    /// The component does not implement the `wasmgpu:policy` world: an export
    /// is missing or has another type, or it imports something the sandbox
    /// does not provide.
    #[error("not a {contract} component: {0}", contract = wasmgpu_contract::CONTRACT)]
    WrongWorld(#[source] Cause),
    /// The component was built for another version of the contract.
    #[error(
        "the component implements wasmgpu:policy@{found}, this controller speaks {expected}: rebuild the policy against wit/policy.wit of this version (the SDK's version follows the contract)"
    )]
    WrongContract {
        /// The version the component was built for.
        found: String,
        /// The version this host implements.
        expected: &'static str,
    },
    /// The policy trapped (a panic, `unreachable`, a stack overflow, …).
    #[error("the policy trapped: {message}{}", log_suffix(.log_tail))]
    Trap {
        /// The trap, as wasmtime describes it.
        message: String,
        /// The policy's last log lines before the trap (often its panic reason).
        log_tail: Vec<String>,
    },
    /// The policy used all its fuel.
    #[error("the policy ran out of fuel after {fuel} units (limit)")]
    OutOfFuel {
        /// The fuel it was given.
        fuel: u64,
    },
    /// The policy ran past its wall-clock deadline.
    #[error("the policy ran past its deadline of {deadline:?}")]
    Deadline {
        /// The deadline it was given.
        deadline: Duration,
    },
    /// The policy tried to grow its memory (or a table) past the limit.
    #[error("the policy exceeded its memory limit: {0}")]
    MemoryLimit(String),
    /// The policy returned something the host cannot use as a whole.
    #[error("the policy returned invalid output: {0}")]
    InvalidOutput(String),
    /// The engine itself failed (e.g. no free instance slot).
    #[error("policy engine error: {0}")]
    Engine(#[source] Cause),
}

fn log_suffix(log_tail: &[String]) -> String {
    if log_tail.is_empty() {
        String::new()
    } else {
        format!(" (policy log: {})", log_tail.join(" | "))
    }
}

impl PolicyError {
    /// A short, stable label for metrics and events.
    pub fn kind(&self) -> &'static str {
        match self {
            PolicyError::NotWasm(_) => "not-wasm",
            PolicyError::CoreModule => "core-module",
            PolicyError::Compile(_) => "compile",
            PolicyError::WrongWorld(_) => "wrong-world",
            PolicyError::WrongContract { .. } => "wrong-contract",
            PolicyError::Trap { .. } => "trap",
            PolicyError::OutOfFuel { .. } => "out-of-fuel",
            PolicyError::Deadline { .. } => "deadline",
            PolicyError::MemoryLimit(_) => "memory-limit",
            PolicyError::InvalidOutput(_) => "invalid-output",
            PolicyError::Engine(_) => "engine",
        }
    }
}

/// `Result` with [`PolicyError`].
pub type Result<T, E = PolicyError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_keeps_the_wasmtime_error_and_shows_its_chain() {
        let error = wasmtime::Error::msg("root").context("outer");
        let policy_error = PolicyError::Compile(Cause::new(error));
        assert_eq!(
            policy_error.to_string(),
            "the component does not compile: outer: root"
        );
        let source = std::error::Error::source(&policy_error).expect("a typed source");
        assert_eq!(source.to_string(), "outer: root");
        let PolicyError::Compile(cause) = &policy_error else {
            unreachable!()
        };
        assert_eq!(cause.error().root_cause().to_string(), "root");
        assert_eq!(policy_error.clone(), policy_error);
    }
}
