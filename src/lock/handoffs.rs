//! Hearing who a key is handed to: how a caller waiting in line learns its turn has come.

use std::time::Duration;

use futures_util::future::select_all;
use tokio::sync::broadcast;
use tokio::time::sleep;

use super::Watching;
use crate::guard::{Waiter, Woken};

/// The handoffs of one key, as the store announces them (pub/sub on Redis, one subscriber
/// shared by every waiter of a store). Best effort: a waiter also polls on its backoff.
pub struct Handoffs {
    announcements: broadcast::Receiver<String>,
    /// Keeps the store's subscription to the key alive while this lives.
    _subscription: Option<Box<dyn Send + Sync>>,
    /// Whether the store already listened when this was made: else it says when it does.
    listening: bool,
    /// A handoff heard while waiting for the store to listen, for the next [`hear`](Self::hear).
    heard: Option<Waiter>,
}

impl std::fmt::Debug for Handoffs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoffs").finish_non_exhaustive()
    }
}

impl Handoffs {
    /// The announcements `announcements` carries, the store listening already (`listening`)
    /// or to say when it does; `subscription` keeps the store's subscription alive.
    pub(crate) fn new(
        announcements: broadcast::Receiver<String>,
        subscription: Option<Box<dyn Send + Sync>>,
        listening: bool,
    ) -> Self {
        Handoffs {
            announcements,
            _subscription: subscription,
            listening,
            heard: None,
        }
    }

    /// Waits, `within` at most, until the store listens to the key: a waiter that joins the
    /// line only then hears every handoff to it. Past `within` (pub/sub unreachable), it joins
    /// anyway: its fallback poll finds the key, and once the store listens it looks again.
    pub(crate) async fn listening(&mut self, within: Duration) {
        if self.listening {
            return;
        }
        let heard = tokio::time::timeout(within, async {
            loop {
                match self.announcements.recv().await {
                    Ok(waiter) if waiter == LISTENING => return None,
                    // The store listens: a handoff already (kept for the next `hear`).
                    Ok(waiter) => return Waiter::from_stored(waiter),
                    Err(broadcast::error::RecvError::Lagged(_)) => return None,
                    Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
                }
            }
        })
        .await;
        if let Ok(heard) = heard {
            self.listening = true;
            self.heard = heard;
        }
    }

    /// Resolves with the next waiter the key is handed to, or `None` when some announcements
    /// were missed (look at the key again); never, when the store can announce nothing more.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redefer::{LockKey, LockToken, MemoryStore};
    /// use redefer::lock::{Fencing, Holders, LockStore};
    /// use redefer::guard::Waiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MemoryStore::new();
    /// let key = LockKey::new("doc:1")?;
    /// let holder = LockToken::random();
    /// let ttl = Duration::from_secs(10);
    /// store.acquire(&key, holder, ttl, Holders::One, None, Fencing::On).await?;
    /// let me = Waiter::caller(LockToken::random());
    /// let mut handoffs = store.line_handoffs(&key, Holders::One);
    /// store.join_line(&key, &me, None, Holders::One, None).await?;
    /// store.release_holding(&key, holder, Holders::One, None).await?;
    /// assert_eq!(handoffs.next().await, Some(me));
    /// # Ok(()) }
    /// ```
    pub async fn next(&mut self) -> Option<Waiter> {
        loop {
            match self.hear().await {
                Heard::HandedTo(waiter) => return Some(waiter),
                Heard::Listening => continue,
                Heard::Missed => return None,
            }
        }
    }

    /// The next thing heard on the key: a handoff, the store now listening (announcements
    /// before it were not heard), or announcements missed.
    pub(crate) async fn hear(&mut self) -> Heard {
        if let Some(waiter) = self.heard.take() {
            return Heard::HandedTo(waiter);
        }
        loop {
            match self.announcements.recv().await {
                Ok(waiter) if waiter == LISTENING => return Heard::Listening,
                Ok(waiter) => match Waiter::from_stored(waiter) {
                    Some(waiter) => return Heard::HandedTo(waiter),
                    None => continue,
                },
                Err(broadcast::error::RecvError::Lagged(_)) => return Heard::Missed,
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}

/// How long a waiter waits for its store to listen to its key before it joins the line
/// anyway (pub/sub unreachable): the fallback poll covers it then.
pub(crate) const LISTEN_WITHIN: Duration = Duration::from_secs(1);

/// What a store sends on a key's announcements once its subscription to the key's channel is
/// made (no waiter has this name). A waiter joins the line once it heard it
/// ([`Handoffs::listening`]); one that did not wait for it (the store slow to listen), or that
/// hears it again (the store listens anew after a lost connection), looks at the key again: a
/// handoff to it may have gone unheard.
pub(crate) const LISTENING: &str = "";

/// What a waiter hears on its key's announcements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Heard {
    /// The key was handed to this waiter.
    HandedTo(Waiter),
    /// The store listens from now on: what was announced before was not heard.
    Listening,
    /// Announcements were missed (too many at once).
    Missed,
}

/// Waits until one of `handoffs` (a key's, or each of a set's group) hands its key to `me`, or
/// may have (unheard), or it is the call's turn to look at the key in `watch` (its holder ran
/// out), or `delay` passes (the fallback poll); the poll alone when not in line.
pub(crate) async fn wait_for_turn(
    handoffs: &mut [Handoffs],
    me: Option<&Waiter>,
    watch: Option<&Watching>,
    delay: Duration,
) -> Woken {
    let (Some(me), false) = (me, handoffs.is_empty()) else {
        sleep(delay).await;
        return Woken::Timer;
    };
    let my_turn = async {
        loop {
            let heard = match &mut *handoffs {
                [one] => one.hear().await,
                many => {
                    select_all(many.iter_mut().map(|handoffs| Box::pin(handoffs.hear())))
                        .await
                        .0
                }
            };
            match heard {
                Heard::HandedTo(waiter) if waiter == *me => return Woken::Turn,
                // Should the waiter it went to never come, its reservation runs out unused.
                Heard::HandedTo(_) => {
                    if let Some(watch) = watch {
                        watch.handed_to_another();
                    }
                }
                // Look at the keys again: a handoff to us may have gone unheard.
                Heard::Listening | Heard::Missed => return Woken::Turn,
            }
        }
    };
    let look = async {
        match watch {
            Some(watch) => watch.my_turn_to_look().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        woken = my_turn => woken,
        () = look => Woken::Look,
        () = sleep(delay) => Woken::Timer,
    }
}
