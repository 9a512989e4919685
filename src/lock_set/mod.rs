//! Several keys at once: [`LockSetLayer`] runs each request while it holds every key of its
//! set (a transfer's two accounts, an order and its customer, the documents of a merge), all
//! or nothing, and without deadlock whatever the sets and the order of their keys.
//!
//! Laid out as the lock: the layer, the service, the call (`call.rs`: the set's part of the
//! call path every guard shares, `guard/call.rs`), the set's line as a strategy sees it
//! (`line.rs`), and the [`LockSetStore`] operations a store provides.
//!
//! # How a set is taken
//!
//! A set is held as the lock holds each of its keys: the same `SET NX PX` key per lock key,
//! so single-key callers ([`LockLayer`](crate::LockLayer)) and sets exclude each other. The
//! store takes the whole set in one step (one Lua script on Redis, one critical section in
//! memory) or none of it: a request never runs, nor holds anything, with part of its set.
//!
//! A request that waits joins the line of every key of its set in one step, so two waiters
//! that share keys stand in the same order in every line they share; a freed key is handed to
//! the first in its line, as a lock's is. A waiter first in every line of its set waits only
//! for holders: the keys that free stay its own (free, with it first in their lines, handed
//! back to it at any attempt on them) until it has them all. A waiter that
//! others wait before in some line passes on a key handed to it, to the next behind it (it
//! stays first in that line): the key works for others rather than idle. The first to come of
//! all the waiters is first in all its lines and is never passed over, so nobody waits for
//! someone behind it: no deadlock, and no starvation by a stream of single-key requests.
//!
//! # Redis Cluster
//!
//! Keys on one hash slot are taken in one script. A set whose keys are on several slots is
//! taken slot by slot, in the order of the slots: each slot's keys all or nothing, the earlier
//! slots held (and renewed) while the call waits for the next. Every set takes its slots in the
//! same order, so no two wait for each other; the cost is the ordered locking's: the keys of
//! the earlier slots are held, not only reserved, while the later ones are waited for.

mod call;
mod layer;
mod line;
mod memory_store;
pub mod model;
mod name;
mod redis_store;
mod service;
mod store;

pub use self::layer::{KeySetExtractor, LockSetLayer, MAX_SET_KEYS};
pub(crate) use self::name::digest_name;
pub use self::service::LockSetService;
pub use self::store::{HeldKey, LockSetStore, SetAcquisition};
