//! The in-process store: the embedded default for a single process, and the reference the
//! Redis store is tested against.

mod guard_states;
mod idempotency;
mod idle;
pub(crate) mod key_records;
pub(crate) mod lock;
mod lock_store;
mod pending;
pub(crate) mod queue;
mod queue_operator;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub(crate) use self::guard_states::GuardState;
use self::guard_states::GuardStates;
use self::lock::LockState;
use self::queue::QueueState;
use crate::error::StoreError;
use crate::guard::Waiter;
use crate::key::LockKey;
use crate::queue::model::Promotion;
use crate::queue::{JobId, QueueName};
use crate::store::DEFAULT_RESERVATION;
use crate::store::handover::HandOver;

/// A store in this process's memory, with the same semantics as [`RedisStore`](super::RedisStore).
///
/// Clones share the same data. Lock TTLs follow tokio's clock; queue due times follow the
/// system clock, as they would Redis's.
///
/// ```
/// use std::time::Duration;
/// use redefer::{LockKey, LockToken, MemoryStore};
/// use redefer::lock::{Acquisition, Fencing, Holders, LockStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let key = LockKey::new("order:42")?;
/// let ttl = Duration::from_secs(5);
/// let first = store.acquire(&key, LockToken::random(), ttl, Holders::One, None, Fencing::On).await?;
/// assert!(matches!(first, Acquisition::Acquired(_)));
/// let second = store.acquire(&key, LockToken::random(), ttl, Holders::One, None, Fencing::On).await?;
/// assert!(matches!(second, Acquisition::Held { .. }));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    locks: Arc<Mutex<LockState>>,
    /// What the other guard kinds keep (the semaphore's permits, the throttle's schedules).
    guards: Arc<GuardStates>,
    queues: Arc<Mutex<HashMap<QueueName, QueueState>>>,
    /// The registry of queues: name -> shards, and whether its activity is counted.
    registered: Arc<Mutex<std::collections::BTreeMap<String, (usize, crate::queue::Counters)>>>,
    /// How long a released key stays reserved for the first in line.
    reservation: Duration,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            locks: Arc::new(Mutex::new(LockState::new(DEFAULT_RESERVATION))),
            guards: Arc::new(GuardStates::new(DEFAULT_RESERVATION)),
            queues: Arc::default(),
            registered: Arc::default(),
            reservation: DEFAULT_RESERVATION,
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long a released key stays reserved for the first in its line (default 2 s): the
    /// time its job has to be claimed and take the key before the next in line gets it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::MemoryStore;
    ///
    /// let store = MemoryStore::new().with_reservation(Duration::from_millis(500));
    /// # let _ = store;
    /// ```
    pub fn with_reservation(self, reservation: Duration) -> Self {
        self.locks().model.reservation = reservation;
        self.guards.reserve_for(reservation);
        MemoryStore { reservation, ..self }
    }

    /// Which store this is: its clones share its state.
    pub(crate) fn instance_id(&self) -> u64 {
        Arc::as_ptr(&self.locks) as usize as u64
    }

    fn locks(&self) -> MutexGuard<'_, LockState> {
        lock_unpoisoned(&self.locks)
    }

    /// What guard kind `T` keeps in this store (and its clones).
    pub(crate) fn state_of<T: GuardState>(&self) -> Arc<Mutex<T>> {
        self.guards.get()
    }

    fn queues(&self) -> MutexGuard<'_, HashMap<QueueName, QueueState>> {
        lock_unpoisoned(&self.queues)
    }
}

/// A panic while one of these mutexes was held cannot leave its data half-updated: no code
/// that can panic runs between the updates of one operation. So the data is still consistent.
pub(crate) fn lock_unpoisoned<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl HandOver for MemoryStore {
    async fn promote(&self, queue: &QueueName, id: &JobId, after: Duration) -> Result<Promotion, StoreError> {
        Ok(self.promote_now(queue, id, after))
    }

    async fn pass_on(&self, key: &LockKey, waiter: &Waiter) -> Result<Vec<Waiter>, StoreError> {
        Ok(self.pass_on_now(key, waiter).into_iter().collect())
    }
}
