//! redefer's benchmarks: each scenario against its physical limit or its peers, in one run on
//! one machine, printed as markdown tables (BENCHMARKS.md records them).
//!
//! ```text
//! cargo bench --bench scenarios                    # every scenario, full size (minutes)
//! cargo bench --bench scenarios -- lock queue      # some scenarios
//! cargo bench --bench scenarios -- --smoke         # seconds: keeps the scenarios working
//! ```
//!
//! Each run starts its own `redis-server` on a free port (persistence off), and runs every
//! scenario again on `valkey-server` where Valkey is installed (see `tests/support`).

#[path = "../../tests/support/mod.rs"]
mod support;

mod chart;
mod contention;
mod crawler;
mod deferred_sets;
mod freed_key;
mod handoff;
mod idle;
mod lock;
mod operations;
mod peer;
mod profile;
mod promotion;
mod queue;
mod race;
mod readers;
mod redis_info;
mod report;
mod retry_after;
mod scale;
mod tenants;
mod throttle;
mod transfers;

use std::time::Duration;

use support::{RedisServer, Server};

/// How big a run is: full, or a seconds-long smoke run.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    smoke: bool,
}

impl Size {
    /// `full` normally, `smoke` in a smoke run.
    pub fn pick<T>(self, full: T, smoke: T) -> T {
        if self.smoke { smoke } else { full }
    }

    /// Whether this is a smoke run.
    pub fn smoke(self) -> bool {
        self.smoke
    }

    pub fn seconds(self, full: u64) -> Duration {
        Duration::from_millis(self.pick(full * 1000, 300))
    }
}

const SCENARIOS: [&str; 19] = [
    "lock",
    "queue",
    "peer",
    "promotion",
    "scale",
    "contention",
    "handoff",
    "idle",
    "operations",
    "throttle",
    "retry_after",
    "profile",
    "transfers",
    "readers",
    "crawler",
    "tenants",
    "race",
    "deferred_sets",
    "freed_key",
];

/// The flags a run takes: `--smoke`, and the `--bench` that `cargo bench` passes.
const FLAGS: [&str; 2] = ["--smoke", "--bench"];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The bench binary re-executed as a process of a scenario.
    match args.first().map(String::as_str) {
        Some(promotion::PRODUCER_COMMAND) => return promotion::run_producer(&args[1..]),
        Some(peer::WORKER_COMMAND) => return peer::run_worker(&args[1..]),
        Some(peer::STEADY_COMMAND) => return peer::run_steady_producer(&args[1..]),
        _ => {}
    }
    // A misspelt name ran every scenario for many minutes (and redrew every chart): what is
    // not a scenario nor a flag of ours is refused, with the names there are.
    if let Some(unknown) = args
        .iter()
        .find(|arg| !SCENARIOS.contains(&arg.as_str()) && !FLAGS.contains(&arg.as_str()))
    {
        eprintln!(
            "unknown scenario or flag {unknown:?}\nusage: cargo bench --bench scenarios -- [--smoke] [SCENARIO...]\nscenarios: {}",
            SCENARIOS.join(" ")
        );
        std::process::exit(2);
    }
    let size = Size {
        smoke: args.iter().any(|arg| arg == "--smoke"),
    };
    // `cargo bench` passes `--bench`; names select scenarios.
    let chosen: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|arg| SCENARIOS.contains(arg))
        .collect();
    let chosen = if chosen.is_empty() {
        SCENARIOS.to_vec()
    } else {
        chosen
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        report::machine();
        // Every scenario on each server: Redis, and Valkey where it is installed.
        for server_kind in [Server::Redis, Server::Valkey] {
            if !server_kind.available() {
                continue;
            }
            println!("\n## On {}", report::server_version(server_kind));
            for scenario in &chosen {
                // A fresh server per scenario: one scenario's keys and memory do not weigh on the next.
                let server = RedisServer::start_of(server_kind);
                match *scenario {
                    "lock" => lock::run(&server, size).await,
                    "queue" => queue::run(&server, size).await,
                    "peer" => peer::run(&server, size).await,
                    "promotion" => promotion::run(&server, size).await,
                    "scale" => scale::run(&server, size).await,
                    "contention" => contention::run(&server, size).await,
                    "handoff" => handoff::run(&server, size).await,
                    "idle" => idle::run(&server, size).await,
                    "operations" => operations::run(&server, size).await,
                    "throttle" => throttle::run(&server, size).await,
                    "retry_after" => retry_after::run(&server, size).await,
                    "profile" => profile::run(&server, size).await,
                    "transfers" => transfers::run(&server, size).await,
                    "readers" => readers::run(&server, size).await,
                    "crawler" => crawler::run(&server, size).await,
                    "tenants" => tenants::run(&server, size).await,
                    "race" => race::run(&server, size).await,
                    "deferred_sets" => deferred_sets::run(&server, size).await,
                    "freed_key" => freed_key::run(&server, size).await,
                    _ => unreachable!("filtered against SCENARIOS"),
                }
            }
        }
    });
}
