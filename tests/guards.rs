//! The guards' suites: the lock, its handoff and fencing, the semaphore, the read-write lock,
//! sets of keys, the throttle, their models, protocols and faults (see `tests/README.md`).
//!
//! Each file of `tests/` is a module of one of two test binaries (this one and
//! `tests/deferral.rs`): a binary compiles the shared harness (`support`) and the library's
//! generic code once and links once, where one binary per file did both some fifty times,
//! most of a clean `cargo test`'s build; two build side by side on two cores. `cargo test --test guards
//! lock_layer::` runs one suite.

mod support;

/// Scripts and models made comparable (the `*_model` suites).
#[path = "support/differential.rs"]
mod differential;
/// The breadth-first search over the models (the `*_protocol` suites).
#[path = "support/explore.rs"]
mod explore;
/// Holdings seen from outside, and the checks on them.
#[path = "support/holdings.rs"]
mod holdings;
/// The storm of SIGKILLs the process-fault suites of sets and the read-write lock run in.
#[path = "support/storm.rs"]
mod storm;

mod acl;
mod handoff;
mod handoff_properties;
mod held_by_caller;
mod line_cap;
mod lock_layer;
mod lock_model;
mod lock_protocol;
mod lock_set;
mod lock_store;
mod permit_model;
mod permit_protocol;
mod policies_properties;
mod read_write;
mod semaphore;
mod semaphore_process_faults;
mod semaphore_properties;
mod throttle;
mod throttle_model;
mod throttle_protocol;
