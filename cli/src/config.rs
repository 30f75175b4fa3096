//! `nixl-telemetry config [--json | --check]`: the telemetry settings a collector created in
//! this environment would get, each with where its value came from (the environment, NIXL's
//! configuration file, or the default), like `git config --show-origin`; `--check` validates
//! them as a collector's creation would, without creating anything.

use std::io::Write;

use nixl_telemetry_base::settings::{self, Effective};
use nixl_telemetry_core::config::Options;
use nixl_telemetry_core::ExporterChoice;
use serde_json::json;

use crate::output::CliResult;

/// `config`'s options.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Sources, highest first: the environment, NIXL's configuration file ($NIXL_CONFIG_FILE, else \
~/.nixl.cfg, else /etc/nixl.cfg: the first that exists), the default. An empty NIXL_TELEMETRY_* \
variable counts as unset. The options struct of nixl_telemetry_create_with_options, when a \
program uses it, wins over all of them.

--check exits with status 1 and the error a collector's creation would give when the \
configuration file cannot be read, a value has the wrong type (checked for every setting, \
including those only an exporter that is not chosen reads), or the core settings and the \
exporter choice (with the TRACE exporter's settings) are invalid; and when the file has a \
NIXL_TELEMETRY_* key that is no setting (a typo: the closest name is suggested) or a DYN_FPM_* \
key (Dynamo's variables come from the environment only), which creation only warns about. \
Without --check, values of the wrong type are marked in the listing (# ERROR) and the command \
exits with status 1; such keys are listed as # warning lines. It creates no file and binds \
no port, so the values only a plug-in checks when it starts (port ranges, histogram bounds) and \
whether the plug-in loads are not checked.")]
pub struct ConfigArgs {
    /// Print one JSON document: {"file": path or null, "settings": [{"name", "kind", "value",
    /// "origin", "reader", "doc", "error"}], "unknown_keys": \[messages\]}.
    #[arg(long, conflicts_with = "check")]
    json: bool,
    /// Print, above each setting, a comment line saying what it does and who reads it.
    #[arg(long, conflicts_with_all = ["check", "json"])]
    doc: bool,
    /// Validate the configuration instead of printing it: exit status 1 with the error a
    /// collector's creation would give.
    #[arg(long)]
    check: bool,
}

/// Runs `config`.
pub fn run(args: &ConfigArgs) -> CliResult {
    let options = Options::default();
    let mut out = std::io::stdout().lock();
    if args.check {
        let config = options.check()?;
        let exporter = match &config.exporter {
            ExporterChoice::Buffer(dir, layout) => {
                format!("BUFFER (rings of {layout} in {})", dir.display())
            }
            ExporterChoice::Nop => "NOP".to_owned(),
            ExporterChoice::Plugin(name) => format!("the plug-in {name}"),
            ExporterChoice::Trace(trace) => format!("TRACE (prefix {})", trace.path.display()),
        };
        writeln!(
            out,
            "ok: a collector would use {exporter}, {} events, a flush every {} ms",
            config.buffer_size,
            config.run_interval.as_millis()
        )?;
        return Ok(());
    }
    let effective = options.effective_all()?;
    let file = settings::config_file_path()?;
    let unknown = settings::unknown_file_keys()?;
    // Every faulty entry is shown in place; the command then fails with all of them.
    let problems: Vec<&str> = effective
        .iter()
        .filter_map(|e| e.problem.as_deref())
        .collect();
    let outcome = if problems.is_empty() {
        Ok(())
    } else {
        Err(nixl_telemetry_core::Error::invalid(problems.join("\n")).into())
    };
    if args.json {
        let rows: Vec<_> = effective
            .iter()
            .map(|e| {
                json!({
                    "name": e.setting.name,
                    "kind": e.setting.kind.name(),
                    "value": e.value,
                    "origin": e.origin.to_string(),
                    "reader": e.setting.readers_text(),
                    "doc": e.setting.doc,
                    "error": e.problem,
                })
            })
            .collect();
        let doc = json!({ "file": file, "settings": rows, "unknown_keys": unknown });
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        )?;
        return outcome;
    }
    match &file {
        Some(path) => writeln!(out, "# configuration file: {}", path.display())?,
        None => writeln!(
            out,
            "# configuration file: none ({} unset, no ~/{}, no {})",
            settings::file::CONFIG_FILE_VAR,
            settings::file::HOME_FILE_NAME,
            settings::file::SYSTEM_PATH
        )?,
    }
    for message in &unknown {
        writeln!(out, "# warning: {message}")?;
    }
    let width = effective
        .iter()
        .map(|e| e.origin.to_string().len())
        .max()
        .unwrap_or(0);
    for e in &effective {
        if args.doc {
            writeln!(out, "# {} ({})", e.setting.doc, e.setting.readers_text())?;
        }
        match &e.problem {
            None => writeln!(out, "{:<width$}  {}", e.origin.to_string(), assignment(e))?,
            Some(problem) => writeln!(
                out,
                "{:<width$}  {}  # ERROR: {problem}",
                e.origin.to_string(),
                assignment(e)
            )?,
        }
    }
    outcome
}

/// `NAME=value`, or `NAME (unset)`.
fn assignment(e: &Effective) -> String {
    match &e.value {
        Some(v) => format!("{}={v}", e.setting.name),
        None => format!("{} (unset)", e.setting.name),
    }
}
