//! The pub/sub subscription that wakes schedulers when a job becomes the first due.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;

use crate::backoff::Backoff;

/// Forwards every message on `channel` to `signal`, reconnecting with backoff (to the next of
/// `clients` each time) whenever the subscription fails, until the receiving side is gone. A
/// message missed while reconnecting costs only latency: schedulers also wake on their timers.
pub(super) async fn forward_wakeups(
    clients: Arc<[redis::Client]>,
    channel: String,
    signal: watch::Sender<u64>,
) {
    let backoff = Backoff::exponential(Duration::from_millis(50), Duration::from_secs(5)).with_jitter(0.5);
    let mut failures = 0;
    let mut attempt = 0usize;
    while !signal.is_closed() {
        let client = &clients[attempt % clients.len()];
        attempt = attempt.wrapping_add(1);
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(&channel).await {
                Ok(()) => {
                    failures = 0;
                    // A job may have been pushed while we were not subscribed: wake once.
                    signal.send_modify(|n| *n = n.wrapping_add(1));
                    let mut messages = pubsub.on_message();
                    while messages.next().await.is_some() {
                        signal.send_modify(|n| *n = n.wrapping_add(1));
                    }
                    tracing::debug!(%channel, "wake-up subscription ended; resubscribing");
                }
                Err(error) => tracing::debug!(%channel, %error, "cannot subscribe for wake-ups"),
            },
            Err(error) => tracing::debug!(%channel, %error, "cannot open the wake-up connection"),
        }
        let pause = backoff.delay(failures, &mut rand::rng());
        tokio::time::sleep(pause).await;
        failures = failures.saturating_add(1);
    }
}
