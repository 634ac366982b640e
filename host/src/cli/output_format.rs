//! The `--output` flag of commands that print a result.

use clap::ValueEnum;

/// How a command prints its result.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub(crate) enum Output {
    /// Human-readable text.
    #[default]
    Table,
    /// Machine-readable JSON.
    Json,
}
