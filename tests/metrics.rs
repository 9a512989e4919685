//! The metrics the lock layer and the scheduler report, captured by a debugging recorder.

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redefer::lock::LockStore;
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

#[test]
fn the_layer_and_the_scheduler_report_what_they_do() {
    let recorder = DebuggingRecorder::new();
    // One thread: every task the runtime runs reports to this test's recorder.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let store = MemoryStore::new();
            let service = LockLayer::new(store.clone(), |n: &u64| Some(format!("order:{n}"))).layer(
                service_fn(|n: u64| async move { if n == 2 { Err("boom") } else { Ok(()) } }),
            );
            assert!(service.clone().oneshot(1).await.unwrap().done().is_some());
            let holder = LockToken::random();
            store
                .try_acquire(&LockKey::new("order:1").unwrap(), holder, Duration::from_secs(60))
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
            while queue.stats().await.unwrap()
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
        })
    });
    let seen = snapshot(&recorder);
    let value = |name: &str| {
        seen.get(name)
            .copied()
            .unwrap_or_else(|| panic!("{name} not reported: {seen:?}"))
    };
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
