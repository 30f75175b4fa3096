//! The protobuf exposition's count of a histogram that carries native buckets is the native
//! histogram's own, so that its native buckets plus its zero bucket always add up to it, even
//! for a snapshot whose classic buckets say otherwise (a store read between two of its
//! writer's updates did, and 121 of 3,000 scraped histograms failed that check).

use nixl_telemetry_base::{Event, EventType};
use nixl_telemetry_series::protobuf::{decode, encode};
use nixl_telemetry_series::{AgentSeries, Buckets};

#[test]
fn a_native_histograms_count_and_sum_are_its_own() {
    let s = AgentSeries::new("a0", "h", Buckets::default()).with_native_histograms(true, 3, 160);
    s.apply(&[0, 100, 5000].map(|us| Event::new(EventType::AgentXferTime, us)));
    let mut snapshot = s.snapshot();
    // Classic values of another moment than the native ones: two more observations.
    let classic = &mut snapshot.histograms[0];
    classic.buckets[0] += 2;
    classic.sum += 7;
    let families = decode(&encode(&[snapshot])).unwrap();
    let time = families
        .iter()
        .find(|f| f.name == "agent_xfer_time_us")
        .unwrap();
    let h = time.metric[0].histogram.as_ref().unwrap();
    let native: u64 = h
        .positive_delta
        .iter()
        .scan(0i64, |n, d| {
            *n += d;
            Some(*n as u64)
        })
        .sum();
    assert_eq!((h.sample_count, h.sample_sum), (3, 5100.0));
    assert_eq!(native + h.zero_count, h.sample_count);
    // The classic buckets are still the classic ones.
    assert_eq!(h.bucket.last().unwrap().cumulative_count, 5);
}
