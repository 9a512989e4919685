//! Limits the handler learns (issue 38): a crawler of 20 domains throttled at 10 requests/s
//! each, its fetches deferred jobs of one queue run by one scheduler. The first request to
//! one domain is answered "429, Retry-After: 2 s": its handler closes the domain for 2 s and
//! asks to wait for the reopening. Measured: how many requests reached that domain's handler
//! while it was closed (the goal: none), the rate the other 19 kept, how many requests ran
//! other than once, and how many attempts were used.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use redefer::queue::{DelayQueue, QueueStats};
use redefer::strategy::Defer;
use redefer::throttle::{CloseError, Rate, ThrottleLayer, close_for};
use redefer::{Scheduler, SchedulerOptions, current_job};
use serde::{Deserialize, Serialize};
use tower::{Layer, service_fn};

use crate::Size;
use crate::report::{Table, median};
use crate::support::{RedisServer, StoreClock};

const DOMAINS: u32 = 20;
const PER_SECOND: u32 = 10;
/// The Retry-After the limited domain answers its first request with.
const RETRY_AFTER: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Fetch {
    domain: u32,
    n: u32,
}

/// One handler run: the fetch, its attempt, and when it started by the server's clock.
type Run = (u32, u32, u32, SystemTime);

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let seconds = size.pick(6, 3);
    let per_domain = PER_SECOND * seconds;
    let runs: Arc<Mutex<Vec<Run>>> = Arc::default();
    let closed_at: Arc<Mutex<Option<SystemTime>>> = Arc::default();
    let queue = DelayQueue::<Fetch, _>::new(store.clone(), "crawl").expect("a queue name");
    let service = ThrottleLayer::new(
        store.clone(),
        |fetch: &Fetch| Some(format!("domain:{}", fetch.domain)),
        Rate::per_second(PER_SECOND).expect("a rate"),
    )
    .on_conflict(Defer::new(queue.clone()))
    .layer(service_fn({
        let (runs, closed_at, clock) = (Arc::clone(&runs), Arc::clone(&closed_at), store.clone());
        move |fetch: Fetch| {
            let (runs, closed_at, clock) = (Arc::clone(&runs), Arc::clone(&closed_at), clock.clone());
            async move {
                let at = clock.now().await;
                let attempt = current_job().map_or(0, |job| job.attempt);
                runs.lock()
                    .expect("runs")
                    .push((fetch.domain, fetch.n, attempt, at));
                if fetch.domain == 0 && fetch.n == 0 && closed_at.lock().expect("closed").is_none() {
                    // 429, Retry-After: 2 s.
                    *closed_at.lock().expect("closed") = Some(at);
                    close_for(RETRY_AFTER).await?.retry_at_reopening();
                }
                Ok::<_, CloseError>(())
            }
        }
    }));
    let scheduler = Scheduler::new(queue.clone(), service)
        .options(SchedulerOptions {
            concurrency: 64,
            ..SchedulerOptions::default()
        })
        .start();
    // Every domain's fetches, due now: the throttle spaces them at the rate.
    for n in 0..per_domain {
        for domain in 0..DOMAINS {
            queue
                .push(&Fetch { domain, n }, Duration::ZERO)
                .await
                .expect("a push");
        }
    }
    let total = (DOMAINS * per_domain) as usize + 1;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(seconds) * 3 + 10);
    while runs.lock().expect("runs").len() < total && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = scheduler.shutdown().await;
    let left = queue.operator().stats().await.expect("stats");

    let runs = runs.lock().expect("runs").clone();
    let closed_at = closed_at.lock().expect("closed").expect("the limited fetch ran");
    let reopens = closed_at + RETRY_AFTER;
    let inside_closure = runs
        .iter()
        .filter(|(domain, n, _, at)| {
            *domain == 0 && !(*n == 0 && *at == closed_at) && *at > closed_at && *at < reopens
        })
        .count();
    let mut per_fetch: HashMap<(u32, u32), usize> = HashMap::new();
    for (domain, n, _, _) in &runs {
        *per_fetch.entry((*domain, *n)).or_default() += 1;
    }
    // The limited fetch runs twice by design: once to hear the 429, once after the reopening.
    let not_once = per_fetch
        .iter()
        .filter(|((domain, n), count)| **count != if (*domain, *n) == (0, 0) { 2 } else { 1 })
        .count()
        + (DOMAINS * per_domain) as usize
        - per_fetch.len();
    let attempts = runs.iter().filter(|(_, _, attempt, _)| *attempt > 0).count();
    // Each other domain's rate: its fetches over the span from its first start to its last.
    let rates: Vec<f64> = (1..DOMAINS)
        .map(|domain| {
            let mut starts: Vec<SystemTime> = runs
                .iter()
                .filter(|(d, ..)| *d == domain)
                .map(|(.., at)| *at)
                .collect();
            starts.sort();
            let span = starts
                .last()
                .and_then(|last| last.duration_since(starts[0]).ok())
                .unwrap_or_default();
            (starts.len().saturating_sub(1)) as f64 / span.as_secs_f64().max(1e-9)
        })
        .collect();
    let (low, high) = rates
        .iter()
        .fold((f64::MAX, 0.0f64), |(low, high), r| (low.min(*r), high.max(*r)));
    let mut table = Table::new(
        &format!(
            "A crawler: {DOMAINS} domains at {PER_SECOND}/s each, {per_domain} fetches each (deferred jobs, one scheduler); domain 0 answers 429 with Retry-After {RETRY_AFTER:?} to its first fetch"
        ),
        &["measure", "value"],
    );
    table.row(vec![
        "fetches that reached domain 0's handler while it was closed".into(),
        inside_closure.to_string(),
    ]);
    table.row(vec![
        "the other 19 domains' rates (fetches/s, first to last start)".into(),
        format!("median {:.2}/s [{low:.2}–{high:.2}]", median(&rates)),
    ]);
    table.row(vec![
        "fetches that ran other than once (the limited one: twice)".into(),
        not_once.to_string(),
    ]);
    table.row(vec!["runs at an attempt above 0".into(), attempts.to_string()]);
    let first_after = runs
        .iter()
        .filter(|(domain, _, _, at)| *domain == 0 && *at >= reopens)
        .map(|(.., at)| at.duration_since(reopens).unwrap_or_default())
        .min();
    table.row(vec![
        "domain 0's first fetch after the reopening, from the reopening".into(),
        first_after.map_or("-".into(), |after| {
            format!("{:.1} ms", after.as_secs_f64() * 1000.0)
        }),
    ]);
    table.row(vec![
        "jobs acked / buried; left in the queue".into(),
        format!(
            "{} / {}; {}",
            report.acked,
            report.buried,
            if left == QueueStats::default() {
                "none".to_string()
            } else {
                format!("{left:?}")
            }
        ),
    ]);
    table.print();
}
