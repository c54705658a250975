//! Limits that keep one caller or one tenant from taking the server or the database for itself:
//! a token bucket per API token (requests, enforced by the API's middleware), per tenant (log lines and
//! metric samples reported by its tasks), and a ceiling on each tenant's waiting jobs (checked at
//! submission). Pure buckets: no IO, the caller passes the time.
//!
//! Buckets live in memory, per server replica: a replica restart refills them.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A sustained rate with a burst allowance; `per_second == 0` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: f64,
}

impl Rate {
    pub const UNLIMITED: Rate = Rate {
        per_second: 0.0,
        burst: 0.0,
    };

    pub fn is_unlimited(self) -> bool {
        self.per_second <= 0.0
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Buckets kept at most before idle (full) ones are dropped.
const PRUNE_ABOVE: usize = 10_000;

/// One token bucket per key.
#[derive(Debug)]
pub struct Buckets<K> {
    rate: Rate,
    buckets: Mutex<HashMap<K, Bucket>>,
    /// When idle buckets were last dropped: at most once a second.
    pruned: Mutex<Option<Instant>>,
}

impl<K: Eq + Hash + Clone> Buckets<K> {
    pub fn new(rate: Rate) -> Self {
        Self {
            rate,
            buckets: Mutex::new(HashMap::new()),
            pruned: Mutex::new(None),
        }
    }

    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes up to `wanted` tokens from `key`'s bucket at `now`; returns how many it got.
    pub fn take_up_to(&self, key: &K, wanted: f64, now: Instant) -> f64 {
        if self.rate.is_unlimited() {
            return wanted;
        }
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() > PRUNE_ABOVE {
            let mut pruned = self
                .pruned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if pruned.is_none_or(|at| now.saturating_duration_since(at) >= Duration::from_secs(1)) {
                *pruned = Some(now);
                let rate = self.rate;
                buckets.retain(|_, b| refill(rate, *b, now).tokens < rate.burst);
                // Still huge (a flood of made-up keys): start over rather than grow without bound.
                if buckets.len() > PRUNE_ABOVE * 10 {
                    buckets.clear();
                }
            }
        }
        let bucket = buckets.entry(key.clone()).or_insert(Bucket {
            tokens: self.rate.burst,
            at: now,
        });
        *bucket = refill(self.rate, *bucket, now);
        let granted = wanted.min(bucket.tokens.floor()).max(0.0);
        bucket.tokens -= granted;
        granted
    }

    /// Whether `key`'s bucket holds at least one token at `now` (taking none).
    pub fn has_one(&self, key: &K, now: Instant) -> bool {
        if self.rate.is_unlimited() {
            return true;
        }
        let buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        buckets
            .get(key)
            .is_none_or(|bucket| refill(self.rate, *bucket, now).tokens >= 1.0)
    }

    /// Whether `key` has a bucket (it has been charged and not pruned since).
    pub fn contains(&self, key: &K) -> bool {
        self.buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(key)
    }

    /// Takes one token, or says how long until one is there.
    pub fn take_one(&self, key: &K, now: Instant) -> Result<(), Duration> {
        if self.take_up_to(key, 1.0, now) >= 1.0 {
            Ok(())
        } else {
            Err(Duration::from_secs_f64(1.0 / self.rate.per_second))
        }
    }
}

fn refill(rate: Rate, bucket: Bucket, now: Instant) -> Bucket {
    let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
    Bucket {
        tokens: (bucket.tokens + elapsed * rate.per_second).min(rate.burst),
        at: now,
    }
}

/// The limits a server enforces; one typed struct, from its flags.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// API requests per token.
    pub requests: Rate,
    /// Jobs a tenant may have waiting (`queued` or `paused`); 0 means no ceiling.
    pub max_queued_jobs_per_tenant: u32,
    /// Log lines a tenant's tasks may report.
    pub log_lines: Rate,
    /// Metric samples (one value of one step) a tenant's tasks may report.
    pub metric_samples: Rate,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            requests: Rate {
                per_second: 50.0,
                burst: 200.0,
            },
            max_queued_jobs_per_tenant: 10_000,
            log_lines: Rate {
                per_second: 2_000.0,
                burst: 20_000.0,
            },
            metric_samples: Rate {
                per_second: 1_000.0,
                burst: 10_000.0,
            },
        }
    }
}

impl Limits {
    /// No limit at all (tests that are not about limits).
    pub const NONE: Limits = Limits {
        requests: Rate::UNLIMITED,
        max_queued_jobs_per_tenant: 0,
        log_lines: Rate::UNLIMITED,
        metric_samples: Rate::UNLIMITED,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let buckets = Buckets::new(Rate {
            per_second: 10.0,
            burst: 3.0,
        });
        let start = Instant::now();
        for _ in 0..3 {
            assert!(buckets.take_one(&"a", start).is_ok());
        }
        let wait = buckets.take_one(&"a", start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        // Another key has its own bucket.
        assert!(buckets.take_one(&"b", start).is_ok());
        // A tenth of a second later, one more.
        let later = start + Duration::from_millis(100);
        assert!(buckets.take_one(&"a", later).is_ok());
        assert!(buckets.take_one(&"a", later).is_err());
        assert!(!buckets.has_one(&"a", later));
        assert!(buckets.has_one(&"never-seen", later));
        // Partial grants: 5 wanted, 3 there after a long pause (the burst caps the refill).
        assert_eq!(
            buckets.take_up_to(&"a", 5.0, later + Duration::from_secs(60)),
            3.0
        );
        let unlimited = Buckets::new(Rate::UNLIMITED);
        assert_eq!(unlimited.take_up_to(&"a", 1e9, start), 1e9);
    }
}
