//! `--filter GLOB`: which events `read` prints and `stats` counts. Checked before any ring is
//! opened, so a typo is a usage error (exit status 2) that consumes nothing.

use nixl_telemetry_core::filter::fnmatch;
use nixl_telemetry_core::EventType;

use crate::output::CliError;

/// The validated `--filter` globs (none: every event).
#[derive(Clone, Debug, Default)]
pub struct EventFilter {
    globs: Vec<String>,
}

impl EventFilter {
    /// Validates `globs`: each must be a well-formed POSIX glob matching at least one of the 22
    /// event names (which are lower case).
    pub fn new(globs: &[String]) -> Result<EventFilter, CliError> {
        for glob in globs {
            if let Some(why) = malformed(glob) {
                return Err(CliError::Usage(format!(
                    "--filter '{glob}' is not a valid glob: {why}"
                )));
            }
            if !EventType::ALL.iter().any(|t| fnmatch(glob, t.name())) {
                return Err(CliError::Usage(format!(
                    "--filter '{glob}' matches none of the {} event names ({}); names are lower \
                     case, and a glob uses *, ? and [...]",
                    EventType::ALL.len(),
                    EventType::ALL.map(EventType::name).join(", ")
                )));
            }
        }
        Ok(EventFilter {
            globs: globs.to_vec(),
        })
    }

    /// Whether an event named `name` passes.
    pub fn matches(&self, name: &str) -> bool {
        self.globs.is_empty() || self.globs.iter().any(|g| fnmatch(g, name))
    }
}

/// Why `glob` is not a well-formed POSIX glob: an unterminated bracket expression or a
/// trailing backslash (fnmatch would silently treat both as literal characters).
fn malformed(glob: &str) -> Option<&'static str> {
    if glob.is_empty() {
        return Some("it is empty");
    }
    let bytes = glob.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if i + 1 == bytes.len() => return Some("it ends with a backslash"),
            b'\\' => i += 2,
            b'[' => {
                // `[`, an optional `!`, then a `]` that is a member when it comes first.
                let mut j = i + 1;
                if j < bytes.len() && bytes[j] == b'!' {
                    j += 1;
                }
                if j < bytes.len() && bytes[j] == b']' {
                    j += 1;
                }
                match bytes[j..].iter().position(|&b| b == b']') {
                    Some(k) => i = j + k + 1,
                    None => return Some("'[' starts a bracket expression that is never closed"),
                }
            }
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(globs: &[&str]) -> String {
        let globs: Vec<String> = globs.iter().map(|g| g.to_string()).collect();
        match EventFilter::new(&globs) {
            Err(CliError::Usage(m)) => m,
            other => panic!("{globs:?}: {other:?}"),
        }
    }

    #[test]
    fn typos_bad_globs_and_wrong_case_are_usage_errors() {
        assert!(usage(&["agent_tx_byte"]).contains("matches none of the 22 event names"));
        assert!(usage(&["AGENT_ERR_*"]).contains("lower case"));
        assert!(usage(&["["]).contains("never closed"));
        assert!(usage(&["agent_[tx_bytes"]).contains("never closed"));
        assert!(usage(&[""]).contains("empty"));
        assert!(usage(&["agent_*\\"]).contains("backslash"));
        assert!(usage(&["agent_err_*", "nope"]).contains("'nope'"));
    }

    #[test]
    fn good_globs_select_events() {
        let f = EventFilter::new(&["agent_err_*".into(), "agent_[tr]x_bytes".into()]).unwrap();
        assert!(f.matches("agent_err_backend") && f.matches("agent_rx_bytes"));
        assert!(!f.matches("agent_xfer_time"));
        assert!(
            EventFilter::new(&["agent_[]x]fer_*".into()]).is_ok(),
            "a leading ] is a member"
        );
        assert!(
            EventFilter::new(&["agent_[]]*".into()]).is_err(),
            "matches nothing"
        );
        assert!(EventFilter::default().matches("anything"));
    }
}
