//! The guards' suites: the lock, its handoff and fencing, the semaphore, the read-write lock,
//! sets of keys, the throttle, their models, protocols and faults (see `tests/README.md`).
//!
//! One of the two test binaries every file of `tests/` is a module of (the other is
//! `tests/deferral.rs`); why two, not one per file: `tests/README.md`.
//! `cargo test --test guards lock_layer::` runs one suite.

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
mod hostile_values;
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
