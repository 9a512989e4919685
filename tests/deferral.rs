//! The suites of what defers, waits and runs later: the delay queue, the scheduler, the
//! policies built on them (coalesce, debounce, supersede, idempotency), Redis and process
//! faults under them, the operators' tools, metrics, logs, Cluster (see `tests/README.md`).
//!
//! One of the two test binaries every file of `tests/` is a module of (the other is
//! `tests/guards.rs`); why two, not one per file: `tests/README.md`.
//! `cargo test --test deferral queue::` runs one suite.

mod support;

/// Scripts and models made comparable (`queue_model`).
#[path = "support/differential.rs"]
mod differential;
/// The breadth-first search over the models (the `*_protocol` suites).
#[path = "support/explore.rs"]
mod explore;

mod cluster;
mod coalesce;
mod coalesce_process_faults;
mod config;
#[cfg(feature = "dashboard")] // the `redefer` command turns it on in the workspace
mod dashboard;
mod debounce;
mod footprint;
mod freed_by_ttl;
mod fuzz_targets;
mod http_example;
mod idempotency;
mod idempotency_process;
mod idempotency_protocol;
mod logs;
mod metrics;
mod operations;
mod pending_protocol;
mod process_faults;
mod properties;
mod queue;
mod queue_model;
mod queue_protocol;
mod redis_faults;
mod redis_queue_faults;
mod reliability;
mod reliability_faults;
mod scheduler;
mod supersede;
mod supersede_process;
