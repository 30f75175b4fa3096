//! The CLI guide (`docs/guide/cli.md`) names every subcommand that `nixl-telemetry --help`
//! lists, in its opening list of subcommands.

use std::process::Command;

/// The subcommands of `nixl-telemetry --help` (its `Commands:` section), `help` left out.
fn subcommands() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_nixl-telemetry"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let (_, commands) = help.split_once("Commands:\n").expect("a Commands: section");
    commands
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_guide_lists_every_subcommand() {
    let commands = subcommands();
    assert!(commands.len() >= 7, "{commands:?}");
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guide/cli.md"),
    )
    .unwrap();
    let (opening, _) = guide.split_once("\n## ").unwrap();
    let missing: Vec<&String> = commands
        .iter()
        .filter(|c| !opening.contains(&format!("`{c}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/guide/cli.md's list of subcommands lacks {missing:?}"
    );
}
