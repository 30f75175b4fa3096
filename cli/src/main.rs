//! `nixl-telemetry`: read NIXL telemetry rings, summarise them, and run a demo agent.

mod demo;
mod fpm;
mod output;
mod read;
mod serve;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use output::Format;

/// Read and summarise NIXL telemetry ring files.
#[derive(Parser, Debug)]
#[command(name = "nixl-telemetry", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the events of a ring file (consuming them, as every ring reader does).
    Read {
        /// The ring file (NIXL_TELEMETRY_DIR/<agent name>).
        path: PathBuf,
        /// Keep polling for new events every 500 ms until Ctrl+C (default: drain and exit).
        #[arg(long)]
        follow: bool,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// Only print events whose name matches this glob (repeatable).
        #[arg(long = "filter", value_name = "GLOB")]
        filters: Vec<String>,
    },
    /// Drain a ring file and print per-event counts, sums and derived views.
    Stats {
        /// The ring file.
        path: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run a simulated multi-threaded agent writing into a ring while reading it live.
    Demo(demo::DemoArgs),
    /// Read forward-pass-metrics trace segments (gzip JSONL): `cat` or `summary`.
    Fpm(fpm::FpmArgs),
    /// Serve every live prometheus_mp store of a directory at GET /metrics (a node sidecar).
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Read {
            path,
            follow,
            format,
            filters,
        } => read::run(&path, follow, format, &filters),
        Command::Stats { path, json } => stats::run(&path, json),
        Command::Demo(args) => demo::run(&args),
        Command::Fpm(args) => return fpm::run(&args),
        Command::Serve(args) => serve::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nixl-telemetry: error: {e}");
            ExitCode::FAILURE
        }
    }
}
