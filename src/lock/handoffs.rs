//! Hearing who a key is handed to: how a caller waiting in line learns its turn has come.

use tokio::sync::broadcast;

use super::Waiter;

/// The handoffs of one key, as the store announces them (pub/sub on Redis, one subscriber
/// shared by every waiter of a store). Best effort: a waiter also polls on its backoff.
pub struct Handoffs {
    announcements: broadcast::Receiver<String>,
    /// Keeps the store's subscription to the key alive while this lives.
    _subscription: Option<Box<dyn Send + Sync>>,
}

impl std::fmt::Debug for Handoffs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoffs").finish_non_exhaustive()
    }
}

impl Handoffs {
    pub(crate) fn new(
        announcements: broadcast::Receiver<String>,
        subscription: Option<Box<dyn Send + Sync>>,
    ) -> Self {
        Handoffs {
            announcements,
            _subscription: subscription,
        }
    }

    /// Resolves with the next waiter the key is handed to, or `None` when some announcements
    /// were missed (look at the key again); never, when the store can announce nothing more.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::{LockKey, LockToken, MemoryStore};
    /// use redefer::lock::{LockStore, Waiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let key = LockKey::new("doc:1")?;
    /// let holder = LockToken::random();
    /// store.try_acquire(&key, holder, Duration::from_secs(10)).await?;
    /// let me = Waiter::caller(LockToken::random());
    /// let mut handoffs = store.handoffs(&key);
    /// store.join(&key, &me, None).await?;
    /// store.release(&key, holder).await?;
    /// assert_eq!(handoffs.next().await, Some(me));
    /// # Ok(()) }
    /// ```
    pub async fn next(&mut self) -> Option<Waiter> {
        loop {
            match self.announcements.recv().await {
                Ok(waiter) => match Waiter::from_stored(waiter) {
                    Some(waiter) => return Some(waiter),
                    None => continue,
                },
                Err(broadcast::error::RecvError::Lagged(_)) => return None,
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}
