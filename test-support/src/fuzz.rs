//! A small mutation fuzzer for the stable toolchain: it runs a target on mutations of seed
//! inputs (bit flips, byte changes, insertions, deletions, truncation, splicing, repeated
//! blocks, interesting integers) for a time budget, with a seeded generator so a run can be
//! repeated exactly.
//!
//! Budget: `NIXL_FUZZ_SECONDS` per target (default 1 s, so the test command stays fast; run
//! longer on demand), `NIXL_FUZZ_SEED` for the generator (default: fixed). A panicking target
//! fails the test after the input is saved under `target/fuzz-crashes/`, named by target and
//! execution, to replay it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// A xorshift64* generator: small, fast, reproducible.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced by a constant).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

const INTERESTING: [u64; 10] = [
    0,
    1,
    0x7f,
    0xff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 36,
    i64::MAX as u64,
    u64::MAX,
];

/// Applies one to four random mutations to `input`, using `seeds` for splicing.
pub fn mutate(rng: &mut Rng, input: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = rng.next_u64() as u8;
            }
            2 => {
                let i = rng.below(len + 1);
                input.insert(i, rng.next_u64() as u8);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(16));
                input.drain(i..i + n);
            }
            4 if len > 0 => input.truncate(rng.below(len)),
            5 if !seeds.is_empty() => {
                let other = &seeds[rng.below(seeds.len())];
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let at = rng.below(len + 1);
                    let n = 1 + rng.below((other.len() - from).min(64));
                    input.splice(at..at, other[from..from + n].iter().copied());
                }
            }
            6 if len > 0 => {
                // Repeat a block: deep nesting, long lines, big counts.
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(8));
                let block = input[i..i + n].to_vec();
                for _ in 0..1 + rng.below(64) {
                    input.splice(i..i, block.iter().copied());
                }
            }
            _ if len >= 8 => {
                let i = rng.below(len - 7);
                let v = INTERESTING[rng.below(INTERESTING.len())];
                let bytes = if rng.below(2) == 0 {
                    v.to_le_bytes()
                } else {
                    v.to_be_bytes()
                };
                let n = [1, 2, 4, 8][rng.below(4)];
                input[i..i + n].copy_from_slice(&bytes[..n]);
            }
            _ => input.push(rng.next_u64() as u8),
        }
    }
}

/// Seeds for the parsers of `NIXL_TELEMETRY_*` values (words, numbers, lists, paths, exporter
/// names, the empty value), shared by every crate's environment fuzz targets.
pub fn environment_seeds() -> Vec<Vec<u8>> {
    [
        "1",
        "yes",
        "Disable",
        "4096",
        "0x1000",
        "agent_*,agent_tx_bytes",
        "[",
        "10,25,50.5",
        "/tmp/x",
        "TRACE",
        "full",
        "5000",
        "",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// What a fuzzing run did.
#[derive(Clone, Copy, Debug)]
pub struct Report {
    /// Inputs the target was run on.
    pub executions: u64,
    /// How long it ran.
    pub elapsed: Duration,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs `target` on every seed, then on mutations of them until the budget is spent; panics
/// (after saving the input) when the target panics. Prints one line with the executions.
pub fn run(name: &str, seeds: &[Vec<u8>], mut target: impl FnMut(&[u8])) -> Report {
    let budget = Duration::from_secs_f64(env_u64("NIXL_FUZZ_SECONDS").map_or(1.0, |s| s as f64));
    let mut rng = Rng::new(env_u64("NIXL_FUZZ_SEED").unwrap_or(0x5eed_1234_abcd_0001));
    let start = Instant::now();
    let mut executions = 0u64;
    let mut input = Vec::new();
    let mut try_one = |input: &[u8], executions: u64| {
        if catch_unwind(AssertUnwindSafe(|| target(input))).is_err() {
            let dir = crate::profile_dir().join("fuzz-crashes");
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("{name}-{executions}.bin"));
            let _ = std::fs::write(&file, input);
            panic!(
                "fuzz target {name} panicked on input {} ({} bytes)",
                file.display(),
                input.len()
            );
        }
    };
    for seed in seeds {
        try_one(seed, executions);
        executions += 1;
    }
    while start.elapsed() < budget {
        input.clear();
        if !seeds.is_empty() {
            input.extend_from_slice(&seeds[rng.below(seeds.len())]);
        }
        mutate(&mut rng, &mut input, seeds);
        try_one(&input, executions);
        executions += 1;
    }
    let report = Report {
        executions,
        elapsed: start.elapsed(),
    };
    println!(
        "fuzz {name}: {} executions in {:.1} s, no crash",
        report.executions,
        report.elapsed.as_secs_f64()
    );
    report
}
