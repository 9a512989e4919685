//! How often one client may try the token: a token bucket per client address, shared by
//! sign-ins and wrong bearer tokens, so that a dashboard reachable by strangers cannot have
//! its token guessed at network speed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Sign-in attempts per client address: `burst` at once, then one per `burst`th of `window`.
#[derive(Debug)]
pub(super) struct SignInLimit {
    burst: u32,
    window: Duration,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

/// One address's attempts: how many it may still make, as of `at`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    left: f64,
    at: Instant,
}

/// Addresses tracked at most; past it, the ones whose bucket has refilled are forgotten, and
/// while none has, new addresses wait like limited ones (the limit holds under a flood of
/// addresses; the flood delays sign-ins, it cannot speed up guessing).
const MAX_TRACKED: usize = 10_000;

impl SignInLimit {
    pub(super) fn new(burst: u32, window: Duration) -> Self {
        SignInLimit {
            burst: burst.max(1),
            window: window.max(Duration::from_millis(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Counts an attempt from `client` now: `Err(wait)` when it must wait that long first.
    pub(super) fn attempt(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let client = bucket_of(client);
        let burst = f64::from(self.burst);
        let per_attempt = self.window.as_secs_f64() / burst;
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if !buckets.contains_key(&client) && buckets.len() >= MAX_TRACKED {
            buckets.retain(|_, bucket| refill(*bucket, now, burst, per_attempt) < burst);
            if buckets.len() >= MAX_TRACKED {
                return Err(Duration::from_secs_f64(per_attempt));
            }
        }
        let bucket = buckets.entry(client).or_insert(Bucket { left: burst, at: now });
        let left = refill(*bucket, now, burst, per_attempt);
        if left < 1.0 {
            *bucket = Bucket { left, at: now };
            return Err(Duration::from_secs_f64((1.0 - left) * per_attempt));
        }
        *bucket = Bucket {
            left: left - 1.0,
            at: now,
        };
        Ok(())
    }
}

impl SignInLimit {
    /// Whether `client` must wait before its next attempt (and how long), without counting one.
    pub(super) fn waiting(&self, client: IpAddr, now: Instant) -> Option<Duration> {
        let burst = f64::from(self.burst);
        let per_attempt = self.window.as_secs_f64() / burst;
        let buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let left = buckets
            .get(&bucket_of(client))
            .map_or(burst, |bucket| refill(*bucket, now, burst, per_attempt));
        (left < 1.0).then(|| Duration::from_secs_f64((1.0 - left) * per_attempt))
    }
}

/// Attempts left in `bucket` at `now`.
fn refill(bucket: Bucket, now: Instant, burst: f64, per_attempt: f64) -> f64 {
    let earned = now.saturating_duration_since(bucket.at).as_secs_f64() / per_attempt;
    (bucket.left + earned).min(burst)
}

/// The address a limit applies to: an IPv4 address, or an IPv6 address's /64 (one host
/// commonly holds a whole /64, and could otherwise try from each of its addresses).
fn bucket_of(client: IpAddr) -> IpAddr {
    match client {
        IpAddr::V4(_) => client,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_burst_then_one_attempt_per_interval() {
        let limit = SignInLimit::new(10, Duration::from_secs(60));
        let start = Instant::now();
        let client: IpAddr = "192.0.2.7".parse().unwrap();
        for _ in 0..10 {
            assert!(limit.attempt(client, start).is_ok());
        }
        let wait = limit.attempt(client, start).unwrap_err();
        assert_eq!(wait.as_secs(), 6, "one attempt every 6 s");
        assert!(limit.attempt(client, start + Duration::from_secs(3)).is_err());
        assert!(limit.attempt(client, start + Duration::from_secs(6)).is_ok());
        assert!(limit.attempt(client, start + Duration::from_secs(6)).is_err());
        // Another address has its own bucket; another address of the same /64 does not.
        assert!(limit.attempt("192.0.2.8".parse().unwrap(), start).is_ok());
        let v6 = |last: &str| format!("2001:db8:1:2::{last}").parse::<IpAddr>().unwrap();
        for n in 0..10 {
            assert!(limit.attempt(v6(&format!("{n:x}")), start).is_ok());
        }
        assert!(limit.attempt(v6("ffff"), start).is_err());
    }
}
