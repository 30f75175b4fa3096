//! The settings tables of the docs, generated from the declarations so that they cannot go
//! stale.

use super::setting::Setting;

/// The Markdown table of `settings` that the docs hold (`docs/configuration-file.md`,
/// `docs/configuration.md`), generated here so that it cannot go stale: one row per setting
/// with its kind, default, readers (each linked to its page, relative to `docs/`) and doc line.
pub fn markdown_table<'a>(settings: impl IntoIterator<Item = &'a Setting>) -> String {
    let mut out = String::from(
        "| Setting | Kind | Default | Read by | What it does |\n|---|---|---|---|---|\n",
    );
    for s in settings {
        let default = match s.default {
            Some(d) => format!("`{d}`"),
            None => "unset".to_owned(),
        };
        let readers: Vec<String> = s
            .readers
            .iter()
            .map(|r| format!("[{}]({})", r.name(), r.page()))
            .collect();
        out.push_str(&format!(
            "| `{}` | {} | {default} | {} | {} |\n",
            s.name,
            s.kind.name(),
            readers.join(", "),
            s.doc
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{BUFFER_SIZE, DIR};

    #[test]
    fn a_row_gives_the_kind_the_default_the_linked_readers_and_the_doc() {
        let table = markdown_table([&BUFFER_SIZE, &DIR]);
        assert_eq!(
            table.lines().nth(2),
            Some(
                "| `NIXL_TELEMETRY_BUFFER_SIZE` | unsigned | `4096` | \
                 [core](configuration.md#the-cores-variables) | \
                 Staging capacity of each collector (one budget its producer threads share) and \
                 ring size, in events (1..16777216). |"
            )
        );
        assert!(table.lines().nth(3).unwrap().contains("| unset |"));
    }
}
