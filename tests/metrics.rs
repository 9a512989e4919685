//! The metrics the lock layer and the scheduler report, captured by a debugging recorder.

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redefer::lock::{Fencing, Holders, LockStore};
use redefer::queue::QueueStats;
use redefer::queue::{DelayQueue, RetryPolicy};
use redefer::{Backoff, LockKey, LockLayer, LockToken, MemoryStore, Scheduler, SchedulerOptions};
use tower::{Layer, ServiceExt, service_fn};

/// name{label=value,...} -> value, for counters and gauges; histograms give their sample count.
fn snapshot(recorder: &DebuggingRecorder) -> HashMap<String, f64> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            let value = match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(samples) => samples.len() as f64,
            };
            (name, value)
        })
        .collect()
}

/// What `work` reported, run on one thread: every task the runtime runs reports to this
/// recorder.
fn recorded<F: std::future::Future<Output = ()>>(work: F) -> HashMap<String, f64> {
    let recorder = DebuggingRecorder::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || runtime.block_on(work));
    snapshot(&recorder)
}

/// The value of `name` in `seen`; a test failure when it was not reported.
fn reported(seen: &HashMap<String, f64>, name: &str) -> f64 {
    seen.get(name)
        .copied()
        .unwrap_or_else(|| panic!("{name} not reported: {seen:?}"))
}

#[test]
fn the_layer_and_the_scheduler_report_what_they_do() {
    let seen = recorded(async {
        let store = MemoryStore::new();
        let service = LockLayer::new(store.clone(), |n: &u64| Some(format!("order:{n}"))).layer(service_fn(
            |n: u64| async move { if n == 2 { Err("boom") } else { Ok(()) } },
        ));
        assert!(service.clone().oneshot(1).await.unwrap().done().is_some());
        let holder = LockToken::random();
        store
            .acquire(
                &LockKey::new("order:1").unwrap(),
                holder,
                Duration::from_secs(60),
                Holders::One,
                None,
                Fencing::On,
            )
            .await
            .unwrap();
        assert!(service.clone().oneshot(1).await.is_err(), "refused: held");

        let queue = DelayQueue::<u64, _>::new(store.clone(), "metered")
            .unwrap()
            .retry_policy(RetryPolicy {
                backoff: Backoff::exponential(Duration::from_millis(5), Duration::from_millis(5)),
                max_attempts: 2,
                ..RetryPolicy::default()
            });
        queue.push(&3, Duration::ZERO).await.unwrap();
        queue.push(&2, Duration::ZERO).await.unwrap();
        let options = SchedulerOptions {
            max_idle: Duration::from_millis(20),
            stats_every: Duration::from_millis(1),
            ..SchedulerOptions::default()
        };
        let scheduler = Scheduler::new(queue.clone(), service).options(options).start();
        while queue.operator().stats().await.unwrap()
            != (QueueStats {
                dead: 1,
                ..QueueStats::default()
            })
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Let the scheduler look at the settled queue once more for the gauges.
        tokio::time::sleep(Duration::from_millis(50)).await;
        scheduler.shutdown().await;
    });
    let value = |name: &str| reported(&seen, name);
    assert_eq!(
        value("redefer_lock_acquired_total{}"),
        4.0,
        "order 1, job 3, job 2 twice"
    );
    assert_eq!(value("redefer_lock_conflicts_total{decision=reject}"), 1.0);
    assert_eq!(value("redefer_lock_hold_seconds{}"), 4.0);
    assert_eq!(value("redefer_jobs_reinjected_total{queue=metered}"), 3.0);
    assert_eq!(value("redefer_jobs_acked_total{queue=metered}"), 1.0);
    assert_eq!(value("redefer_jobs_retried_total{queue=metered}"), 1.0);
    assert_eq!(value("redefer_jobs_buried_total{queue=metered}"), 1.0);
    assert_eq!(value("redefer_promotion_lag_seconds{queue=metered}"), 3.0);
    assert_eq!(value("redefer_queue_jobs{queue=metered,state=dead}"), 1.0);
    assert_eq!(value("redefer_queue_jobs{queue=metered,state=waiting}"), 0.0);
}

/// The throttle reports its refusals, the slots it booked and how far ahead; a semaphore the
/// permits this process holds.
#[test]
fn the_throttle_and_the_semaphore_report_what_they_do() {
    use redefer::strategy::Retry;
    use redefer::throttle::{Rate, ThrottleLayer};

    let seen = recorded(async {
        let store = MemoryStore::new();
        let rate = Rate::per_second(100).unwrap();
        let by_customer = |_: &u64| Some("customer:1".to_string());
        let refusing =
            ThrottleLayer::new(store.clone(), by_customer, rate).layer(service_fn(|_: u64| async {
                Ok::<_, std::convert::Infallible>(())
            }));
        assert!(refusing.clone().oneshot(1).await.is_ok());
        assert!(refusing.oneshot(2).await.is_err(), "refused: over the rate");
        let waiting = ThrottleLayer::new(store.clone(), by_customer, rate)
            .on_conflict(Retry::new(Backoff::default()))
            .layer(service_fn(|_: u64| async {
                Ok::<_, std::convert::Infallible>(())
            }));
        assert!(
            waiting.oneshot(3).await.unwrap().done().is_some(),
            "booked a slot and ran"
        );

        let permits = LockLayer::new(store, |n: &u64| Some(format!("tenant:{n}")))
            .permits(2)
            .layer(service_fn(|_: u64| async {
                Ok::<_, std::convert::Infallible>(())
            }));
        assert!(permits.oneshot(1).await.unwrap().done().is_some());
    });
    let value = |name: &str| reported(&seen, name);
    assert_eq!(value("redefer_throttle_conflicts_total{decision=reject}"), 1.0);
    assert_eq!(value("redefer_throttle_conflicts_total{decision=retry}"), 1.0);
    assert_eq!(value("redefer_throttle_booked_total{}"), 1.0);
    assert_eq!(value("redefer_throttle_delay_seconds{}"), 1.0);
    // Taken and given back: none held now.
    assert_eq!(value("redefer_permits_in_use{}"), 0.0);
}

/// A re-injected job that meets its key held again goes back to its queue: counted as that,
/// not as a refusal (which it was counted as before `Decision::BackToQueue`).
#[test]
fn a_job_back_to_its_queue_is_not_counted_as_refused() {
    use redefer::strategy::Coalesce;

    let seen = recorded(async {
        let store = MemoryStore::new();
        let queue = DelayQueue::<u64, _>::new(store.clone(), "coalesced")
            .unwrap()
            .retry_policy(RetryPolicy {
                max_lock_waits: 1,
                ..RetryPolicy::default()
            });
        let service = LockLayer::new(store.clone(), |_: &u64| Some("order:1".to_string()))
            .on_conflict(Coalesce::latest(queue.clone()))
            .layer(service_fn(|_: u64| async {
                Ok::<_, std::convert::Infallible>(())
            }));
        // A holder that never lets go, on a short TTL it keeps renewing: the job's fallback,
        // which follows the TTL, brings it back soon, until it met the key twice and is buried.
        let key = LockKey::new("order:1").unwrap();
        let (token, ttl) = (LockToken::random(), Duration::from_millis(200));
        store
            .acquire(&key, token, ttl, Holders::One, None, Fencing::On)
            .await
            .unwrap();
        let holder = tokio::spawn({
            let store = store.clone();
            async move {
                while store
                    .extend_holding(&key, token, ttl, Holders::One)
                    .await
                    .unwrap()
                {
                    tokio::time::sleep(ttl / 4).await;
                }
            }
        });
        assert!(
            service.clone().oneshot(1).await.unwrap().done().is_none(),
            "deferred"
        );
        let options = SchedulerOptions {
            max_idle: Duration::from_millis(20),
            ..SchedulerOptions::default()
        };
        let scheduler = Scheduler::new(queue.clone(), service).options(options).start();
        while queue.operator().stats().await.unwrap().dead != 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        scheduler.shutdown().await;
        holder.abort();
    });
    let value = |name: &str| reported(&seen, name);
    assert_eq!(value("redefer_lock_conflicts_total{decision=defer}"), 1.0);
    assert_eq!(value("redefer_lock_conflicts_total{decision=back_to_queue}"), 2.0);
    assert_eq!(
        seen.get("redefer_lock_conflicts_total{decision=reject}"),
        None,
        "{seen:?}"
    );
}
