//! Scenario 1: the lock layer, uncontended, against a bare redis-rs loop issuing the same two
//! commands and against redis-benchmark.

use std::convert::Infallible;
use std::process::Command;
use std::time::{Duration, Instant};

use redefer::lock::{Acquisition, LockStore};
use redefer::{LockKey, LockLayer, LockToken, RedisStore};
use tower::{Layer, ServiceExt, service_fn};

use crate::Size;
use crate::redis_info;
use crate::report::{Table, per_s, rate, ratio};
use crate::support::RedisServer;

const RELEASE: &str = include_str!("bare_release.lua");

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let mut table = Table::new(
        "Lock layer, uncontended: requests/s through LockService with a no-op handler",
        &[
            "concurrency",
            "LockService",
            "store calls alone (acquire script, release script)",
            "bare redis-rs loop (SET NX PX, EVALSHA release)",
            "redis-benchmark, same two commands",
            "LockService / bare loop",
        ],
    );
    let mut server_time = None;
    for concurrency in [1usize, 64] {
        let requests = size.pick(if concurrency == 1 { 20_000 } else { 100_000 }, 640);
        let layer = layer_rate(&store, concurrency, requests).await;
        redis_info::reset(server).await;
        let calls = store_rate(&store, concurrency, requests).await;
        let scripts = redis_info::commandstat(server, "evalsha", "usec_per_call").await;
        redis_info::reset(server).await;
        let bare = bare_rate(&store, concurrency, requests).await;
        let (set, release) = (
            redis_info::commandstat(server, "set", "usec_per_call").await,
            redis_info::commandstat(server, "evalsha", "usec_per_call").await,
        );
        // The store phase ran acquire and release scripts in equal numbers.
        server_time.get_or_insert((2.0 * scripts - release, release, set));
        let benchmark = redis_benchmark_pair(server, concurrency, requests).await;
        table.row(vec![
            concurrency.to_string(),
            per_s(layer),
            per_s(calls),
            per_s(bare),
            per_s(benchmark),
            ratio(layer, bare),
        ]);
    }
    table.print();
    if let Some((acquire, release, set)) = server_time {
        println!(
            "\nServer time per call (INFO commandstats, concurrency 1): acquire script {acquire:.2} µs, \
             release script {release:.2} µs, plain SET NX PX {set:.2} µs."
        );
    }
}

/// Each of `concurrency` tasks locks a key of its own, `requests / concurrency` times.
async fn layer_rate(store: &RedisStore, concurrency: usize, requests: usize) -> f64 {
    let service = LockLayer::new(store.clone(), |task: &usize| Some(format!("bench:{task}")))
        .layer(service_fn(|_: usize| async { Ok::<_, Infallible>(()) }));
    let per_task = requests / concurrency;
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let service = service.clone();
            tokio::spawn(async move {
                for _ in 0..per_task {
                    let outcome = service.clone().oneshot(task).await.expect("uncontended lock");
                    assert!(outcome.done().is_some(), "uncontended: never deferred");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    rate(per_task * concurrency, start.elapsed())
}

/// The store's acquire and release with no middleware: the protocol's own cost.
async fn store_rate(store: &RedisStore, concurrency: usize, requests: usize) -> f64 {
    let per_task = requests / concurrency;
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let store = store.clone();
            let key = LockKey::new(format!("calls:{task}")).expect("valid key");
            tokio::spawn(async move {
                for _ in 0..per_task {
                    let token = LockToken::random();
                    let acquired = store
                        .try_acquire(&key, token, Duration::from_secs(10))
                        .await
                        .expect("acquire");
                    assert!(matches!(acquired, Acquisition::Acquired(_)), "uncontended");
                    assert!(store.release(&key, token).await.expect("release"));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    rate(per_task * concurrency, start.elapsed())
}

/// The same two round trips with no middleware: `SET key token NX PX`, then the release script.
async fn bare_rate(store: &RedisStore, concurrency: usize, requests: usize) -> f64 {
    let release = redis::Script::new(RELEASE);
    let per_task = requests / concurrency;
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let mut conn = store.connection();
            let key = store.lock_redis_key(&LockKey::new(format!("bare:{task}")).expect("valid key"));
            let release = release.clone();
            tokio::spawn(async move {
                for _ in 0..per_task {
                    let token = LockToken::random();
                    let set: Option<String> = redis::cmd("SET")
                        .arg(&key)
                        .arg(token)
                        .arg("NX")
                        .arg("PX")
                        .arg(10_000)
                        .query_async(&mut conn)
                        .await
                        .expect("SET");
                    assert!(set.is_some(), "uncontended");
                    let released: i64 = release
                        .key(&key)
                        .arg(token)
                        .invoke_async(&mut conn)
                        .await
                        .expect("release");
                    assert_eq!(released, 1);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("bench task");
    }
    rate(per_task * concurrency, start.elapsed())
}

/// redis-benchmark's rate for the pair: each command measured alone, combined as two round
/// trips per request.
async fn redis_benchmark_pair(server: &RedisServer, concurrency: usize, requests: usize) -> f64 {
    let sha: String = server.cmd(redis::cmd("SCRIPT").arg("LOAD").arg(RELEASE)).await;
    let set = redis_benchmark(
        server,
        concurrency,
        requests,
        &["SET", "rb:__rand_int__", "token", "NX", "PX", "10000"],
    );
    let evalsha = redis_benchmark(
        server,
        concurrency,
        requests,
        &["EVALSHA", &sha, "1", "rb:__rand_int__", "token"],
    );
    1.0 / (1.0 / set + 1.0 / evalsha)
}

/// Requests per second that `redis-benchmark` reports for one command.
pub fn redis_benchmark(server: &RedisServer, concurrency: usize, requests: usize, command: &[&str]) -> f64 {
    let output = Command::new("redis-benchmark")
        .args([
            "-p",
            &server.port().to_string(),
            "-c",
            &concurrency.to_string(),
            "-n",
            &requests.to_string(),
        ])
        .args(["-r", "100000", "-q"])
        .args(command)
        .output()
        .expect("redis-benchmark (it comes with redis-server)");
    let text = String::from_utf8_lossy(&output.stdout);
    // `-q` prints progress lines separated by '\r'; the last one has the result:
    // "<command>: 12345.67 requests per second, p50=..."
    let last = text
        .split(['\r', '\n'])
        .rfind(|l| l.contains("requests per second"))
        .unwrap_or("");
    last.split(": ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("cannot read redis-benchmark's output: {text:?}"))
}
