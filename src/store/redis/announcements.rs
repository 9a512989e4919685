//! The one pub/sub subscriber a Redis store shares among the callers waiting in lines: each
//! waiter watches its key's channel; the subscriber subscribes to a channel while anyone
//! watches it, and forwards who the key was handed to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{broadcast, mpsc};

use crate::backoff::Backoff;
use crate::lock::{Handoffs, LISTENING};

/// The channels watched now: channel -> what the subscriber knows of it.
type Watched = Arc<Mutex<HashMap<String, Channel>>>;

/// One watched channel.
struct Channel {
    announcements: broadcast::Sender<String>,
    /// How many watch it.
    watchers: usize,
    /// Whether the subscription to it is made (on the subscriber's current connection).
    listening: bool,
}

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

fn lock(watched: &Watched) -> MutexGuard<'_, HashMap<String, Channel>> {
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
        let (receiver, listening) = {
            let mut watched = lock(&self.watched);
            let entry = watched.entry(channel.clone()).or_insert_with(|| {
                let _ = self.changes.send(Change::Subscribe(channel.clone()));
                Channel {
                    announcements: broadcast::channel(64).0,
                    watchers: 0,
                    listening: false,
                }
            });
            entry.watchers += 1;
            (entry.announcements.subscribe(), entry.listening)
        };
        let guard = Watch {
            announcements: Arc::clone(self),
            channel,
        };
        Handoffs::new(receiver, Some(Box::new(guard)), listening)
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
            entry.watchers -= 1;
            if entry.watchers == 0 {
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
                    listening(&watched, &channels);
                    loop {
                        tokio::select! {
                            change = changes.recv() => {
                                let done = match change {
                                    None => return,
                                    // Subscribed already as the connection opened: nothing to
                                    // tell its watchers again.
                                    Some(Change::Subscribe(channel)) if is_listening(&watched, &channel) => Ok(()),
                                    Some(Change::Subscribe(channel)) => {
                                        let done = sink.subscribe(&channel).await;
                                        if done.is_ok() {
                                            listening(&watched, std::slice::from_ref(&channel));
                                        }
                                        done
                                    }
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
                                if let Some(channel) = lock(&watched).get(message.get_channel_name()) {
                                    let _ = channel.announcements.send(waiter);
                                }
                            }
                        }
                    }
                }
            }
            Err(error) => tracing::debug!(%error, "cannot open the handoff subscription"),
        }
        deaf(&watched);
        let pause = backoff.delay(failures, &mut rand::rng());
        tokio::time::sleep(pause).await;
        failures = failures.saturating_add(1);
    }
}

/// Notes that the subscription to `channels` is made, and tells their watchers (see
/// [`LISTENING`]).
fn listening(watched: &Watched, channels: &[String]) {
    let mut watched = lock(watched);
    for name in channels {
        if let Some(channel) = watched.get_mut(name) {
            channel.listening = true;
            let _ = channel.announcements.send(LISTENING.to_string());
        }
    }
}

/// Whether the subscription to `channel` is made.
fn is_listening(watched: &Watched, channel: &str) -> bool {
    lock(watched)
        .get(channel)
        .is_some_and(|channel| channel.listening)
}

/// Notes that the subscriber's connection is gone: no channel is listened to until it
/// subscribes again.
fn deaf(watched: &Watched) {
    for channel in lock(watched).values_mut() {
        channel.listening = false;
    }
}
