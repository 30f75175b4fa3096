//! The per-metric allowlist (`NIXL_TELEMETRY_ENABLED_METRICS`): POSIX `fnmatch` globs over the
//! 22 base event names, resolved once into a bit mask that the hot path tests with one load.

use std::ffi::CString;

use crate::event::{EventType, EVENT_TYPE_COUNT};

/// A set of enabled event types, one bit per type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricMask(u32);

impl MetricMask {
    /// Every event type enabled.
    pub const ALL: MetricMask = MetricMask((1 << EVENT_TYPE_COUNT) - 1);
    /// No event type enabled.
    pub const NONE: MetricMask = MetricMask(0);

    /// The raw bits (bit `n` = event type `n`).
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether events of type `t` are recorded.
    #[inline]
    pub const fn contains(self, t: EventType) -> bool {
        self.0 & t.bit() != 0
    }

    /// Whether the numeric event type `raw` is known and enabled.
    #[inline]
    pub const fn contains_raw(self, raw: u32) -> bool {
        raw < EVENT_TYPE_COUNT as u32 && self.0 & (1 << raw) != 0
    }

    /// Resolves a comma-separated allowlist. Tokens are trimmed and de-duplicated; no token at
    /// all (unset, empty, only commas and spaces) enables everything. Each token that matches no
    /// event name is ignored with one warning.
    pub fn from_allowlist(list: &str) -> MetricMask {
        let (mask, unmatched) = MetricMask::resolve(list);
        for token in unmatched {
            log::warn!(
                "Ignoring NIXL_TELEMETRY_ENABLED_METRICS entry '{token}': no telemetry metric \
                 matches"
            );
        }
        log::debug!(
            "telemetry metrics enabled: {}",
            EventType::ALL
                .iter()
                .filter(|t| mask.contains(**t))
                .map(|t| t.name())
                .collect::<Vec<_>>()
                .join(",")
        );
        mask
    }

    /// The mask for `list` and the tokens that matched nothing, without logging.
    pub fn resolve(list: &str) -> (MetricMask, Vec<String>) {
        let mut tokens: Vec<&str> = Vec::new();
        for t in list
            .split(',')
            .map(|t| t.trim_matches(|c: char| c.is_ascii_whitespace()))
        {
            if !t.is_empty() && !tokens.contains(&t) {
                tokens.push(t);
            }
        }
        if tokens.is_empty() {
            return (MetricMask::ALL, Vec::new());
        }
        let mut mask = 0u32;
        let mut unmatched = Vec::new();
        for token in tokens {
            let hits = EventType::ALL
                .iter()
                .filter(|t| fnmatch(token, t.name()))
                .fold(0u32, |m, t| m | t.bit());
            if hits == 0 {
                unmatched.push(token.to_owned());
            }
            mask |= hits;
        }
        (MetricMask(mask), unmatched)
    }
}

/// POSIX `fnmatch(pattern, name, 0)`, from the C library so the semantics are exact.
pub fn fnmatch(pattern: &str, name: &str) -> bool {
    let (Ok(p), Ok(n)) = (CString::new(pattern), CString::new(name)) else {
        return false;
    };
    // SAFETY: both arguments are valid NUL-terminated strings that outlive the call.
    unsafe { libc::fnmatch(p.as_ptr(), n.as_ptr(), 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_lists_enable_everything() {
        for list in ["", " ", ",", " , ,"] {
            assert_eq!(MetricMask::resolve(list), (MetricMask::ALL, vec![]));
        }
        assert_eq!(MetricMask::ALL.bits().count_ones(), 22);
    }

    #[test]
    fn globs_are_posix_fnmatch() {
        let (m, un) = MetricMask::resolve("agent_err_*,agent_?x_bytes");
        assert!(un.is_empty());
        let names: Vec<&str> = EventType::ALL
            .iter()
            .filter(|t| m.contains(**t))
            .map(|t| t.name())
            .collect();
        assert_eq!(names.len(), 15);
        assert!(names.contains(&"agent_tx_bytes") && names.contains(&"agent_rx_bytes"));
        assert!(names
            .iter()
            .all(|n| n.starts_with("agent_err_") || n.ends_with("x_bytes")));
        let (m, _) = MetricMask::resolve("agent_[tr]x_requests_num");
        assert!(
            m.contains(EventType::AgentTxRequestsNum) && m.contains(EventType::AgentRxRequestsNum)
        );
        assert_eq!(m.bits().count_ones(), 2);
    }

    #[test]
    fn series_names_and_case_do_not_match() {
        let (m, un) = MetricMask::resolve("agent_tx_bytes_total, AGENT_TX_BYTES, agent_tx_bytes");
        assert_eq!(m, MetricMask(EventType::AgentTxBytes.bit()));
        assert_eq!(un, vec!["agent_tx_bytes_total", "AGENT_TX_BYTES"]);
    }

    #[test]
    fn unmatched_only_means_nothing_enabled() {
        let (m, un) = MetricMask::resolve("nothing,nothing");
        assert_eq!(m, MetricMask::NONE);
        assert_eq!(un, vec!["nothing"]);
    }

    #[test]
    fn raw_lookup_rejects_unknown_types() {
        assert!(MetricMask::ALL.contains_raw(21));
        assert!(!MetricMask::ALL.contains_raw(22));
        assert!(!MetricMask::ALL.contains_raw(u32::MAX));
    }
}
