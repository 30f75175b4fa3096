//! `nixl-telemetry`: read NIXL telemetry rings, summarise them, and run a demo agent. The
//! command is this library's [`main`] (`src/main.rs` only calls it), so that its documentation
//! is this crate's own, apart from the C ABI crate's library of the same name.

mod config;
mod demo;
mod filter;
mod fpm;
mod output;
mod push;
mod read;
mod rings;
mod scrape;
mod serve;
mod serve_health;
mod sketch;
mod stats;
mod stdout;
mod top;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Read, summarise and watch NIXL telemetry: rings, scrape endpoints and trace segments.
#[derive(Parser, Debug)]
#[command(name = "nixl-telemetry", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the events of rings: consuming them, as NIXL's readers do, or with --peek
    /// leaving them for another reader.
    Read(read::ReadArgs),
    /// Per-agent counts, sums, last values and p50/p99 of rings (peeked: nothing is consumed)
    /// and TRACE segments, with a node total.
    Stats(stats::StatsArgs),
    /// A live view of agents (rates, latency percentiles, errors, drops), refreshed in place
    /// from rings or scrape URLs; q or Ctrl+C quits.
    Top(top::TopArgs),
    /// Run a simulated multi-threaded agent (writing a ring, or serving the Prometheus
    /// endpoint) and show its live summary, then the loss accounting.
    Demo(demo::DemoArgs),
    /// Read forward-pass-metrics trace segments (gzip JSONL): `cat` or `summary`.
    Fpm(fpm::FpmArgs),
    /// Serve every live prometheus_mp store of a directory at GET /metrics (a node sidecar).
    Serve(Box<serve::ServeArgs>),
    /// Print the telemetry settings a collector would get here and where each came from
    /// (environment, NIXL's configuration file, default); --check validates them.
    Config(config::ConfigArgs),
}

/// Runs the command line of this process and returns its exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Read(args) => read::run(&args),
        Command::Stats(args) => stats::run(&args),
        Command::Top(args) => top::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Fpm(args) => return fpm::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Config(args) => config::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let (status, report) = output::exit_status(&e);
            if report {
                eprintln!("nixl-telemetry: error: {e}");
            }
            ExitCode::from(status)
        }
    }
}
