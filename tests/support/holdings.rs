//! Holdings of a key as the property tests of its guards see them from outside (a module of the
//! test binaries that use it, beside `support`): who held it when, reading or writing, with
//! which fence; and the checks every such guard must pass, on every store.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use redefer::lock::{Acquisition, Holders, LockStore};
use redefer::{Fencing, FencingToken, LockKey, LockToken, RedisStore};
use tokio::time::Instant;

use crate::support::{RedisServer, Server};

/// The lease of every holding: a holder that dies frees the key this long after its acquire.
pub const TTL: Duration = Duration::from_millis(150);

/// One holding as seen from outside: a subset of the time it really held the key (from the
/// acquire's answer to the release's request, or for a holder that died to its acquire's
/// request plus the TTL), when the caller asked for it, whether it wrote, and its fence.
#[derive(Debug, Clone, Copy)]
pub struct Holding {
    pub asked: Instant,
    pub start: Instant,
    pub end: Instant,
    pub writes: bool,
    pub fence: FencingToken,
}

/// A caller that takes the key as `holders` says (polling, as a newcomer) and dies holding it:
/// never released, never renewed. Its holding ends when its lease runs out, at the earliest
/// `TTL` after the request that took it.
pub async fn die_holding<St: LockStore>(
    store: &St,
    key: &LockKey,
    holders: Holders,
    holdings: &Mutex<Vec<Holding>>,
    asked: Instant,
) {
    loop {
        let sent = Instant::now();
        let taken = store
            .acquire(key, LockToken::random(), TTL, holders, None, Fencing::On)
            .await
            .unwrap();
        match taken {
            Acquisition::Acquired(fence) => {
                holdings.lock().unwrap().push(Holding {
                    asked,
                    start: Instant::now(),
                    // The server's clock is read in whole ms.
                    end: sent + TTL - Duration::from_millis(2),
                    writes: matches!(holders, Holders::Writer(_)),
                    fence: fence.expect("fenced"),
                });
                return;
            }
            Acquisition::Held { .. } => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// At no instant a writer beside another holding, nor more than `limit` readers (a
/// semaphore's holders are readers).
pub fn never_beside_a_writer(limit: u32, holdings: &[Holding]) -> Result<(), String> {
    let mut events: Vec<(Instant, i32, bool)> = holdings
        .iter()
        .flat_map(|holding| {
            [
                (holding.start, 1, holding.writes),
                (holding.end, -1, holding.writes),
            ]
        })
        .collect();
    // At one instant, ends before starts: the intervals are half-open.
    events.sort_by_key(|(at, change, _)| (*at, *change));
    let (mut readers, mut writers) = (0i64, 0i64);
    for (_, change, writes) in events {
        if writes {
            writers += i64::from(change);
        } else {
            readers += i64::from(change);
        }
        if writers > 1 || (writers == 1 && readers > 0) || readers > i64::from(limit) {
            return Err(format!(
                "{writers} writers and {readers} readers held the key at once (limit {limit}): {holdings:?}"
            ));
        }
    }
    Ok(())
}

/// A holding asked for after another ended has a higher fence; no two share one.
pub fn fences_increase(holdings: &[Holding]) -> Result<(), String> {
    for a in holdings {
        for b in holdings {
            if a.end <= b.asked && a.fence >= b.fence {
                return Err(format!("{b:?} began after {a:?} ended, with a fence no higher"));
            }
            if !std::ptr::eq(a, b) && a.fence == b.fence {
                return Err(format!("two holdings share fence {}", a.fence));
            }
        }
    }
    Ok(())
}

/// The cases to run: `PROPTEST_CASES` raises them for long runs (the defaults fit CI).
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// Runs `check` on `store` for generated values of `load`, `default_cases` of them.
pub fn run<St, S, F>(
    store: St,
    runtime: &tokio::runtime::Runtime,
    default_cases: u32,
    load: S,
    check: impl Fn(St, S::Value) -> F,
) where
    St: Clone,
    S: Strategy,
    F: Future<Output = Result<(), String>>,
{
    let mut runner = TestRunner::new(ProptestConfig::with_cases(cases(default_cases)));
    runner
        .run(&load, |value| {
            runtime
                .block_on(check(store.clone(), value))
                .map_err(TestCaseError::fail)
        })
        .unwrap();
}

/// Runs `test` against a `server` of its own (skipped where it is not installed), its store
/// handing keys over for 300 ms.
pub fn on_server(server: Server, test: impl FnOnce(RedisStore, &tokio::runtime::Runtime)) {
    if !server.available() {
        return;
    }
    let redis = RedisServer::start_of(server);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime
        .block_on(redis.store())
        .with_reservation(Duration::from_millis(300));
    test(store, &runtime);
}
