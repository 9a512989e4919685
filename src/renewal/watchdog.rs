//! A thread of the process that starts every renewal when its first extension is due.
//!
//! Not a tokio timer: a timer fires on whichever worker drives the runtime's timers, and when
//! the only busy worker blocks its thread in a handler and the others are parked without the
//! driver (a quiet service), no worker drives the timers or the I/O until the handler returns,
//! and the lease would run out under it. The watchdog does not depend on the runtime: at the
//! deadline it wakes the renewal's starter from its own thread, which spawns the renewal task
//! from outside the runtime; that wakes a parked worker, which then drives the timers and the
//! I/O for it. Later extensions are the renewal task's own timers.
//!
//! What it costs a holder that finishes before its deadline: one insert and one removal in a
//! shared map; the thread sleeps until the earliest deadline, and is woken by a registration
//! only when it sleeps with nothing to watch (it lingers a period first, so steady traffic does
//! not wake it per request).

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::Waker;
use std::time::{Duration, Instant};

/// The watchdog of the process, started with its first registration.
struct Watchdog {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// (deadline, registration number) -> the waker that starts a renewal.
    due: BTreeMap<(Instant, u64), Waker>,
    registered: u64,
    /// When the thread wakes next on its own; `None` while it sleeps until told.
    wakes_at: Option<Instant>,
    /// How far ahead the latest registration was due: how long the thread lingers, once
    /// nothing is left to watch, before it sleeps until told.
    linger: Duration,
}

/// One registration; dropping it withdraws it.
#[derive(Debug)]
pub(super) struct Watched {
    key: (Instant, u64),
}

impl Drop for Watched {
    fn drop(&mut self) {
        let waker = watchdog().lock().due.remove(&self.key);
        // Dropped outside the lock: the starter may hold a store's last handle.
        drop(waker);
    }
}

/// Wakes `start` at `deadline` from the watchdog's thread, unless the registration was
/// dropped before.
pub(super) fn wake_at(deadline: Instant, start: Waker) -> Watched {
    let watchdog = watchdog();
    let mut state = watchdog.lock();
    state.registered += 1;
    let key = (deadline, state.registered);
    state.due.insert(key, start);
    state.linger = deadline.saturating_duration_since(Instant::now());
    if state.wakes_at.is_none_or(|wakes_at| deadline < wakes_at) {
        watchdog.changed.notify_one();
    }
    Watched { key }
}

fn watchdog() -> &'static Watchdog {
    static WATCHDOG: OnceLock<&'static Watchdog> = OnceLock::new();
    WATCHDOG.get_or_init(|| {
        let watchdog: &'static Watchdog = Box::leak(Box::new(Watchdog {
            state: Mutex::default(),
            changed: Condvar::new(),
        }));
        let spawned = std::thread::Builder::new()
            .name("redefer-renewal-watchdog".into())
            .spawn(|| watchdog.run());
        if let Err(error) = spawned {
            // Renewals then start from their tokio timers only, as a busy runtime does anyway.
            tracing::error!(%error, "cannot start the renewal watchdog thread");
        }
        watchdog
    })
}

impl Watchdog {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is one insert or removal: a panic cannot leave the map half-updated.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&self) {
        let mut state = self.lock();
        let mut idle_since: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let mut fired = Vec::new();
            while let Some(entry) = state.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                fired.push(entry.remove());
            }
            let next = state.due.first_key_value().map(|(&(at, _), _)| at);
            let wakes_at = match next {
                Some(at) => {
                    idle_since = None;
                    Some(at)
                }
                // Nothing to watch: linger a period (registrations then come later than the
                // wake-up and need not wake the thread), then sleep until told.
                None => {
                    let since = *idle_since.get_or_insert(now);
                    Some(since + state.linger).filter(|until| *until > now)
                }
            };
            state.wakes_at = wakes_at;
            if !fired.is_empty() {
                drop(state);
                fired.into_iter().for_each(Waker::wake);
                state = self.lock();
                continue;
            }
            state = match wakes_at {
                Some(at) => {
                    let timeout = at.saturating_duration_since(now);
                    self.changed
                        .wait_timeout(state, timeout)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self.changed.wait(state).unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}
