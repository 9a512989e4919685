//! Faults of whole OS processes: a worker SIGKILLed while it holds leases, and a lock holder
//! SIGSTOPped past its TTL. Both use real processes and a real Redis.

use crate::support;

use crate::support::Shorthand;
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use redefer::lock::Acquisition;
use redefer::{LockKey, LockToken};
use serde::{Deserialize, Serialize};

use support::{RedisServer, eventually, example_binary, signal, unique_prefix};

/// Streams a child's stdout lines into a channel, so that the test can wait for a line.
fn lines(stdout: ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The first line from `rx` that `matches`, within `within`.
fn wait_for_line(rx: &mpsc::Receiver<String>, within: Duration, matches: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if matches(&line) => return line,
            Ok(_) => continue,
            Err(error) => panic!("no matching line within {within:?}: {error}"),
        }
    }
}

// ------------------------------------------------------------- a worker SIGKILLed mid-job

/// The worker example's task, as it stores it.
#[derive(Serialize, Deserialize)]
struct Task {
    resource: String,
    work_ms: u64,
}

fn start_worker(url: &str, config: &std::path::Path, name: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(example_binary("worker"))
        .env("REDIS_URL", url)
        .env("REDEFER_CONFIG", config)
        .env("WORKER_NAME", name)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the worker example");
    let rx = lines(child.stdout.take().expect("piped stdout"));
    wait_for_line(&rx, Duration::from_secs(30), |line| {
        line.starts_with("worker ready")
    });
    (child, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_a_sigkilled_worker_are_redelivered_to_another_after_their_lease() {
    let server = RedisServer::start();
    let prefix = unique_prefix();
    let config_path = server.dir().join("worker.toml");
    let mut config = std::fs::File::create(&config_path).unwrap();
    writeln!(
        config,
        "prefix = \"{prefix}\"\n[queue]\nname = \"tasks\"\n[scheduler]\nlease = \"1s\""
    )
    .unwrap();

    let (mut doomed, doomed_lines) = start_worker(&server.url(), &config_path, "doomed");
    let store = server.store_with_prefix(&prefix).await;
    let queue = redefer::queue::DelayQueue::<Task, _>::new(store, "tasks").unwrap();
    let mut pushed = HashSet::new();
    for n in 0..4 {
        // 3 s of work: the doomed worker renews its 1 s leases until it dies.
        let task = Task {
            resource: format!("resource:{n}"),
            work_ms: 3_000,
        };
        pushed.insert(queue.push(&task, Duration::ZERO).await.unwrap().id.to_string());
    }
    eventually(
        Duration::from_secs(10),
        "the doomed worker holds every job",
        || async { (queue.operator().stats().await.unwrap().in_flight == 4).then_some(()) },
    )
    .await;
    doomed.kill().expect("SIGKILL the worker");
    doomed.wait().unwrap();
    assert!(
        doomed_lines.try_iter().all(|line| !line.starts_with("handled")),
        "it died before finishing any"
    );

    let (mut survivor, survivor_lines) = start_worker(&server.url(), &config_path, "survivor");
    let mut handled = HashSet::new();
    while handled.len() < pushed.len() {
        let line = wait_for_line(&survivor_lines, Duration::from_secs(20), |line| {
            line.starts_with("handled ")
        });
        assert!(line.ends_with("by=survivor"), "{line}");
        handled.insert(line.split_whitespace().nth(1).unwrap().to_string());
    }
    assert_eq!(
        handled, pushed,
        "every job the dead worker held was handled by the survivor"
    );
    eventually(Duration::from_secs(5), "all acked", || async {
        (queue.operator().stats().await.unwrap() == redefer::queue::QueueStats::default()).then_some(())
    })
    .await;
    signal(&survivor, "TERM");
    assert!(
        survivor.wait().unwrap().success(),
        "the survivor shuts down cleanly on SIGTERM"
    );
}

// ------------------------------------------------------------- a lock holder SIGSTOPped

/// The lock holder's side, run in a child process: when `REDEFER_HOLDER_URL` is set, take the
/// lock through the layer (TTL 500 ms), say so, and work until the lock is lost.
#[tokio::test]
async fn holder_process() {
    let (Ok(url), Ok(prefix)) = (
        std::env::var("REDEFER_HOLDER_URL"),
        std::env::var("REDEFER_HOLDER_PREFIX"),
    ) else {
        return; // not the child
    };
    use tower::{Layer, ServiceExt, service_fn};
    let store = support::store_at(&url, &prefix).await;
    let service = redefer::LockLayer::new(store, |_: &()| Some("order:1".to_string()))
        .ttl(Duration::from_millis(500))
        .layer(service_fn(|()| async {
            println!("acquired {}", redefer::current_lock().unwrap().fence.unwrap());
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<_, std::convert::Infallible>(())
        }));
    match service.oneshot(()).await {
        Err(redefer::Error::LockLost { reason, .. }) => println!("lost {reason:?}"),
        other => println!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_paused_past_its_ttl_cannot_touch_the_next_holders_lock() {
    let server = RedisServer::start();
    let prefix = unique_prefix();
    let mut holder = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &support::test_name(module_path!(), "holder_process")])
        .args(["--nocapture", "--test-threads", "1"])
        .env("REDEFER_HOLDER_URL", server.url())
        .env("REDEFER_HOLDER_PREFIX", &prefix)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines(holder.stdout.take().unwrap());
    // libtest starts the line with "test holder_process ... ": look for the word.
    let acquired = wait_for_line(&lines, Duration::from_secs(30), |line| line.contains("acquired "));
    let paused_fence: u64 = acquired
        .rsplit("acquired ")
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    signal(&holder, "STOP");
    let store = server.store_with_prefix(&prefix).await;
    let key = LockKey::new("order:1").unwrap();
    let ours = LockToken::random();
    let fence = eventually(
        Duration::from_secs(10),
        "the paused holder's TTL runs out",
        || async {
            match store
                .try_acquire(&key, ours, Duration::from_secs(60))
                .await
                .unwrap()
            {
                Acquisition::Acquired(fence) => fence,
                Acquisition::Held { .. } => None,
            }
        },
    )
    .await;
    assert!(
        fence.0 > paused_fence,
        "the next holder's fence {fence} is above the paused one's {paused_fence}"
    );

    signal(&holder, "CONT");
    let lost = wait_for_line(&lines, Duration::from_secs(10), |line| {
        line.contains("lost ") || line.contains("unexpected")
    });
    assert!(
        lost.contains("lost "),
        "the paused holder learns it lost the lock: {lost}"
    );
    assert!(holder.wait().unwrap().success());
    // Its late extend and release (on its way out) did not touch our lock.
    assert!(
        store.extend(&key, ours, Duration::from_secs(60)).await.unwrap(),
        "still ours"
    );
    assert!(matches!(
        store
            .try_acquire(&key, LockToken::random(), Duration::from_secs(60))
            .await
            .unwrap(),
        Acquisition::Held { .. }
    ));
}
