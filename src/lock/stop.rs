//! What a holder hears of newer requests that want its key: the requests to stop that a
//! [`Supersede`](crate::strategy::Supersede) strategy sends, as a signal its handler can await.

use tokio::sync::watch;

use super::LockStore;
use crate::guard::Waiter;
use crate::key::LockKey;

/// Whether a newer request asked the holder to stop; in [`HeldLock`](super::HeldLock).
#[derive(Debug, Clone, Default)]
pub(crate) struct StopSignal(Option<watch::Receiver<bool>>);

impl StopSignal {
    pub(crate) fn is_set(&self) -> bool {
        self.0.as_ref().is_some_and(|signal| *signal.borrow())
    }

    /// Resolves once the signal is set; never, for a holder that does not listen.
    pub(crate) async fn set(&self) {
        match &self.0 {
            Some(signal) => {
                let mut signal = signal.clone();
                // An error means the holding ended without a request: nothing more will come.
                if signal.wait_for(|asked| *asked).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    }
}

/// Listens, while it lives, for requests to stop the holding of `me` on a key: the first one
/// from anyone else sets the signal. Its task ends with it.
pub(crate) struct StopListener {
    signal: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl StopListener {
    /// Starts listening on `key` for the holder `me` (a request it sends itself, superseding
    /// an older holder before it got the key, is not for it).
    pub(crate) fn start<St: LockStore>(store: &St, key: &LockKey, me: Waiter) -> Self {
        let mut requests = store.stop_requests(key);
        let (asked, signal) = watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                match requests.next().await {
                    Some(from) if from == me => continue,
                    // Missed announcements may have held one: stopping is the safe reading.
                    Some(_) | None => {
                        let _ = asked.send(true);
                        return;
                    }
                }
            }
        });
        StopListener { signal, task }
    }

    pub(crate) fn signal(&self) -> StopSignal {
        StopSignal(Some(self.signal.clone()))
    }
}

impl Drop for StopListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}
