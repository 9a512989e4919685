//! A standalone scheduler process: run several, on one machine or many, and they share the queue.
//!
//! ```text
//! cargo run --example worker                 # handle due jobs until Ctrl-C or SIGTERM
//! cargo run --example worker -- push 100     # push 100 demo tasks, then exit
//! ```
//!
//! Environment: `REDIS_URL` (default `redis://127.0.0.1:6379`), `REDEFER_CONFIG` (a TOML file
//! in the form of `redefer::Config`; defaults otherwise), `WORKER_NAME` (shown in its output).
//!
//! Each handled task prints one line: `handled <job id> <resource> attempt=<n> fence=<token> by=<worker>`.

use std::convert::Infallible;
use std::time::Duration;

use redefer::{Config, Scheduler, current_job, current_lock};
use serde::{Deserialize, Serialize};
use tower::{Layer, service_fn};

/// A demo task: work on one resource for a while.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Task {
    resource: String,
    work_ms: u64,
}

fn resource_key(task: &Task) -> Option<String> {
    Some(task.resource.clone())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
    let config = match std::env::var("REDEFER_CONFIG") {
        Ok(path) => Config::from_file(path)?,
        Err(_) => Config::default(),
    };
    // Under the configured prefix: the app, every worker and the command see the same keys.
    let store = config.connect(&url).await?;
    let queue = config.queue::<Task, _>(store.clone())?;

    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [command, count] = args.as_slice()
        && command == "push"
    {
        let count: u64 = count.parse()?;
        for n in 0..count {
            let task = Task {
                resource: format!("resource:{}", n % 10),
                work_ms: 20,
            };
            let scheduled = queue.push(&task, Duration::ZERO).await?;
            println!("pushed {} {}", scheduled.id, task.resource);
        }
        return Ok(());
    }

    let name = std::env::var("WORKER_NAME").unwrap_or_else(|_| format!("pid-{}", std::process::id()));
    let handler = service_fn(move |task: Task| {
        let name = name.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(task.work_ms)).await;
            let (job, lock) = (current_job(), current_lock());
            println!(
                "handled {} {} attempt={} fence={} by={name}",
                job.as_ref().map_or("-".to_string(), |job| job.id.to_string()),
                task.resource,
                job.map_or(0, |job| job.attempt),
                lock.and_then(|lock| lock.fence).map_or(0, |fence| fence.0),
            );
            Ok::<_, Infallible>(())
        }
    });
    let service = config
        .lock_layer(store, resource_key, queue.clone())?
        .layer(handler);
    println!("worker ready on queue {}", queue.name());
    let report = Scheduler::new(queue, service)
        .options(config.scheduler)
        .run_until(shutdown_signal())
        .await;
    println!("worker stopped: {report:?}");
    Ok(())
}

/// Ctrl-C, or SIGTERM on Unix.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
