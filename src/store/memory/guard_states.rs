//! The state each guard kind keeps in a memory store (its model under a mutex), made at its
//! first use: a guard's in-memory adapter lives in the guard's own folder, and the store names
//! none of them.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::lock_unpoisoned;

/// What a guard kind keeps in a memory store.
pub(crate) trait GuardState: Send + 'static {
    /// The state of a store whose released keys stay reserved for `reservation`.
    fn new(reservation: Duration) -> Self;

    /// The store's reservation changed ([`MemoryStore::with_reservation`](super::MemoryStore::with_reservation)).
    fn reserve_for(&mut self, reservation: Duration) {
        let _ = reservation;
    }
}

/// One guard kind's state, seen without its type: what the registry does with every kind.
trait Slot: Send + Sync {
    fn reserve_for(&self, reservation: Duration);
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

impl<T: GuardState> Slot for Mutex<T> {
    fn reserve_for(&self, reservation: Duration) {
        lock_unpoisoned(self).reserve_for(reservation);
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// The guard kinds' states of one store (and its clones), by type.
pub(crate) struct GuardStates {
    states: Mutex<HashMap<TypeId, Arc<dyn Slot>>>,
    reservation: Mutex<Duration>,
}

impl GuardStates {
    pub(crate) fn new(reservation: Duration) -> Self {
        GuardStates {
            states: Mutex::default(),
            reservation: Mutex::new(reservation),
        }
    }

    /// The state of guard kind `T`, made now if this is its first use.
    pub(crate) fn get<T: GuardState>(&self) -> Arc<Mutex<T>> {
        let slot = {
            let mut states = lock_unpoisoned(&self.states);
            let made =
                || -> Arc<dyn Slot> { Arc::new(Mutex::new(T::new(*lock_unpoisoned(&self.reservation)))) };
            Arc::clone(states.entry(TypeId::of::<T>()).or_insert_with(made))
        };
        match slot.into_any().downcast::<Mutex<T>>() {
            Ok(state) => state,
            // The slot under T's TypeId was made as a `Mutex<T>` above.
            Err(_) => unreachable!("a guard state is kept under its own type"),
        }
    }

    /// Tells every state made so far, and those made later, that released keys stay reserved
    /// for `reservation`.
    pub(crate) fn reserve_for(&self, reservation: Duration) {
        *lock_unpoisoned(&self.reservation) = reservation;
        for slot in lock_unpoisoned(&self.states).values() {
            slot.reserve_for(reservation);
        }
    }
}
