//! A rank's native part damaged by another process (this test writes into its store): the
//! node's endpoint drops that rank's native histograms only, never its classic series nor its
//! place in `/health`, and says so in one warning. A corrupt word once dropped the whole rank,
//! and `/health` then answered 503 "no rank has updated its store" for a live, fresh rank.
//!
//! Members: in a histogram, more buckets than the bound, a count that is not its buckets', a
//! schema out of range, a first bucket no value can be in (2^31 - 2: the index that, in a node
//! total, landed at -524288 once its schema was lowered); in the extension's header, another
//! bucket bound. Each word is put back afterwards, and the native histograms come back.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use common::{
    child_main, get, poll, scrape_as, scratch_node, spawn_rank, stores_of, try_scrape, RankSpec,
    ACCEPT_PROTOBUF, NATIVE_WITH_TOTALS,
};
use nixl_telemetry_mp_store::layout::{native_word, NATIVE_OFF_SHAPE, STORE_SIZE};
use nixl_telemetry_series::protobuf;

/// The child processes' entry point (see `common::child_main`).
#[test]
fn child() {
    child_main();
}

/// Writes `value` at byte offset `off` of `path` (as another process of the user can) and
/// returns what was there.
fn put(path: &Path, off: usize, value: u64) -> u64 {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut old = [0u8; 8];
    file.read_exact_at(&mut old, off as u64).unwrap();
    file.write_all_at(&value.to_ne_bytes(), off as u64).unwrap();
    u64::from_ne_bytes(old)
}

/// What the node's endpoint serves of the rank with `pid`: its transmitted bytes on the text
/// page, whether its transfer-time histogram has classic and native buckets in the protobuf
/// exposition, and `/health`'s status and rank count.
fn served(port: u16, pid: u32) -> (Option<f64>, Option<(bool, bool)>, u16, u64) {
    let pid = pid.to_string();
    let text = try_scrape(port).expect("the text page");
    let bytes = text
        .samples
        .iter()
        .find(|s| s.name == "agent_tx_bytes_total" && s.label("pid") == Some(&pid))
        .map(|s| s.value);
    // The text page when no rank served has native histograms.
    let (content_type, body) = scrape_as(port, ACCEPT_PROTOBUF);
    let families = match content_type == protobuf::CONTENT_TYPE {
        true => protobuf::decode(&body).unwrap(),
        false => Vec::new(),
    };
    let histogram = families
        .iter()
        .find(|f| f.name == "agent_xfer_time_us")
        .and_then(|f| {
            f.metric
                .iter()
                .find(|m| m.label.iter().any(|l| l.name == "pid" && l.value == pid))
        })
        .map(|m| {
            let h = m.histogram.as_ref().unwrap();
            (!h.bucket.is_empty(), h.is_native())
        });
    let health = get(port, "/health").unwrap();
    let body: serde_json::Value = serde_json::from_str(&health.body).unwrap();
    (
        bytes,
        histogram,
        health.status,
        body["ranks"].as_u64().unwrap(),
    )
}

#[test]
fn a_corrupt_native_part_costs_the_rank_its_native_histograms_only() {
    let (_scratch, dir, port) = scratch_node();
    let spec = |agent, bytes| RankSpec {
        dir: &dir,
        port,
        agent,
        local_rank: "0",
        bytes,
        extra: &NATIVE_WITH_TOTALS,
    };
    let shape = spawn_rank(&spec("shape", 4000));
    // Another bucket bound in the header, before any scrape reads the store.
    let shape_store = stores_of(&dir, shape.pid).remove(0);
    put(&shape_store, STORE_SIZE + NATIVE_OFF_SHAPE, 4 | (100 << 32));
    let words = spawn_rank(&spec("words", 8000));
    let words_store = stores_of(&dir, words.pid).remove(0);
    // A rank left alone, so that the endpoint answers a protobuf scraper in protobuf.
    let intact = spawn_rank(&spec("intact", 2000));
    poll(Duration::from_secs(20), "the three ranks served", || {
        (served(port, words.pid).3 == 3).then_some(())
    });
    let native = |bytes, native| (Some(bytes), Some((true, native)), 200, 3);
    assert_eq!(served(port, shape.pid), native(4000.0, false));
    assert_eq!(served(port, words.pid), native(8000.0, true));
    let corrupt = [(2, 161), (4, 99), (0, 9), (1, (1u64 << 31) - 2)];
    for (word, value) in corrupt {
        let off = STORE_SIZE + native_word(0, word);
        let old = put(&words_store, off, value);
        let served_now = served(port, words.pid);
        assert_eq!(served_now, native(8000.0, false), "word {word} = {value}");
        put(&words_store, off, old);
        assert_eq!(served(port, words.pid), native(8000.0, true));
    }
    assert_eq!(served(port, shape.pid), native(4000.0, false));
    assert_eq!(served(port, intact.pid), native(2000.0, true));
    let logged = shape.stderr_text() + &words.stderr_text() + &intact.stderr_text();
    let warned: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("only its native histograms"))
        .collect();
    assert_eq!(warned.len(), 2, "one per store:\n{logged}");
    for rank in [shape, words, intact] {
        rank.finish();
    }
}
