//! Wake-ups: how a scheduler learns that a job became due earlier than it planned to look.

use tokio::sync::watch;

/// Wakes a scheduler when a job becomes the first due of its queue, pushed by this process or
/// another. Best effort: a scheduler also wakes on its own timers.
#[derive(Debug)]
pub struct Wakeups {
    signal: watch::Receiver<u64>,
    subscription: Option<tokio::task::JoinHandle<()>>,
}

impl Wakeups {
    pub(crate) fn new(
        signal: watch::Receiver<u64>,
        subscription: Option<tokio::task::JoinHandle<()>>,
    ) -> Self {
        Wakeups { signal, subscription }
    }

    /// Wakes when any of `parts` does.
    pub(crate) fn merge(mut parts: Vec<Wakeups>) -> Wakeups {
        if parts.len() == 1 {
            return parts.remove(0);
        }
        let (signal, receiver) = watch::channel(0);
        let forward = tokio::spawn(async move {
            loop {
                futures_util::future::select_all(parts.iter_mut().map(|part| Box::pin(part.next()))).await;
                if signal.send(0).is_err() {
                    return;
                }
            }
        });
        Wakeups::new(receiver, Some(forward))
    }

    /// Resolves at the next wake-up since the last one seen; never, if the store cannot send any.
    pub async fn next(&mut self) {
        if self.signal.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        if let Some(subscription) = &self.subscription {
            subscription.abort();
        }
    }
}
