//! Scenario 8: the handoff. A holder keeps one key for 300 ms while 20 requests arrive for it,
//! each with 10 ms of work; at the release they run one after another. Deferred requests (the
//! `Defer` strategy and a scheduler) and requests waiting in place (`Retry`) are measured in
//! interleaved rounds: the time from one holder's release to the next holder's start, the
//! re-deferrals per deferred request, the hot key's throughput against the ideal (the handlers'
//! own time back to back: what is lost is the handoff's), and the error of the `retry_after` a
//! caller was given at its first conflict against its actual wait.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redefer::lock::{Fencing, Holders, LockStore};
use redefer::queue::{DelayQueue, QueueStats};
use redefer::strategy::{Conflict, ConflictStrategy, Decision, Defer, Retry};
use redefer::{
    Backoff, BoxError, LockKey, LockLayer, LockToken, Outcome, RedisStore, Scheduler, SchedulerOptions,
};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

use crate::Size;
use crate::report::{Table, median, ms, percentile, spread};
use crate::support::RedisServer;

const HOLD: Duration = Duration::from_millis(300);
const WORK: Duration = Duration::from_millis(10);
const KEY: &str = "doc:hot";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Edit {
    n: u64,
}

/// One round's measurements.
#[derive(Default)]
struct Round {
    /// From each holder's release to the next holder's start.
    gaps: Vec<Duration>,
    redeferrals_per_request: f64,
    /// The ideal drain time (the handlers' own time, back to back) over the actual.
    throughput_vs_ideal: f64,
    /// |retry_after − actual wait| / actual wait, per caller that was given one.
    estimate_errors: Vec<f64>,
}

/// When each request held the key, and what it was told at its first conflict.
#[derive(Default)]
struct Log {
    /// (start, end) of each run, in start order.
    runs: Vec<(Instant, Instant)>,
    /// (first conflict, retry_after then) per request that met the lock.
    told: Vec<(Instant, Option<Duration>)>,
    /// The start of the run of each request that was told, in the same order as `told`.
    told_started: Vec<Option<Instant>>,
}

/// Records the first conflict's `retry_after`, then answers as `inner` does.
#[derive(Clone)]
struct Recording<S> {
    inner: S,
    log: Arc<Mutex<Log>>,
}

impl<S: ConflictStrategy<Edit>> ConflictStrategy<Edit> for Recording<S> {
    fn on_conflict(
        &self,
        conflict: Conflict,
        request: &Edit,
    ) -> impl Future<Output = Result<Decision, BoxError>> + Send + 'static {
        if conflict.attempt == 0 && redefer::current_job().is_none() {
            let mut log = self.log.lock().expect("log");
            let slot = usize::try_from(request.n).expect("small n");
            if log.told.len() <= slot {
                log.told.resize(slot + 1, (Instant::now(), None));
                log.told_started.resize(slot + 1, None);
            }
            log.told[slot] = (Instant::now(), conflict.retry_after);
        }
        self.inner.on_conflict(conflict, request)
    }
}

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let rounds = size.pick(5, 1);
    let waiters = size.pick(20, 5);
    // Warm the key's typical hold, as a service in production would have it.
    let key = LockKey::new(KEY).expect("key");
    for _ in 0..5 {
        let token = LockToken::random();
        store
            .acquire(
                &key,
                token,
                Duration::from_secs(10),
                Holders::One,
                None,
                Fencing::On,
            )
            .await
            .expect("acquire");
        store
            .release_holding(&key, token, Holders::One, Some(WORK))
            .await
            .expect("release");
    }
    let mut handoff = Vec::new();
    let mut retry = Vec::new();
    for round in 0..rounds {
        handoff.push(deferred_round(&store, round, waiters).await);
        retry.push(waiting_round(&store, waiters).await);
    }
    let mut table = Table::new(
        &format!(
            "Handoff: {waiters} requests for one key held {HOLD:?}, {WORK:?} of work each; median [min–max] over {rounds} interleaved rounds"
        ),
        &[
            "waiting as",
            "release → next start p50",
            "p99",
            "re-deferrals per deferred request",
            "hot-key throughput vs ideal",
            "retry_after error (median)",
        ],
    );
    table.row(cells("deferred job (Defer + scheduler)", &mut handoff));
    table.row(cells("caller in place (Retry)", &mut retry));
    table.print();
}

/// A service that runs edits of the hot key for `WORK`, logging each run.
fn editor<S>(
    store: &RedisStore,
    strategy: S,
    log: &Arc<Mutex<Log>>,
) -> impl tower::Service<
    Edit,
    Response = Outcome<()>,
    Error = redefer::Error<std::convert::Infallible>,
    Future: Send,
> + Clone
+ Send
+ 'static
where
    S: ConflictStrategy<Edit> + Clone,
{
    let log_runs = Arc::clone(log);
    LockLayer::new(store.clone(), |_: &Edit| Some(KEY.to_string()))
        .on_conflict(Recording {
            inner: strategy,
            log: Arc::clone(log),
        })
        .layer(service_fn(move |edit: Edit| {
            let log = Arc::clone(&log_runs);
            async move {
                let start = Instant::now();
                tokio::time::sleep(WORK).await;
                let mut log = log.lock().expect("log");
                log.runs.push((start, Instant::now()));
                if let Some(slot) = log
                    .told_started
                    .get_mut(usize::try_from(edit.n).expect("small n"))
                {
                    *slot = Some(start);
                }
                Ok::<_, std::convert::Infallible>(())
            }
        }))
}

async fn deferred_round(store: &RedisStore, round: usize, waiters: u64) -> Round {
    let queue = DelayQueue::<Edit, _>::new(store.clone(), format!("handoff-{round}")).expect("queue");
    let log = Arc::new(Mutex::new(Log::default()));
    let service = editor(store, Defer::new(queue.clone()), &log);
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(SchedulerOptions {
            concurrency: 8,
            ..SchedulerOptions::default()
        })
        .start();
    let released = hold_while(store, async {
        for n in 0..waiters {
            let outcome = service.clone().oneshot(Edit { n }).await;
            assert!(matches!(outcome, Ok(Outcome::Deferred(_))), "{outcome:?}");
        }
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while (log.lock().expect("log").runs.len() as u64) < waiters && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let report = scheduler.shutdown().await;
    assert_eq!(
        queue.operator().stats().await.expect("stats"),
        QueueStats::default(),
        "drained"
    );
    measure(&log, released, report.waited as f64 / waiters as f64)
}

async fn waiting_round(store: &RedisStore, waiters: u64) -> Round {
    let log = Arc::new(Mutex::new(Log::default()));
    let retry = Retry::new(Backoff::exponential(
        Duration::from_millis(200),
        Duration::from_secs(1),
    ))
    .max_attempts(u32::MAX)
    .max_wait(Duration::from_secs(30));
    let service = editor(store, retry, &log);
    let mut callers = Vec::new();
    let released = hold_while(store, async {
        for n in 0..waiters {
            callers.push(tokio::spawn(service.clone().oneshot(Edit { n })));
            // Arrivals a little apart, so that their order is theirs.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    for caller in callers {
        let outcome = caller.await.expect("caller task");
        assert!(matches!(outcome, Ok(Outcome::Done(()))), "{outcome:?}");
    }
    measure(&log, released, 0.0)
}

/// Holds the key while `arrivals` run and for `HOLD` in all; the release time.
async fn hold_while(store: &RedisStore, arrivals: impl Future<Output = ()>) -> Instant {
    let key = LockKey::new(KEY).expect("key");
    let token = LockToken::random();
    let since = Instant::now();
    store
        .acquire(
            &key,
            token,
            Duration::from_secs(10),
            Holders::One,
            None,
            Fencing::On,
        )
        .await
        .expect("acquire");
    arrivals.await;
    tokio::time::sleep(HOLD.saturating_sub(since.elapsed())).await;
    store
        .release_holding(&key, token, Holders::One, Some(WORK))
        .await
        .expect("release");
    Instant::now()
}

fn measure(log: &Mutex<Log>, released: Instant, redeferrals: f64) -> Round {
    let log = log.lock().expect("log");
    let mut previous_end = released;
    let mut gaps = Vec::new();
    for (start, end) in &log.runs {
        gaps.push(start.saturating_duration_since(previous_end));
        previous_end = *end;
    }
    let drained = previous_end.saturating_duration_since(released);
    let estimate_errors = log
        .told
        .iter()
        .zip(&log.told_started)
        .filter_map(|((met, told), started)| {
            let actual = started.as_ref()?.saturating_duration_since(*met).as_secs_f64();
            let told = told.as_ref()?.as_secs_f64();
            (actual > 0.0).then(|| (told - actual).abs() / actual)
        })
        .collect();
    Round {
        gaps,
        redeferrals_per_request: redeferrals,
        // The handlers' own time, not waiters × WORK: a 10 ms timer sleeps a little longer.
        throughput_vs_ideal: log
            .runs
            .iter()
            .map(|(start, end)| end.saturating_duration_since(*start).as_secs_f64())
            .sum::<f64>()
            / drained.as_secs_f64(),
        estimate_errors,
    }
}

/// A table row: each figure's median over the rounds, with its range.
fn cells(label: &str, rounds: &mut [Round]) -> Vec<String> {
    let mut p = |q: f64| -> Vec<f64> {
        rounds
            .iter_mut()
            .map(|round| percentile(&mut round.gaps, q).as_secs_f64() * 1000.0)
            .collect()
    };
    let as_ms = |v: f64| ms(Duration::from_secs_f64(v / 1000.0));
    let median_error = |round: &Round| median(&round.estimate_errors);
    let (p50, p99) = (p(0.5), p(0.99));
    vec![
        label.to_string(),
        spread(&p50, as_ms),
        spread(&p99, as_ms),
        spread(
            &rounds
                .iter()
                .map(|r| r.redeferrals_per_request)
                .collect::<Vec<_>>(),
            |v| format!("{v:.2}"),
        ),
        spread(
            &rounds
                .iter()
                .map(|r| r.throughput_vs_ideal * 100.0)
                .collect::<Vec<_>>(),
            |v| format!("{v:.0} %"),
        ),
        spread(&rounds.iter().map(median_error).collect::<Vec<_>>(), |v| {
            format!("{:.0} %", v * 100.0)
        }),
    ]
}
