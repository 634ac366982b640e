use std::io::Write;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = wasmgpu::cli::Cli::parse();
    match cli.run() {
        Ok(code) => code,
        Err(error) => {
            // A closed standard error is no reason to panic either.
            let _ = writeln!(std::io::stderr(), "error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
