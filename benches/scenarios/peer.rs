//! Scenario 3: BullMQ, run by node against the same redis-server, on the same workload:
//! 10,000 no-op jobs, 64 concurrent handlers, due at once (drain) or spread over 2 s.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use redefer::RedisStore;
use redefer::queue::DelayQueue;

use crate::Size;
use crate::promotion::measure;
use crate::report::{Table, per_s};
use crate::support::RedisServer;

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let jobs = size.pick(10_000, 200);
    let mut table = Table::new(
        &format!("Peer: {jobs} delayed no-op jobs, 64 concurrent handlers, one Redis"),
        &["system", "workload", "jobs/s", "lag p50", "lag p99", "lag max"],
    );
    for (workload, spread) in [
        ("due at once", Duration::ZERO),
        (
            "due over 2 s",
            size.pick(Duration::from_secs(2), Duration::from_millis(200)),
        ),
    ] {
        let name = format!("peer-{}", spread.as_millis());
        let mut ours = measure(
            &store,
            &name,
            jobs,
            push_spread(store.clone(), name.clone(), jobs, spread),
        )
        .await;
        let [p50, p99, max] = ours.percentiles();
        table.row(vec![
            "redefer".into(),
            workload.into(),
            ours.jobs_per_s(),
            p50,
            p99,
            max,
        ]);
        match bullmq(server, jobs, spread) {
            Ok(theirs) => table.row(vec![
                "BullMQ".into(),
                workload.into(),
                per_s(theirs.jobs_per_s),
                format!("{:.2} ms", theirs.lag_p50_ms),
                format!("{:.2} ms", theirs.lag_p99_ms),
                format!("{:.2} ms", theirs.lag_max_ms),
            ]),
            Err(why) => table.row(vec![
                "BullMQ".into(),
                workload.into(),
                format!("not run: {why}"),
                String::new(),
                String::new(),
                String::new(),
            ]),
        }
    }
    table.print();
}

/// Pushes `jobs` jobs at once (16 pushers), due evenly over `spread` from now.
async fn push_spread(store: RedisStore, queue_name: String, jobs: usize, spread: Duration) {
    let queue = DelayQueue::<u64, _>::new(store, queue_name).expect("queue");
    let pushers: Vec<_> = (0..16)
        .map(|p| {
            let queue = queue.clone();
            tokio::spawn(async move {
                for n in (p..jobs).step_by(16) {
                    let delay = spread.mul_f64(n as f64 / (jobs.max(2) - 1) as f64);
                    queue.push(&(n as u64), delay).await.expect("push");
                }
            })
        })
        .collect();
    for pusher in pushers {
        pusher.await.expect("pusher");
    }
}

#[derive(serde::Deserialize)]
struct BullmqResult {
    jobs_per_s: f64,
    lag_p50_ms: f64,
    lag_p99_ms: f64,
    lag_max_ms: f64,
}

/// Runs benches/peers/bullmq/delayed.mjs, installing its packages first if they are missing.
fn bullmq(server: &RedisServer, jobs: usize, spread: Duration) -> Result<BullmqResult, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/bullmq");
    if !dir.join("node_modules").exists() {
        let installed = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status();
        if !installed.is_ok_and(|status| status.success()) {
            return Err("npm ci failed (node and npm needed)".into());
        }
    }
    let output = Command::new("node")
        .arg("delayed.mjs")
        .args([
            server.port().to_string(),
            jobs.to_string(),
            spread.as_millis().to_string(),
            "64".into(),
        ])
        .current_dir(&dir)
        .output()
        .map_err(|error| format!("node: {error}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .last()
        .ok_or_else(|| format!("no output: {}", String::from_utf8_lossy(&output.stderr)))?;
    serde_json::from_str(line).map_err(|error| format!("{error}: {line}"))
}
