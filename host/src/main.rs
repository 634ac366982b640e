use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = wasmgpu::cli::Cli::parse();
    match cli.run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
