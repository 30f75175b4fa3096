//! The Grafana dashboard against Prometheus 3.16 (built from `test-deps/go/prometheus` by
//! scripts/install-test-deps.sh), with the same checks and exact numbers as against 2.42
//! (`grafana.rs`): every expression parses under promtool 3.16, and every panel query returns
//! the simulated ranks' totals from servers scraping them without and with node totals, and
//! from one with `scrape_native_histograms: true` (3.9 and later). Without the Go-built programs
//! these tests fail saying how to build them, unless `NIXL_TELEMETRY_SKIP_GO_RECEIVERS=1`.

mod common;
mod dashboard_checks;
mod ranks;

use nixl_telemetry_test_support::receivers::prometheus3::{self, Options};
use nixl_telemetry_test_support::receivers::{scratch, skipped, GoProgram, QueryServer};

#[test]
fn every_dashboard_expression_parses_under_promtool3() {
    if skipped() {
        return;
    }
    dashboard_checks::every_expression_parses(&GoProgram::Promtool.path());
}

/// A Prometheus 3.16 in a directory of its own under `work`, named `name`, scraping `target`,
/// with `scrape_native_histograms` as `native` says.
fn server(work: &std::path::Path, name: &str, target: u16, native: bool) -> QueryServer {
    let dir = work.join(name);
    std::fs::create_dir(&dir).unwrap();
    prometheus3::start(
        &dir,
        &Options {
            targets: &[target],
            native,
            ..Options::default()
        },
    )
}

#[test]
fn every_panel_on_prometheus3_returns_the_ranks_totals_with_and_without_node_totals() {
    let Some(work) = scratch() else { return };
    let ranks = ranks::Ranks::start(work.path());
    let plain = server(work.path(), "plain", ranks.plain_port, false);
    let summed = server(work.path(), "summed", ranks.summed_port, false);
    dashboard_checks::every_panel_gives_the_ranks_totals(&plain, &summed);
    let native = server(work.path(), "native", ranks.summed_port, true);
    dashboard_checks::every_panel_gives_the_ranks_native_histograms(&native);
}

#[test]
fn per_rank_panels_on_prometheus3_show_a_process_without_a_pid() {
    let Some(work) = scratch() else { return };
    let _s = common::serial();
    dashboard_checks::per_rank_panels_show_a_process_without_a_pid(|port| {
        prometheus3::start(
            work.path(),
            &Options {
                targets: &[port],
                ..Options::default()
            },
        )
    });
}
