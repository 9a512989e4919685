//! Scenario 3: redefer against BullMQ on one Redis, on the same workloads, with the producer
//! and the workers in processes of their own (the bench binary re-executed for redefer, node
//! for BullMQ), each system in its best configurations:
//!
//! - drain: jobs stored before any worker starts, timed from the first handler start (as the
//!   workers report it) to the queue seen empty (polled by this process), so neither adding nor
//!   process start-up is in the timed region;
//! - steady arrival: another process adds jobs due at once at a rate both systems sustain, and
//!   the workers report each job's lag (start of handling minus the time it was added).
//!
//! Configurations alternate within each round, and each figure is the median [min–max] over the
//! rounds; the ratio is taken per round.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redefer::queue::{DelayQueue, QueueStats};
use redefer::{LockLayer, RedisStore, Scheduler, SchedulerOptions, current_job};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tower::{Layer, service_fn};

use crate::Size;
use crate::chart::Chart;
use crate::report::{Table, percentile, spread};
use crate::support::{RedisServer, store_at};

/// The first argument that makes the bench binary a redefer worker process.
pub const WORKER_COMMAND: &str = "__worker";
/// The first argument that makes the bench binary a steady producer process.
pub const STEADY_COMMAND: &str = "__steady";

/// Slots per worker, for both systems (BullMQ's `concurrency`, redefer's `concurrency` and batch).
const CONCURRENCY: usize = 64;

/// How a system is run: processes, workers (schedulers) per process.
#[derive(Clone, Copy)]
struct Setup {
    system: System,
    processes: usize,
    workers: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum System {
    Redefer,
    Bullmq,
}

impl Setup {
    fn label(self) -> String {
        let name = match self.system {
            System::Redefer => "redefer",
            System::Bullmq => "BullMQ",
        };
        let unit = match self.system {
            System::Redefer => "scheduler",
            System::Bullmq => "worker",
        };
        format!(
            "{name}, {} process{} × {} {unit}{} × {CONCURRENCY}",
            self.processes,
            if self.processes == 1 { "" } else { "es" },
            self.workers,
            if self.workers == 1 { "" } else { "s" },
        )
    }
}

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let bullmq = install_bullmq();
    if let Err(why) = &bullmq {
        println!("\nBullMQ not run: {why}");
    }
    let with_bullmq = bullmq.is_ok();
    let rounds = size.pick(5, 1);
    drain(server, &store, size, rounds, with_bullmq).await;
    steady(server, &store, size, rounds, with_bullmq).await;
}

async fn drain(server: &RedisServer, store: &RedisStore, size: Size, rounds: usize, with_bullmq: bool) {
    let jobs = size.pick(20_000, 500);
    let mut setups = vec![
        Setup {
            system: System::Redefer,
            processes: 1,
            workers: 1,
        },
        Setup {
            system: System::Redefer,
            processes: 4,
            workers: 1,
        },
    ];
    if with_bullmq {
        setups.extend([
            Setup {
                system: System::Bullmq,
                processes: 1,
                workers: 1,
            },
            Setup {
                system: System::Bullmq,
                processes: 1,
                workers: 4,
            },
            Setup {
                system: System::Bullmq,
                processes: 4,
                workers: 1,
            },
        ]);
    }
    let mut rates = vec![Vec::new(); setups.len()];
    for round in 0..rounds {
        for (setup, rates) in setups.iter().zip(&mut rates) {
            let name = format!("drain-{round}-{}-{}", setup.processes, setup.workers);
            let run = match setup.system {
                System::Redefer => {
                    let queue = DelayQueue::<u64, _>::new(store.clone(), &name).expect("queue");
                    let items: Vec<u64> = (0..jobs as u64).collect();
                    for page in items.chunks(1000) {
                        queue.push_many(page, Duration::ZERO).await.expect("push_many");
                    }
                    let workers = start_workers(server, store, *setup, &name).await;
                    let emptied = wait_until_empty(|| async {
                        queue.operator().stats().await.expect("stats") == QueueStats::default()
                    })
                    .await;
                    finish(workers, emptied).await
                }
                System::Bullmq => {
                    node(&["produce.mjs", "bulk", &port(server), &name, &jobs.to_string()]).await;
                    let workers = start_workers(server, store, *setup, &name).await;
                    let emptied = wait_until_empty(|| bullmq_empty(server, &name)).await;
                    finish(workers, emptied).await
                }
            };
            assert_eq!(run.handled, jobs, "{}: every job handled once", setup.label());
            rates.push(jobs as f64 / run.drained.as_secs_f64());
        }
    }
    let mut table = Table::new(
        &format!(
            "Peer: drain of {jobs} stored no-op jobs, timed from the first handler start; median [min–max] over {rounds} interleaved rounds"
        ),
        &[
            "system",
            "jobs/s",
            "vs BullMQ's best one-process setup, per round",
        ],
    );
    // BullMQ's best one-process rate in each round.
    let bullmq_best: Vec<f64> = (0..rounds)
        .map(|round| {
            rates
                .iter()
                .zip(&setups)
                .filter(|(_, setup)| setup.system == System::Bullmq && setup.processes == 1)
                .map(|(rates, _)| rates[round])
                .fold(f64::NAN, f64::max)
        })
        .collect();
    for (setup, rates) in setups.iter().zip(&rates) {
        let ratio: Vec<f64> = rates
            .iter()
            .zip(&bullmq_best)
            .map(|(ours, theirs)| ours / theirs)
            .collect();
        table.row(vec![
            setup.label(),
            spread(rates, |v| format!("{v:.0}/s")),
            if with_bullmq {
                spread(&ratio, |v| format!("{v:.2}x"))
            } else {
                "-".into()
            },
        ]);
    }
    table.print();
    let mut chart = Chart::new(
        &format!("Peer: drain of {jobs} stored no-op jobs, timed from the first handler start"),
        "jobs/s",
    );
    for (setup, rates) in setups.iter().zip(&rates) {
        chart.bar(&setup.label(), rates);
    }
    chart.write("peer-drain", server, size);
}

async fn steady(server: &RedisServer, store: &RedisStore, size: Size, rounds: usize, with_bullmq: bool) {
    let length = size.pick(Duration::from_secs(2), Duration::from_millis(300));
    let mut table = Table::new(
        &format!(
            "Peer: lag under steady arrival for {length:?}, another process adding jobs due at once, one worker process; median [min–max] over {rounds} interleaved rounds"
        ),
        &["rate", "system", "lag p50", "lag p99", "lag max"],
    );
    let mut systems = vec![Setup {
        system: System::Redefer,
        processes: 1,
        workers: 1,
    }];
    if with_bullmq {
        systems.push(Setup {
            system: System::Bullmq,
            processes: 1,
            workers: 1,
        });
    }
    let mut chart = Chart::new("Peer: lag p99 under steady arrival, one worker process", "ms");
    for rate in [1_000u32, 5_000, 20_000] {
        // BullMQ does not keep up at 5,000/s already: at 20,000/s only ours is measured.
        let systems = &systems[..if rate > 5_000 { 1 } else { systems.len() }];
        let mut lags: Vec<[Vec<f64>; 3]> = vec![Default::default(); systems.len()];
        for round in 0..rounds {
            for (setup, lags) in systems.iter().zip(&mut lags) {
                let name = format!("steady-{rate}-{round}");
                let workers = start_workers(server, store, *setup, &name).await;
                let (rate_s, ms) = (rate.to_string(), length.as_millis().to_string());
                match setup.system {
                    System::Redefer => {
                        let exe = std::env::current_exe().expect("bench binary");
                        let status = Command::new(exe)
                            .args([
                                STEADY_COMMAND,
                                &server.url(),
                                store.prefix().as_str(),
                                &name,
                                &rate_s,
                                &ms,
                            ])
                            .status()
                            .await
                            .expect("start the producer process");
                        assert!(status.success(), "producer process failed");
                        let queue = DelayQueue::<u64, _>::new(store.clone(), &name).expect("queue");
                        wait_until_empty(|| async {
                            queue.operator().stats().await.expect("stats") == QueueStats::default()
                        })
                        .await;
                    }
                    System::Bullmq => {
                        node(&["produce.mjs", "steady", &port(server), &name, &rate_s, &ms]).await;
                        wait_until_empty(|| bullmq_empty(server, &name)).await;
                    }
                }
                let mut run = finish(workers, SystemTime::now()).await;
                for (at, q) in [0.5, 0.99, 1.0].into_iter().enumerate() {
                    lags[at].push(percentile(&mut run.lags, q).as_secs_f64() * 1000.0);
                }
            }
        }
        chart.group(&format!("{rate} jobs/s"));
        for (setup, lags) in systems.iter().zip(&lags) {
            chart.bar(&setup.label(), &lags[1]);
            let ms = |v: f64| format!("{v:.2} ms");
            table.row(vec![
                format!("{rate}/s"),
                setup.label(),
                spread(&lags[0], ms),
                spread(&lags[1], ms),
                spread(&lags[2], ms),
            ]);
        }
    }
    table.print();
    chart.write("peer-lag", server, size);
}

/// What the workers of one run reported.
struct Run {
    /// From the first handler start to the queue seen empty.
    drained: Duration,
    handled: usize,
    lags: Vec<Duration>,
}

/// One worker process's report.
#[derive(serde::Deserialize)]
struct Report {
    /// When its first handler started (ms since the epoch), if any did.
    first_start_ms: Option<f64>,
    handled: usize,
    lags_ms: Vec<f64>,
}

/// A worker process, started and ready.
struct Worker {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

/// Starts the setup's worker processes, waits until each says it is ready, then tells them all
/// to go: a process still starting would otherwise leave the first ones to drain alone.
async fn start_workers(server: &RedisServer, store: &RedisStore, setup: Setup, queue: &str) -> Vec<Worker> {
    let mut workers = Vec::new();
    for _ in 0..setup.processes {
        let mut command = match setup.system {
            System::Redefer => {
                let mut command = Command::new(std::env::current_exe().expect("bench binary"));
                command.args([
                    WORKER_COMMAND,
                    &server.url(),
                    store.prefix().as_str(),
                    queue,
                    &setup.workers.to_string(),
                ]);
                command
            }
            System::Bullmq => {
                let mut command = Command::new("node");
                command
                    .args([
                        "work.mjs",
                        &port(server),
                        queue,
                        &setup.workers.to_string(),
                        &CONCURRENCY.to_string(),
                    ])
                    .current_dir(bullmq_dir());
                command
            }
        };
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start a worker process");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let ready = lines.next_line().await.expect("worker output");
        assert_eq!(ready.as_deref(), Some("ready"), "the worker process started");
        workers.push(Worker { child, lines });
    }
    for worker in &mut workers {
        let stdin = worker.child.stdin.as_mut().expect("piped stdin");
        stdin.write_all(b"go\n").await.expect("tell the worker to go");
        stdin.flush().await.expect("tell the worker to go");
    }
    workers
}

/// Stops the workers (their stdin closes) and gathers their reports; `emptied` is when the
/// queue was seen empty.
async fn finish(workers: Vec<Worker>, emptied: SystemTime) -> Run {
    let mut first_start = f64::INFINITY;
    let mut run = Run {
        drained: Duration::ZERO,
        handled: 0,
        lags: Vec::new(),
    };
    for mut worker in workers {
        drop(worker.child.stdin.take());
        let mut last = None;
        while let Some(line) = worker.lines.next_line().await.expect("worker output") {
            last = Some(line);
        }
        let line = last.expect("the worker reported");
        let report: Report = serde_json::from_str(&line).unwrap_or_else(|error| panic!("{error}: {line}"));
        worker.child.wait().await.expect("worker exit");
        first_start = first_start.min(report.first_start_ms.unwrap_or(f64::INFINITY));
        run.handled += report.handled;
        run.lags.extend(
            report
                .lags_ms
                .iter()
                .map(|ms| Duration::from_secs_f64(ms.max(0.0) / 1000.0)),
        );
    }
    let emptied_ms = emptied.duration_since(UNIX_EPOCH).expect("clock").as_secs_f64() * 1000.0;
    run.drained = Duration::from_secs_f64(((emptied_ms - first_start) / 1000.0).max(1e-6));
    run
}

/// Polls `empty` every millisecond; returns when it first answered yes.
async fn wait_until_empty<F, Fut>(mut empty: F) -> SystemTime
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    loop {
        if empty().await {
            return SystemTime::now();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Whether BullMQ's queue `name` holds no job waiting, active or delayed.
async fn bullmq_empty(server: &RedisServer, name: &str) -> bool {
    let mut pipe = redis::pipe();
    for list in ["wait", "active", "paused"] {
        pipe.cmd("LLEN").arg(format!("bull:{name}:{list}"));
    }
    for set in ["delayed", "prioritized"] {
        pipe.cmd("ZCARD").arg(format!("bull:{name}:{set}"));
    }
    let client = redis::Client::open(server.url()).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
    let counts: Vec<u64> = pipe.query_async(&mut conn).await.expect("BullMQ counts");
    counts.iter().all(|&count| count == 0)
}

fn port(server: &RedisServer) -> String {
    server.port().to_string()
}

fn bullmq_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/bullmq")
}

/// Installs BullMQ's packages with `npm ci` when they are missing.
fn install_bullmq() -> Result<(), String> {
    let dir = bullmq_dir();
    if dir.join("node_modules").exists() {
        return Ok(());
    }
    let installed = std::process::Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&dir)
        .status();
    match installed {
        Ok(status) if status.success() => Ok(()),
        _ => Err("npm ci failed (node and npm needed)".into()),
    }
}

/// Runs one node script of the BullMQ harness to its end.
async fn node(args: &[&str]) {
    let status = Command::new("node")
        .args(args)
        .current_dir(bullmq_dir())
        .status()
        .await
        .expect("node");
    assert!(status.success(), "node {args:?} failed");
}

/// The worker process: `__worker <url> <prefix> <queue> <schedulers>`. Prints "ready", starts
/// its schedulers on a line "go", runs until stdin closes, then prints its report as one JSON
/// line.
pub fn run_worker(args: &[String]) {
    let [url, prefix, queue, schedulers] = args else {
        panic!("usage: {WORKER_COMMAND} <url> <prefix> <queue> <schedulers>");
    };
    let schedulers: usize = schedulers.parse().expect("schedulers");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = store_at(url, prefix).await;
        let queue = DelayQueue::<u64, _>::new(store.clone(), queue.as_str()).expect("queue");
        let seen = Arc::new(Mutex::new((None::<f64>, Vec::<f64>::new())));
        let record = seen.clone();
        let service = LockLayer::new(store, |_: &u64| None::<String>).layer(service_fn(move |_: u64| {
            let now = SystemTime::now();
            let lag = current_job()
                .and_then(|job| now.duration_since(job.due).ok())
                .unwrap_or_default();
            let mut seen = record.lock().expect("seen");
            seen.0
                .get_or_insert(now.duration_since(UNIX_EPOCH).expect("clock").as_secs_f64() * 1000.0);
            seen.1.push(lag.as_secs_f64() * 1000.0);
            async { Ok::<_, Infallible>(()) }
        }));
        let options = SchedulerOptions {
            concurrency: CONCURRENCY,
            batch: CONCURRENCY,
            ..SchedulerOptions::default()
        };
        println!("ready");
        let mut input = BufReader::new(tokio::io::stdin()).lines();
        let go = input.next_line().await.expect("stdin");
        assert_eq!(go.as_deref(), Some("go"), "told to go");
        let handles: Vec<_> = (0..schedulers)
            .map(|_| {
                Scheduler::new(queue.clone(), service.clone())
                    .options(options)
                    .start()
            })
            .collect();
        while input.next_line().await.expect("stdin").is_some() {}
        for handle in handles {
            handle.shutdown().await;
        }
        let (first, lags) = std::mem::take(&mut *seen.lock().expect("seen"));
        let report = serde_json::json!({ "first_start_ms": first, "handled": lags.len(), "lags_ms": lags });
        let mut stdout = tokio::io::stdout();
        stdout
            .write_all(format!("{report}\n").as_bytes())
            .await
            .expect("stdout");
        stdout.flush().await.expect("stdout");
    });
}

/// The steady producer process: `__steady <url> <prefix> <queue> <jobs/s> <ms>`: pushes jobs
/// due at once, rate/1000 per 1 ms tick, one push each (the pacing of BullMQ's producer).
pub fn run_steady_producer(args: &[String]) {
    let [url, prefix, queue, rate, ms] = args else {
        panic!("usage: {STEADY_COMMAND} <url> <prefix> <queue> <jobs/s> <ms>");
    };
    let rate: f64 = rate.parse().expect("rate");
    let length = Duration::from_millis(ms.parse().expect("ms"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = store_at(url, prefix).await;
        let queue = DelayQueue::<u64, _>::new(store, queue.as_str()).expect("queue");
        let total = (rate * length.as_secs_f64()) as u64;
        let start = tokio::time::Instant::now();
        let mut pushed = 0u64;
        while pushed < total {
            let due = ((start.elapsed().as_secs_f64() * rate) as u64).min(total);
            let items: Vec<u64> = (pushed..due).collect();
            let pushes: Vec<_> = items.iter().map(|n| queue.push(n, Duration::ZERO)).collect();
            for push in futures_util::future::join_all(pushes).await {
                push.expect("push");
            }
            pushed = due;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
}
