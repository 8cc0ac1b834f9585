//! The `tierdb` command: parses the command line, sets up logging, calls the library
//! ([`tierdb::cli`]). Errors print as one line on stderr with exit code 1; a usage error
//! exits 2 (clap's own).

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tierdb::cli::{run, Cli};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: piped or redirected logs stay plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tierdb: {e}");
            ExitCode::FAILURE
        }
    }
}
