//! When each scraper will come next. A scraper scrapes at a fixed interval (Prometheus keeps
//! each target's scrapes at the same offset within its interval), so after a few of its
//! requests the next one can be foreseen, and an endpoint whose pages can be made ahead
//! ([`super::server::Pages::prepare`]) makes the page a moment before it is asked for: the
//! scrape is then answered from memory, and costs the endpoint nothing more than before (one
//! page made per scrape, earlier).
//!
//! Scrapers are told apart by their address (two Prometheus servers of an HA pair scrape at
//! their own offsets); [`MAX_PEERS`] are followed, the least recent forgotten first. A
//! scraper's cadence is steady when all its last [`HISTORY`]` - 1` intervals but one at most
//! (4 of 5) are within an eighth of their median, a late scrape followed by one back on
//! schedule counting as none (so one late scrape, on a loaded machine, does not stop the
//! foresight); its next scrape is foreseen one median interval after its last, or
//! two after the one before if that is sooner (a scraper on a fixed schedule comes back to it
//! after a late scrape). Anything else (a person with `curl`, two scrapers behind one address)
//! is foreseen never, and answered as it comes, as before. A scraper that came earlier than
//! foreseen lately (its own machine loaded) gets its page made earlier by as much: the lead is
//! the endpoint's own ([`Cadences::next`]'s `lead`) plus the most it came early over its last
//! [`HISTORY`] foreseen scrapes, at most [`MAX_LEAD`].

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::http::Format;

/// Requests of one scraper remembered to judge its cadence: 5 intervals.
pub const HISTORY: usize = 6;

/// Scrapers (addresses) followed at once.
pub const MAX_PEERS: usize = 8;

/// The longest lead: a page is never made further ahead of its scrape (the more ahead, the
/// likelier a rank's flush comes between; and a page made ahead is trusted for a short while
/// only).
pub const MAX_LEAD: Duration = Duration::from_millis(5);

/// The shortest interval foreseen: below it a preparation would take a good part of the
/// interval, and a client that fast is not a scraper.
pub const MIN_INTERVAL: Duration = Duration::from_millis(4);

/// One scraper's last requests.
#[derive(Debug)]
struct Peer {
    addr: IpAddr,
    arrivals: VecDeque<Instant>,
    /// The format of its last request: what to prepare for it.
    format: Format,
    /// The foreseen request a page was prepared for (one preparation per request).
    prepared_for: Option<Instant>,
    /// How much earlier than foreseen its last requests came (none when on time or late).
    early: VecDeque<Duration>,
}

impl Peer {
    /// Its next request and its interval, when its cadence is steady.
    fn foreseen(&self) -> Option<(Instant, Duration)> {
        if self.arrivals.len() < HISTORY {
            return None;
        }
        let intervals: Vec<Duration> = self
            .arrivals
            .iter()
            .zip(self.arrivals.iter().skip(1))
            .map(|(a, b)| b.saturating_duration_since(*a))
            .collect();
        let mut sorted = intervals.clone();
        sorted.sort();
        let median = sorted[sorted.len() / 2];
        let near = |i: Duration, of: Duration| i.abs_diff(of) <= tolerance(median);
        // Intervals off the median, but for a late scrape followed by one back on schedule
        // (two intervals off that together make two).
        let mut off = 0;
        let mut k = 0;
        while k < intervals.len() {
            if near(intervals[k], median) {
                k += 1;
            } else if k + 1 < intervals.len()
                && !near(intervals[k + 1], median)
                && near(intervals[k] + intervals[k + 1], median * 2)
            {
                k += 2;
            } else {
                off += 1;
                k += 1;
            }
        }
        // One median interval after the last scrape, or two after the one before when that is
        // sooner: after a late scrape, a scraper on a fixed schedule (Prometheus) comes back
        // to it.
        let last = *self.arrivals.back()?;
        let before_last = self.arrivals[self.arrivals.len() - 2];
        let foreseen = (last + median).min(before_last + median * 2);
        (off <= 1 && median >= MIN_INTERVAL).then_some((foreseen, median))
    }
}

/// How far a steady scraper's intervals stray from their median: an eighth of it.
fn tolerance(interval: Duration) -> Duration {
    interval / 8
}

/// A preparation due: when, in which format, and for which foreseen request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preparation {
    /// When to make the page.
    pub at: Instant,
    /// The format the scraper asked for last.
    pub format: Format,
    /// The request it is for ([`Cadences::prepared`] marks it done).
    pub foreseen: Instant,
    peer: IpAddr,
}

/// The scrapers of one endpoint and their cadences.
#[derive(Debug, Default)]
pub struct Cadences {
    peers: Vec<Peer>,
}

impl Cadences {
    /// Notes a scrape from `addr` at `at`, asking for `format`.
    pub fn record(&mut self, addr: IpAddr, at: Instant, format: Format) {
        let i = match self.peers.iter().position(|p| p.addr == addr) {
            Some(i) => i,
            None => {
                if self.peers.len() == MAX_PEERS {
                    let least_recent = (0..self.peers.len())
                        .min_by_key(|&i| self.peers[i].arrivals.back().copied())
                        .unwrap_or(0);
                    self.peers.swap_remove(least_recent);
                }
                self.peers.push(Peer {
                    addr,
                    arrivals: VecDeque::with_capacity(HISTORY),
                    format,
                    prepared_for: None,
                    early: VecDeque::with_capacity(HISTORY),
                });
                self.peers.len() - 1
            }
        };
        let peer = &mut self.peers[i];
        if let Some((foreseen, _)) = peer.foreseen() {
            if peer.early.len() == HISTORY {
                peer.early.pop_front();
            }
            peer.early.push_back(foreseen.saturating_duration_since(at));
        }
        if peer.arrivals.len() == HISTORY {
            peer.arrivals.pop_front();
        }
        peer.arrivals.push_back(at);
        peer.format = format;
    }

    /// The earliest preparation not made yet, `lead` (and as much as the scraper came early
    /// lately; at most [`MAX_LEAD`] in all) before a foreseen request; one already due is
    /// returned with its time passed. A scraper whose interval is shorter than four times that
    /// lead, or that is late by more than an eighth of its interval at `now` (it stopped), gets
    /// none.
    pub fn next(&self, now: Instant, lead: Duration) -> Option<Preparation> {
        self.peers
            .iter()
            .filter_map(|p| {
                let (foreseen, interval) = p.foreseen()?;
                let early = p.early.iter().max().copied().unwrap_or_default();
                let lead = (lead + early).min(MAX_LEAD);
                let at = foreseen.checked_sub(lead)?;
                let useful = lead * 4 <= interval
                    && p.prepared_for != Some(foreseen)
                    && now <= foreseen + tolerance(interval);
                useful.then_some(Preparation {
                    at,
                    format: p.format,
                    foreseen,
                    peer: p.addr,
                })
            })
            .min_by_key(|p| p.at)
    }

    /// Marks `preparation` done (the page is made; the next one is for the request after).
    pub fn prepared(&mut self, preparation: &Preparation) {
        if let Some(p) = self.peers.iter_mut().find(|p| p.addr == preparation.peer) {
            p.prepared_for = Some(preparation.foreseen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// `c` with scrapes of `peer` at `at` (ms after `t0`).
    fn record_all(c: &mut Cadences, peer: IpAddr, t0: Instant, at: &[u64]) {
        for &ms in at {
            c.record(peer, t0 + MS * ms as u32, Format::Text);
        }
    }

    #[test]
    fn a_steady_scraper_is_foreseen_once_per_request() {
        let t0 = Instant::now();
        let mut c = Cadences::default();
        for k in 0..5 {
            record_all(&mut c, ip(1), t0, &[30 * k]);
            assert_eq!(c.next(t0, MS), None, "{} requests are too few", k + 1);
        }
        c.record(ip(1), t0 + 150 * MS, Format::Protobuf);
        let p = c.next(t0 + 150 * MS, MS).unwrap();
        assert_eq!((p.foreseen, p.at), (t0 + 180 * MS, t0 + 179 * MS));
        assert_eq!(p.format, Format::Protobuf);
        c.prepared(&p);
        assert_eq!(c.next(t0 + 179 * MS, MS), None, "prepared already");
        // Jitter within an eighth of the interval.
        c.record(ip(1), t0 + 183 * MS, Format::Protobuf);
        assert_eq!(c.next(t0 + 183 * MS, MS).unwrap().foreseen, t0 + 210 * MS);
        c.record(ip(1), t0 + 211 * MS, Format::Protobuf);
        assert_eq!(c.next(t0 + 211 * MS, MS).unwrap().foreseen, t0 + 241 * MS);
    }

    /// After a late scrape, a scraper on a fixed schedule comes back to it (Prometheus); one
    /// that waits an interval after each scrape comes later, and finds its page made early.
    #[test]
    fn after_a_late_scrape_the_schedule_is_foreseen() {
        let t0 = Instant::now();
        let mut c = Cadences::default();
        record_all(&mut c, ip(1), t0, &[0, 30, 60, 90, 120, 150, 190]);
        assert_eq!(c.next(t0 + 190 * MS, MS).unwrap().foreseen, t0 + 210 * MS);
        record_all(&mut c, ip(1), t0, &[210]);
        assert_eq!(c.next(t0 + 210 * MS, MS).unwrap().foreseen, t0 + 240 * MS);
    }

    #[test]
    fn a_scraper_that_came_early_gets_its_page_earlier() {
        let t0 = Instant::now();
        let mut c = Cadences::default();
        record_all(&mut c, ip(1), t0, &[0, 30, 60, 90, 120, 150]);
        assert_eq!(c.next(t0 + 150 * MS, MS).unwrap().at, t0 + 179 * MS);
        // 2 ms early: a lead of 1 + 2 ms while it is among the last six foreseen scrapes.
        record_all(&mut c, ip(1), t0, &[178]);
        assert_eq!(c.next(t0 + 178 * MS, MS).unwrap().at, t0 + 205 * MS);
        record_all(&mut c, ip(1), t0, &[208, 238, 268, 298, 328]);
        assert_eq!(c.next(t0 + 328 * MS, MS).unwrap().at, t0 + 355 * MS);
        // Six on time since: back to 1 ms.
        record_all(&mut c, ip(1), t0, &[358]);
        assert_eq!(c.next(t0 + 358 * MS, MS).unwrap().at, t0 + 387 * MS);
        // 10 ms early: the lead stops at MAX_LEAD.
        let mut c = Cadences::default();
        record_all(&mut c, ip(1), t0, &[0, 30, 60, 90, 120, 150, 170]);
        let p = c.next(t0 + 170 * MS, MS).unwrap();
        assert_eq!(
            (p.foreseen, p.at),
            (t0 + 200 * MS, t0 + 200 * MS - MAX_LEAD)
        );
    }

    #[test]
    fn unsteady_late_or_too_fast_scrapers_are_not_foreseen() {
        let t0 = Instant::now();
        let mut c = Cadences::default();
        record_all(&mut c, ip(1), t0, &[0, 30, 70, 100, 150, 170]);
        assert_eq!(
            c.next(t0 + 170 * MS, MS),
            None,
            "30, 40, 30, 50 and 20 ms apart"
        );
        let mut c = Cadences::default();
        record_all(&mut c, ip(1), t0, &[0, 30, 60, 90, 120, 150]);
        assert!(c.next(t0 + 150 * MS, MS).is_some());
        assert_eq!(c.next(t0 + 185 * MS, MS), None, "5 ms late: it stopped");
        let mut c = Cadences::default();
        record_all(&mut c, ip(1), t0, &[0, 12, 24, 36, 48, 60]);
        assert_eq!(c.next(t0 + 60 * MS, 4 * MS), None, "a lead over a quarter");
        assert!(c.next(t0 + 60 * MS, 3 * MS).is_some());
        let mut c = Cadences::default();
        record_all(&mut c, ip(1), t0, &[0, 40, 160, 200, 320, 360]);
        assert_eq!(
            c.next(t0 + 360 * MS, MS),
            None,
            "two scrapers behind one address"
        );
        let mut c = Cadences::default();
        record_all(&mut c, ip(1), t0, &[0, 3, 6, 9, 12, 15]);
        assert_eq!(c.next(t0, Duration::ZERO), None, "3 ms apart");
    }

    #[test]
    fn two_scrapers_at_their_own_offsets_are_each_foreseen() {
        let t0 = Instant::now();
        let mut c = Cadences::default();
        for k in 0..6 {
            c.record(ip(1), t0 + 100 * MS * k, Format::Text);
            c.record(ip(2), t0 + 100 * MS * k + 40 * MS, Format::Protobuf);
        }
        let now = t0 + 540 * MS;
        let first = c.next(now, MS).unwrap();
        assert_eq!(
            (first.foreseen, first.format),
            (t0 + 600 * MS, Format::Text)
        );
        c.prepared(&first);
        let second = c.next(now, MS).unwrap();
        assert_eq!(
            (second.foreseen, second.format),
            (t0 + 640 * MS, Format::Protobuf)
        );
    }

    #[test]
    fn past_the_bound_the_least_recent_scraper_is_forgotten() {
        let t0 = Instant::now();
        let mut c = Cadences::default();
        record_all(&mut c, ip(0), t0, &[0, 30, 60, 90, 120, 150]);
        for peer in 1..=MAX_PEERS as u8 {
            c.record(ip(peer), t0 + 160 * MS, Format::Text);
        }
        assert_eq!(c.peers.len(), MAX_PEERS);
        assert!(c.peers.iter().all(|p| p.addr != ip(0)));
        assert_eq!(c.next(t0 + 160 * MS, MS), None);
    }
}
