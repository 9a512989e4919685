//! Scenario: where the time goes. For the lock layer (concurrency 1 and 64, fencing on and
//! off, beside the bare loop; with 4 permits per key, the semaphore) and for a drain of due jobs: the client's CPU per request or
//! job (`getrusage`: user + system time of this process, every thread), the server's time per
//! request or job by command (`INFO commandstats`), and, in a full run on Redis, a flame graph
//! of the client (sampled by pprof, written as SVG to `docs/profile/`).

use std::collections::BTreeMap;
use std::time::Duration;

use redefer::Fencing;
use redefer::semaphore::Permits;

use crate::chart::Chart;
use crate::report::{Table, median, spread};
use crate::support::{RedisServer, Server};
use crate::{Size, lock, queue, redis_info};

/// One measured workload: what it is and how many requests or jobs one run serves.
#[derive(Clone, Copy)]
enum Workload {
    Lock {
        fencing: Fencing,
        concurrency: usize,
    },
    Bare {
        concurrency: usize,
    },
    /// The lock layer with 4 permits per key (a semaphore), fenced, each task on a key of its
    /// own: the semaphore's uncontended path.
    Semaphore {
        concurrency: usize,
    },
    Drain {
        schedulers: usize,
    },
    /// Due jobs claimed and acked one at a time by the store API: a quiet queue's cost per job.
    OneAtATime,
}

impl Workload {
    fn label(self) -> String {
        match self {
            Workload::Lock { fencing, concurrency } => {
                let fencing = if fencing == Fencing::On { "on" } else { "off" };
                format!("lock layer, fencing {fencing}, concurrency {concurrency}")
            }
            Workload::Bare { concurrency } => format!("bare loop, concurrency {concurrency}"),
            Workload::Semaphore { concurrency } => {
                format!("lock layer, 4 permits per key, concurrency {concurrency}")
            }
            Workload::Drain { schedulers } => format!("drain, {schedulers} scheduler of 64 slots"),
            Workload::OneAtATime => "claim + ack one job at a time".to_string(),
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Workload::Drain { .. } | Workload::OneAtATime => "job",
            _ => "request",
        }
    }

    fn file_name(self) -> String {
        match self {
            Workload::Lock { fencing, concurrency } => {
                let fencing = if fencing == Fencing::On {
                    "fenced"
                } else {
                    "unfenced"
                };
                format!("lock-{fencing}-c{concurrency}")
            }
            Workload::Bare { concurrency } => format!("bare-c{concurrency}"),
            Workload::Semaphore { concurrency } => format!("semaphore-c{concurrency}"),
            Workload::Drain { schedulers } => format!("drain-{schedulers}"),
            Workload::OneAtATime => "one-at-a-time".to_string(),
        }
    }
}

/// What one run of a workload cost.
struct Cost {
    /// Client CPU µs per request or job.
    client_us: f64,
    /// Server CPU µs per request or job (`INFO cpu`: commands, scripts and network I/O).
    server_us: f64,
    /// Per command: (calls, server µs) per request or job.
    server: BTreeMap<String, (f64, f64)>,
}

const WORKLOADS: [Workload; 8] = [
    Workload::Lock {
        fencing: Fencing::On,
        concurrency: 1,
    },
    Workload::Lock {
        fencing: Fencing::On,
        concurrency: 64,
    },
    Workload::Lock {
        fencing: Fencing::Off,
        concurrency: 64,
    },
    Workload::Bare { concurrency: 1 },
    Workload::Bare { concurrency: 64 },
    Workload::Semaphore { concurrency: 64 },
    Workload::Drain { schedulers: 1 },
    Workload::OneAtATime,
];

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let rounds = size.pick(5, 1);
    let mut costs: Vec<Vec<Cost>> = WORKLOADS.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (workload, costs) in WORKLOADS.iter().zip(&mut costs) {
            costs.push(measure(server, &store, *workload, size, &format!("profile-{round}")).await);
        }
    }
    let mut summary = Table::new(
        &format!(
            "Where the time goes: client and Redis CPU per request or job; median [min–max] over {rounds} interleaved rounds"
        ),
        &[
            "workload",
            "client CPU",
            "Redis CPU",
            "Redis commands: calls × µs each (commands run by a script or EXEC count in it and again by name)",
        ],
    );
    let us = |v: f64| format!("{v:.1} µs");
    for (workload, costs) in WORKLOADS.iter().zip(&costs) {
        let client: Vec<f64> = costs.iter().map(|cost| cost.client_us).collect();
        let server_total: Vec<f64> = costs.iter().map(|cost| cost.server_us).collect();
        summary.row(vec![
            format!("{} (per {})", workload.label(), workload.unit()),
            spread(&client, us),
            spread(&server_total, us),
            breakdown(costs),
        ]);
    }
    summary.print();
    let mut chart = Chart::new(
        "Where the time goes: CPU per request or job",
        "µs of CPU per request or job",
    );
    for (workload, costs) in WORKLOADS.iter().zip(&costs) {
        chart.group(&workload.label());
        chart.bar(
            "client",
            &costs.iter().map(|cost| cost.client_us).collect::<Vec<_>>(),
        );
        chart.bar(
            "Redis",
            &costs.iter().map(|cost| cost.server_us).collect::<Vec<_>>(),
        );
    }
    chart.write("profile", server, size);
    if !size.smoke() && server.kind() == Server::Redis {
        for workload in [
            WORKLOADS[1],
            WORKLOADS[4],
            WORKLOADS[5],
            WORKLOADS[6],
            WORKLOADS[7],
        ] {
            flame_graph(server, &store, workload, size).await;
        }
    }
}

/// Per command, the median calls and server µs per request or job: `EVALSHA 1.00 × 3.1 µs`.
fn breakdown(costs: &[Cost]) -> String {
    let commands: std::collections::BTreeSet<&String> =
        costs.iter().flat_map(|cost| cost.server.keys()).collect();
    let mut parts: Vec<(f64, String)> = commands
        .into_iter()
        .map(|command| {
            let of = |pick: fn(&(f64, f64)) -> f64| -> f64 {
                median(
                    &costs
                        .iter()
                        .map(|cost| cost.server.get(command).map_or(0.0, pick))
                        .collect::<Vec<_>>(),
                )
            };
            let (calls, usec) = (of(|(calls, _)| *calls), of(|(_, usec)| *usec));
            (
                usec,
                format!(
                    "`{}` {calls:.2} × {:.2} µs",
                    command.to_uppercase(),
                    usec / calls.max(f64::MIN_POSITIVE)
                ),
            )
        })
        // Below a hundredth of a call per unit: the harness's own reads (stats, resets).
        .filter(|(_, part)| !part.contains("` 0.00 ×"))
        .collect();
    parts.sort_by(|a, b| b.0.total_cmp(&a.0));
    parts
        .into_iter()
        .map(|(_, part)| part)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `workload` once, returning what it cost the client and the server.
async fn measure(
    server: &RedisServer,
    store: &redefer::RedisStore,
    workload: Workload,
    size: Size,
    name: &str,
) -> Cost {
    let jobs = match workload {
        Workload::OneAtATime => size.pick(2_000, 100),
        _ => size.pick(20_000, 500),
    };
    // Filled before anything is counted.
    let filled = match workload {
        Workload::Drain { .. } | Workload::OneAtATime => {
            Some(queue::fill_due(store, &format!("{name}-{}", workload.file_name()), jobs).await)
        }
        _ => None,
    };
    let server_cpu_before = redis_info::cpu_time(server).await;
    let (units, cpu) = match (workload, &filled) {
        (Workload::Lock { fencing, concurrency }, _) => {
            let requests = requests(concurrency, size);
            redis_info::reset(server).await;
            let before = cpu_time();
            lock::layer_rate(
                store.clone(),
                fencing,
                concurrency,
                requests,
                lock::Keys::OnePerTask,
            )
            .await;
            (requests, cpu_time() - before)
        }
        (Workload::Semaphore { concurrency }, _) => {
            let requests = requests(concurrency, size);
            redis_info::reset(server).await;
            let before = cpu_time();
            lock::layer_rate(
                Permits::new(store.clone(), 4),
                Fencing::On,
                concurrency,
                requests,
                lock::Keys::OnePerTask,
            )
            .await;
            (requests, cpu_time() - before)
        }
        (Workload::Bare { concurrency }, _) => {
            let requests = requests(concurrency, size);
            redis_info::reset(server).await;
            let before = cpu_time();
            lock::bare_rate(
                store,
                concurrency,
                requests,
                lock::Keys::OnePerTask,
                lock::BareAcquire::Set,
            )
            .await;
            (requests, cpu_time() - before)
        }
        (Workload::Drain { schedulers }, Some(filled)) => {
            let before = cpu_time();
            queue::drain_filled(server, store, filled, jobs, schedulers).await;
            (jobs, cpu_time() - before)
        }
        (Workload::OneAtATime, Some(filled)) => {
            redis_info::reset(server).await;
            let before = cpu_time();
            for _ in 0..jobs {
                let claimed = filled.claim(1, Duration::from_secs(60)).await.expect("claim");
                let leases: Vec<_> = claimed.jobs.iter().map(|job| &job.lease).collect();
                filled.ack_many(&leases).await.expect("ack");
            }
            (jobs, cpu_time() - before)
        }
        (Workload::Drain { .. } | Workload::OneAtATime, None) => unreachable!("its queue is filled above"),
    };
    let units = units as f64;
    let server_cpu = redis_info::cpu_time(server).await - server_cpu_before;
    let server = redis_info::commandstats(server)
        .await
        .into_iter()
        // The harness's own reset and reads.
        .filter(|(command, _, _)| !matches!(command.as_str(), "config|resetstat" | "config" | "info"))
        .map(|(command, calls, usec)| (command, (calls / units, usec / units)))
        .collect();
    Cost {
        client_us: cpu.as_secs_f64() * 1e6 / units,
        server_us: server_cpu.as_secs_f64() * 1e6 / units,
        server,
    }
}

fn requests(concurrency: usize, size: Size) -> usize {
    size.pick(if concurrency == 1 { 5_000 } else { 30_000 }, 640)
}

/// User plus system CPU time of this process so far, every thread.
pub fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable rusage; RUSAGE_SELF is a valid target.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return Duration::ZERO;
        }
        usage.assume_init()
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// How long a flame graph samples its workload, run after run.
const FLAME_SECONDS: Duration = Duration::from_secs(8);

/// Samples the client at 997 Hz through more runs of `workload` and writes the flame
/// graph to `docs/profile/<workload>.svg`.
async fn flame_graph(server: &RedisServer, store: &redefer::RedisStore, workload: Workload, size: Size) {
    let guard = match pprof::ProfilerGuardBuilder::default()
        .frequency(997)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
    {
        Ok(guard) => guard,
        Err(error) => return println!("\nno flame graph for {}: {error}", workload.label()),
    };
    // The kernel's profiling timer ticks at most at its HZ (100 or 250 here): seconds of
    // samples, not one run, make a readable graph.
    let sampling = std::time::Instant::now();
    let mut run = 0;
    while sampling.elapsed() < FLAME_SECONDS {
        measure(server, store, workload, size, &format!("flame-{run}")).await;
        run += 1;
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/profile")
        .join(format!("{}.svg", workload.file_name()));
    let written = guard
        .report()
        .build()
        .map_err(|error| error.to_string())
        .and_then(|report| {
            std::fs::create_dir_all(path.parent().expect("a parent directory"))
                .map_err(|error| error.to_string())?;
            let file = std::fs::File::create(&path).map_err(|error| error.to_string())?;
            report.flamegraph(file).map_err(|error| error.to_string())
        });
    match written {
        Ok(()) => println!(
            "\nflame graph of the client, {}: {}",
            workload.label(),
            path.display()
        ),
        Err(error) => println!("\nno flame graph for {}: {error}", workload.label()),
    }
}
