//! What operations cost: the per-minute activity counters and keeping finished jobs
//! (retention) on the claim + ack path, and the dashboard's page time with a deep queue.

use std::time::{Duration, Instant};

use redefer::RedisStore;
use redefer::dashboard::{Dashboard, DashboardOptions};
use redefer::queue::{Counters, DelayQueue, Retention};

use crate::Size;
use crate::redis_info;
use crate::report::{Table, spread};
use crate::support::RedisServer;

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let rounds = size.pick(5, 1);
    // Batches of 100 (a busy scheduler) and of 1 (a quiet one: each job claimed and acked alone).
    ack_path_options(server, &store, size.pick(20_000, 500), 100, rounds).await;
    ack_path_options(server, &store, size.pick(5_000, 100), 1, rounds).await;
    dashboard(server, &store, size.pick(100_000, 2_000), rounds).await;
}

/// One way to run the claim + ack path.
struct AckPath {
    name: &'static str,
    counters: Counters,
    retention: Option<Retention>,
    /// Per round: jobs per second, and the server's script time per job in µs.
    rates: Vec<f64>,
    server_us: Vec<f64>,
}

/// Claim + ack of `jobs` due jobs in batches of `batch`: the default (counters on, finished jobs
/// deleted), the counters off, and a retention; rounds interleaved. Besides the client's rate,
/// the server's own time in the scripts per job (`INFO commandstats`, evalsha).
async fn ack_path_options(
    server: &RedisServer,
    store: &RedisStore,
    jobs: usize,
    batch: usize,
    rounds: usize,
) {
    let keep = Retention::new(100_000, Duration::from_secs(3600));
    let mut paths = [
        AckPath::new("counters on, delete (the default)", Counters::On, None),
        AckPath::new("counters off, delete", Counters::Off, None),
        AckPath::new("counters on, keep (100,000 / 1 h)", Counters::On, Some(keep)),
    ];
    for round in 0..rounds {
        for (n, path) in paths.iter_mut().enumerate() {
            let mut queue = DelayQueue::<u64, _>::new(store.clone(), format!("ack-path-{batch}-{round}-{n}"))
                .unwrap()
                .count_activity(path.counters);
            if let Some(keep) = path.retention {
                queue = queue.retain_finished(keep);
            }
            let items: Vec<u64> = (0..jobs as u64).collect();
            for chunk in items.chunks(1_000) {
                queue.push_many(chunk, Duration::ZERO).await.unwrap();
            }
            redis_info::reset(server).await;
            let started = Instant::now();
            let mut done = 0;
            while done < jobs {
                let claimed = queue.claim(batch, Duration::from_secs(60)).await.unwrap();
                let leases: Vec<_> = claimed.jobs.iter().map(|job| &job.lease).collect();
                done += queue.ack_many(&leases).await.unwrap().len();
            }
            path.rates.push(jobs as f64 / started.elapsed().as_secs_f64());
            path.server_us
                .push(redis_info::commandstat(server, "evalsha", "usec").await / jobs as f64);
        }
    }
    let mut table = Table::new(
        &format!(
            "The claim + ack path: {jobs} due jobs in batches of {batch}; median [min–max] over {rounds} interleaved rounds"
        ),
        &["path", "jobs/s", "vs default", "server µs/job", "vs default"],
    );
    let (base_rates, base_us) = (paths[0].rates.clone(), paths[0].server_us.clone());
    let ratio =
        |values: &[f64], base: &[f64]| -> Vec<f64> { values.iter().zip(base).map(|(v, b)| v / b).collect() };
    for path in &paths {
        table.row(vec![
            path.name.into(),
            spread(&path.rates, |v| format!("{v:.0}/s")),
            spread(&ratio(&path.rates, &base_rates), |v| format!("{v:.2}x")),
            spread(&path.server_us, |v| format!("{v:.2}")),
            spread(&ratio(&path.server_us, &base_us), |v| format!("{v:.2}x")),
        ]);
    }
    table.print();
}

impl AckPath {
    fn new(name: &'static str, counters: Counters, retention: Option<Retention>) -> Self {
        AckPath {
            name,
            counters,
            retention,
            rates: Vec::new(),
            server_us: Vec::new(),
        }
    }
}

/// The dashboard's pages over a queue of `jobs` waiting: served on loopback, fetched 20 times
/// each per round.
async fn dashboard(server: &RedisServer, store: &RedisStore, jobs: usize, rounds: usize) {
    let queue = DelayQueue::<serde_json::Value, _>::new(store.clone(), "deep").unwrap();
    let items: Vec<serde_json::Value> = (0..jobs)
        .map(|n| serde_json::json!({ "order": n, "note": "a typical payload" }))
        .collect();
    for (i, chunk) in items.chunks(1_000).enumerate() {
        // Spread the due times, as a real backlog has them.
        queue
            .push_many(chunk, Duration::from_secs(60 + i as u64))
            .await
            .unwrap();
    }
    let prefix = store.prefix().as_str().to_string();
    // A cursor 50 entries from the end: the deepest page.
    let deep: Vec<(String, u64)> = server
        .cmd(
            redis::cmd("ZRANGE")
                .arg(format!("{prefix}:q:{{deep}}:delayed"))
                .arg(-51)
                .arg(-51)
                .arg("WITHSCORES"),
        )
        .await;
    let (deep_id, deep_ms) = deep[0].clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = Dashboard::new(store.clone(), DashboardOptions::default()).router();
    let serving = tokio::spawn(async move { axum::serve(listener, router).await });
    let http = reqwest::Client::new();
    let pages = [
        ("queues (counts and plots)", format!("{base}/")),
        ("queue, first page of 50", format!("{base}/queues/deep")),
        (
            "queue, last page of 50",
            format!("{base}/queues/deep?set=waiting&after={deep_ms}%2F{deep_id}"),
        ),
        ("job", format!("{base}/queues/deep/jobs/{deep_id}")),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); pages.len()];
    for _ in 0..rounds {
        for (times, (_, url)) in times.iter_mut().zip(&pages) {
            let mut samples = Vec::new();
            for _ in 0..20 {
                let started = Instant::now();
                let reply = http.get(url).send().await.unwrap();
                assert!(reply.status().is_success(), "{url}: {}", reply.status());
                reply.text().await.unwrap();
                samples.push(started.elapsed().as_secs_f64() * 1000.0);
            }
            samples.sort_by(f64::total_cmp);
            times.push(samples[samples.len() / 2]);
        }
    }
    serving.abort();
    let mut table = Table::new(
        &format!(
            "Dashboard: page time with {jobs} jobs waiting (server and loopback HTTP, median of 20 fetches per round); median [min–max] over {rounds} rounds"
        ),
        &["page", "time"],
    );
    for ((label, _), times) in pages.iter().zip(&times) {
        table.row(vec![label.to_string(), spread(times, |v| format!("{v:.2} ms"))]);
    }
    table.print();
}
