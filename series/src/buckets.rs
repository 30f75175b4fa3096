//! Histogram bucket bounds for the transfer-time histograms: the built-in microsecond defaults
//! and the `NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US` override, parsed strictly (an invalid value is
//! an error naming the variable, never a silent fallback to the defaults).

use std::fmt;
use std::sync::Arc;

use nixl_telemetry_base::env::Lookup;
use nixl_telemetry_base::error::{Error, Result};
use nixl_telemetry_base::settings::{self, process_settings};

/// `NIXL_TELEMETRY_HISTOGRAM_BUCKETS_US`: comma-separated, strictly increasing, positive
/// microsecond upper bounds of the transfer-time histogram buckets.
pub const ENV_HISTOGRAM_BUCKETS_US: &str = settings::HISTOGRAM_BUCKETS_US.name;

/// NIXL's default upper bounds in microseconds (~10 µs .. 10 s); `+Inf` is implicit.
pub const DEFAULT_BUCKETS_US: [f64; 18] = settings::HISTOGRAM_BUCKETS_US.default_list();

/// The finite upper bounds of a histogram (strictly increasing, positive, finite); an event
/// value goes in the first bucket whose bound is `>=` the value, or in the implicit `+Inf`
/// bucket. Cheap to clone (shared).
#[derive(Clone, PartialEq)]
pub struct Buckets {
    bounds: Arc<[f64]>,
}

impl Default for Buckets {
    /// NIXL's defaults ([`DEFAULT_BUCKETS_US`]).
    fn default() -> Self {
        Buckets {
            bounds: Arc::from(&DEFAULT_BUCKETS_US[..]),
        }
    }
}

impl fmt::Debug for Buckets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.bounds.iter()).finish()
    }
}

impl Buckets {
    /// Bounds from a list that must be non-empty, finite, positive and strictly increasing.
    pub fn new(bounds: &[f64]) -> Result<Buckets> {
        if bounds.is_empty() {
            return Err(Error::invalid("histogram bucket list is empty"));
        }
        let mut previous = 0.0;
        for &b in bounds {
            if !b.is_finite() || b <= 0.0 {
                return Err(Error::invalid(format!(
                    "histogram bucket bound {b} is not a finite positive number"
                )));
            }
            if b <= previous {
                return Err(Error::invalid(format!(
                    "histogram bucket bound {b} does not exceed the previous bound {previous}"
                )));
            }
            previous = b;
        }
        Ok(Buckets {
            bounds: Arc::from(bounds),
        })
    }

    /// Parses the value of [`ENV_HISTOGRAM_BUCKETS_US`]: empty (or only whitespace) gives the
    /// defaults; otherwise every comma-separated token (surrounding whitespace tolerated,
    /// fractions and exponents allowed) must be a finite number greater than zero and greater
    /// than the previous one. The error names the variable, the value and the offending token.
    pub fn parse(value: &str) -> Result<Buckets> {
        if value.trim().is_empty() {
            return Ok(Buckets::default());
        }
        let fail = |why: String| {
            Error::invalid(format!(
                "{ENV_HISTOGRAM_BUCKETS_US}='{value}' is invalid: {why}; it must be a \
                 comma-separated list of strictly-increasing positive numbers (microseconds), \
                 e.g. 10,100,1000"
            ))
        };
        let mut bounds = Vec::new();
        for (i, raw) in value.split(',').enumerate() {
            let token = raw.trim();
            if token.is_empty() {
                return Err(fail(format!("entry {} is empty", i + 1)));
            }
            // Rust's float syntax also accepts "inf", "NaN" and "infinity": refused below.
            let b: f64 = token
                .parse()
                .map_err(|_| fail(format!("'{token}' is not a number")))?;
            if !b.is_finite() {
                return Err(fail(format!("'{token}' is not finite")));
            }
            if b <= 0.0 {
                return Err(fail(format!("'{token}' is not positive")));
            }
            if let Some(&last) = bounds.last() {
                if b <= last {
                    return Err(fail(format!(
                        "'{token}' is not greater than the previous bound {last}"
                    )));
                }
            }
            bounds.push(b);
        }
        Ok(Buckets {
            bounds: Arc::from(bounds),
        })
    }

    /// Reads [`ENV_HISTOGRAM_BUCKETS_US`] through `env`: unset or empty gives the defaults.
    pub fn from_lookup(env: Lookup) -> Result<Buckets> {
        match env(ENV_HISTOGRAM_BUCKETS_US)? {
            None => Ok(Buckets::default()),
            Some(v) => Buckets::parse(&v),
        }
    }

    /// Reads [`ENV_HISTOGRAM_BUCKETS_US`] from the process environment.
    pub fn from_env() -> Result<Buckets> {
        Buckets::from_lookup(&process_settings)
    }

    /// The finite upper bounds, in increasing order (without `+Inf`).
    pub fn bounds(&self) -> &[f64] {
        &self.bounds
    }

    /// The number of buckets including `+Inf` (bounds + 1).
    pub fn len_with_inf(&self) -> usize {
        self.bounds.len() + 1
    }

    /// The index of the bucket `value` falls in: the first bound `>= value`, or
    /// `bounds().len()` for the `+Inf` bucket.
    #[inline]
    pub fn index_of(&self, value: u64) -> usize {
        let v = value as f64;
        self.bounds.partition_point(|&b| b < v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(value: &str) -> String {
        Buckets::parse(value).unwrap_err().message
    }

    #[test]
    fn absent_or_empty_gives_the_defaults() {
        let env = |_: &str| Ok(None);
        assert_eq!(Buckets::from_lookup(&env).unwrap(), Buckets::default());
        let env = |_: &str| Ok(Some(String::new()));
        assert_eq!(Buckets::from_lookup(&env).unwrap(), Buckets::default());
        assert_eq!(Buckets::parse("  ").unwrap(), Buckets::default());
        assert_eq!(Buckets::default().bounds(), &DEFAULT_BUCKETS_US);
        assert_eq!(Buckets::default().len_with_inf(), 19);
    }

    #[test]
    fn overrides_parse_with_whitespace_and_fractions() {
        assert_eq!(
            Buckets::parse("100,200,300").unwrap().bounds(),
            &[100.0, 200.0, 300.0]
        );
        assert_eq!(
            Buckets::parse("1, 2.5,\t10 , 100").unwrap().bounds(),
            &[1.0, 2.5, 10.0, 100.0]
        );
        assert_eq!(Buckets::parse("0.5,1e3").unwrap().bounds(), &[0.5, 1000.0]);
        assert_eq!(Buckets::parse("7").unwrap().bounds(), &[7.0]);
    }

    #[test]
    fn invalid_lists_are_errors_naming_the_variable() {
        for (value, why) in [
            ("abc", "'abc' is not a number"),
            ("10,x,20", "'x' is not a number"),
            ("10,5", "'5' is not greater than the previous bound 10"),
            ("10,10", "not greater"),
            ("0,10", "'0' is not positive"),
            ("-1", "'-1' is not positive"),
            ("10,inf", "'inf' is not finite"),
            ("NaN", "'NaN' is not finite"),
            ("10,,20", "entry 2 is empty"),
            ("10,", "entry 2 is empty"),
            (",10", "entry 1 is empty"),
            ("10ms", "'10ms' is not a number"),
            ("1e400", "not finite"),
        ] {
            let m = message(value);
            assert!(m.starts_with(ENV_HISTOGRAM_BUCKETS_US), "{value}: {m}");
            assert!(m.contains(why), "{value}: {m}");
            assert!(m.contains("strictly-increasing positive numbers"), "{m}");
        }
        let env = |_: &str| Ok(Some("5,4".to_string()));
        let e = Buckets::from_lookup(&env).unwrap_err();
        assert_eq!(e.status, nixl_telemetry_base::Status::InvalidParam);
    }

    #[test]
    fn a_value_goes_in_the_first_bucket_whose_bound_is_not_below_it() {
        let b = Buckets::new(&[10.0, 100.0, 1000.0]).unwrap();
        let idx: Vec<usize> = [0, 1, 10, 11, 100, 999, 1000, 1001, u64::MAX]
            .iter()
            .map(|&v| b.index_of(v))
            .collect();
        assert_eq!(idx, [0, 0, 0, 1, 1, 2, 2, 3, 3]);
        let f = Buckets::new(&[2.5, 7.5]).unwrap();
        assert_eq!((f.index_of(2), f.index_of(3), f.index_of(8)), (0, 1, 2));
        assert!(Buckets::new(&[]).is_err());
        assert!(Buckets::new(&[3.0, 2.0]).is_err());
        assert!(Buckets::new(&[f64::INFINITY]).is_err());
    }
}
