//! The one pub/sub subscriber a Redis store shares among the callers waiting in lines: each
//! waiter watches its key's channel; the subscriber subscribes to a channel while anyone
//! watches it, and forwards who the key was handed to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{broadcast, mpsc};

use crate::backoff::Backoff;
use crate::lock::Handoffs;

/// The channels watched now: channel -> (its announcements, how many watch it).
type Watched = Arc<Mutex<HashMap<String, (broadcast::Sender<String>, usize)>>>;

/// A change of the subscription, for the subscriber task.
enum Change {
    Subscribe(String),
    Unsubscribe(String),
}

pub(super) struct Announcements {
    watched: Watched,
    changes: mpsc::UnboundedSender<Change>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Announcements {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(watched: &Watched) -> MutexGuard<'_, HashMap<String, (broadcast::Sender<String>, usize)>> {
    // Each update is one insert or remove: a panic cannot leave the map half-updated.
    watched.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Announcements {
    /// Starts the subscriber on the current runtime, connecting through `clients` in turn.
    pub(super) fn start(clients: Arc<[redis::Client]>) -> Arc<Self> {
        let watched = Watched::default();
        let (changes, incoming) = mpsc::unbounded_channel();
        let task = tokio::spawn(subscribe(clients, Arc::clone(&watched), incoming));
        Arc::new(Announcements {
            watched,
            changes,
            task,
        })
    }

    /// Whether the subscriber still runs: its runtime may have been shut down.
    pub(super) fn is_alive(&self) -> bool {
        !self.task.is_finished()
    }

    /// The announcements on `channel`, while the returned value lives.
    pub(super) fn watch(self: &Arc<Self>, channel: String) -> Handoffs {
        let receiver = {
            let mut watched = lock(&self.watched);
            let entry = watched.entry(channel.clone()).or_insert_with(|| {
                let _ = self.changes.send(Change::Subscribe(channel.clone()));
                (broadcast::channel(64).0, 0)
            });
            entry.1 += 1;
            entry.0.subscribe()
        };
        let guard = Watch {
            announcements: Arc::clone(self),
            channel,
        };
        Handoffs::new(receiver, Some(Box::new(guard)))
    }
}

/// One watcher of a channel; the last one gone unsubscribes.
struct Watch {
    announcements: Arc<Announcements>,
    channel: String,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut watched = lock(&self.announcements.watched);
        if let Some(entry) = watched.get_mut(&self.channel) {
            entry.1 -= 1;
            if entry.1 == 0 {
                watched.remove(&self.channel);
                let _ = self
                    .announcements
                    .changes
                    .send(Change::Unsubscribe(self.channel.clone()));
            }
        }
    }
}

/// The subscriber: keeps one pub/sub connection subscribed to the watched channels, reconnecting
/// with backoff (to the next client each time). An announcement missed meanwhile costs latency
/// only: waiters also poll on their backoff.
async fn subscribe(
    clients: Arc<[redis::Client]>,
    watched: Watched,
    mut changes: mpsc::UnboundedReceiver<Change>,
) {
    let backoff = Backoff::exponential(Duration::from_millis(50), Duration::from_secs(5)).with_jitter(0.5);
    let mut failures = 0;
    let mut attempt = 0usize;
    loop {
        let client = &clients[attempt % clients.len()];
        attempt = attempt.wrapping_add(1);
        match client.get_async_pubsub().await {
            Ok(pubsub) => {
                let (mut sink, mut stream) = pubsub.split();
                let channels: Vec<String> = lock(&watched).keys().cloned().collect();
                let subscribed = channels.is_empty() || sink.subscribe(&channels).await.is_ok();
                if subscribed {
                    failures = 0;
                    loop {
                        tokio::select! {
                            change = changes.recv() => {
                                let done = match change {
                                    None => return,
                                    Some(Change::Subscribe(channel)) => sink.subscribe(channel).await,
                                    Some(Change::Unsubscribe(channel)) => sink.unsubscribe(channel).await,
                                };
                                if let Err(error) = done {
                                    tracing::debug!(%error, "handoff subscription failed; reconnecting");
                                    break;
                                }
                            }
                            message = stream.next() => {
                                let Some(message) = message else { break };
                                let Ok(waiter) = message.get_payload::<String>() else { continue };
                                if let Some((sender, _)) = lock(&watched).get(message.get_channel_name()) {
                                    let _ = sender.send(waiter);
                                }
                            }
                        }
                    }
                }
            }
            Err(error) => tracing::debug!(%error, "cannot open the handoff subscription"),
        }
        let pause = backoff.delay(failures, &mut rand::rng());
        tokio::time::sleep(pause).await;
        failures = failures.saturating_add(1);
    }
}
