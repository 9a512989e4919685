//! The guide: a chapter per guard and per concern, each with examples compiled by `cargo test`.
//!
//! Start with the crate's front page (a first program: a lock with a strategy), then read the
//! chapter of the guard you need:
//!
//! | chapter | what it answers |
//! |---|---|
//! | [`strategies`] | what a request does when its key is taken: fail fast, retry in line, defer, switch, coalesce, supersede; the handoff in arrival order |
//! | [`deferral`] | the delay queue and the scheduler: jobs, leases, retries, the dead-letter set; groups and fair shares; the queue's Redis keys |
//! | [`lock`] | how the mutex works: `SET NX PX`, fencing tokens, renewal, release on every exit path, its Redis keys |
//! | [`semaphore`] | N holders per key |
//! | [`sets`] | several keys at once |
//! | [`read_write`] | readers beside writers |
//! | [`throttle`] | a rate per key, booked slots, and keys an upstream closes |
//! | [`what_waits`] | caps on a key's line, debounce, coalesce, supersede, idempotency |
//! | [`configuration`] | a service described in TOML |
//! | [`errors`] | what each error means and what to do about it |
//! | [`guarantees`] | what holds under crashes, restarts, failovers and a full Redis, and what does not |
//! | [`operations`] | the `redefer` command, the dashboard, metrics, logs and traces |
//! | [`security`] | TLS, a least-privilege ACL user, what the dashboard exposes |
//! | [`scale`] | Redis Cluster, shards, many schedulers |
//! | [`upgrading`] | the changelog: what changed in each release, and how to move |

#[doc = include_str!("strategies.md")]
pub mod strategies {}

#[doc = include_str!("deferral.md")]
pub mod deferral {}

#[doc = include_str!("lock.md")]
pub mod lock {}

#[doc = include_str!("semaphore.md")]
pub mod semaphore {}

#[doc = include_str!("sets.md")]
pub mod sets {}

#[doc = include_str!("read_write.md")]
pub mod read_write {}

#[doc = include_str!("throttle.md")]
pub mod throttle {}

#[doc = include_str!("what_waits.md")]
pub mod what_waits {}

#[doc = include_str!("configuration.md")]
pub mod configuration {}

#[doc = include_str!("errors.md")]
pub mod errors {}

#[doc = include_str!("guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("operations.md")]
pub mod operations {}

#[doc = include_str!("security.md")]
pub mod security {}

#[doc = include_str!("scale.md")]
pub mod scale {}

#[doc = include_str!("../../CHANGELOG.md")]
pub mod upgrading {}
