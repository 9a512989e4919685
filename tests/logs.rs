//! The logs tell what happened: a call that failed before it acquired anything does not claim a
//! failed release after a cancellation, and a job whose record is gone is not said to belong to
//! another claimer. The crate's log lines are captured by a subscriber of this test binary.

use crate::support;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use redefer::queue::DelayQueue;
use redefer::{LockLayer, Scheduler, SchedulerOptions};
use tokio::sync::Notify;
use tower::{Layer, ServiceExt, service_fn};

use support::{RedisServer, eventually};

/// Every line logged in this test binary, at debug level and above.
fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let writer = Capture(Arc::clone(&logs));
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        logs
    })
}

#[derive(Clone)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The captured lines that mention `key` (tests run at once: each looks at its own).
fn lines_about(needle: &str) -> Vec<String> {
    let logs = logs().lock().unwrap();
    String::from_utf8_lossy(&logs)
        .lines()
        .filter(|line| line.contains(needle))
        .map(str::to_string)
        .collect()
}

/// Redis is down: the call fails with a store error before anything was acquired. The guard
/// releases in case the acquire landed; that release fails too, which is no warning about a
/// cancellation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_failed_to_acquire_does_not_report_a_failed_release_after_cancellation() {
    logs();
    let mut server = RedisServer::start();
    let store = server.fast_failing_store().await;
    server.kill();
    let service =
        LockLayer::new(store, |_: &u32| Some("order:logs-1".to_string())).layer(service_fn(|_: u32| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    let failed = service.oneshot(1).await;
    assert!(matches!(failed, Err(redefer::Error::Store(_))), "{failed:?}");
    eventually(
        Duration::from_secs(10),
        "the guard's release was tried",
        || async {
            let lines = lines_about("order:logs-1");
            lines
                .iter()
                .any(|line| line.contains("cancelled while acquiring"))
                .then_some(())
        },
    )
    .await;
    let lines = lines_about("order:logs-1");
    assert!(
        lines
            .iter()
            .all(|line| !line.contains("release after cancellation failed")),
        "{lines:#?}"
    );
}

/// A job runs while Redis loses its data: its ack finds no record, and the log says so, not
/// that another claimer has the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_record_vanished_is_not_said_to_be_another_claimers() {
    logs();
    let server = RedisServer::start();
    let store = server.store().await;
    let queue = DelayQueue::<u32, _>::new(store.clone(), "logs-2").unwrap();
    let (running, gate) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let service = {
        let (running, gate) = (Arc::clone(&running), Arc::clone(&gate));
        LockLayer::new(store.clone(), |_: &u32| Some("order:logs-2".to_string())).layer(service_fn(
            move |_: u32| {
                let (running, gate) = (Arc::clone(&running), Arc::clone(&gate));
                async move {
                    running.notify_one();
                    gate.notified().await;
                    Ok::<_, std::convert::Infallible>(())
                }
            },
        ))
    };
    let scheduler = Scheduler::new(queue.clone(), service)
        .options(SchedulerOptions {
            max_idle: Duration::from_millis(100),
            ..SchedulerOptions::default()
        })
        .start();
    queue.push(&1, Duration::ZERO).await.unwrap();
    running.notified().await;
    let () = server.cmd(&::redis::cmd("FLUSHALL").to_owned()).await;
    gate.notify_one();
    eventually(Duration::from_secs(10), "the lost lease is explained", || async {
        let lines = lines_about("logs-2");
        lines
            .iter()
            .any(|line| line.contains("record is gone"))
            .then_some(())
    })
    .await;
    scheduler.shutdown().await;
    let lines = lines_about("logs-2");
    assert!(
        lines.iter().all(|line| !line.contains("another claimer")),
        "{lines:#?}"
    );
}
