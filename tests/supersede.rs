//! Supersede (cancel in progress) on every store: the holder hears the newer request, which
//! takes the key as soon as it is let go; holders under a layer that does not supersede hear
//! nothing, and the wait is bounded.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use redefer::lock::LockStore;
use redefer::strategy::Supersede;
use redefer::{Error, LockLayer, current_lock};
use tokio::sync::{Notify, mpsc};
use tower::{Layer, ServiceExt, service_fn};

use support::{StoreClock, for_each_store};

const MS: Duration = Duration::from_millis(1);

fn account(_: &u64) -> Option<String> {
    Some("account:1".to_string())
}

/// A handler that says when it holds the key, then waits until superseded (answering `true`)
/// or let go by `gate` (answering `false`).
fn holding_handler(
    holding: mpsc::UnboundedSender<u64>,
    gate: Arc<Notify>,
) -> impl tower::Service<u64, Response = (u64, bool), Error = std::convert::Infallible, Future: Send> + Clone
{
    service_fn(move |n: u64| {
        let (holding, gate) = (holding.clone(), Arc::clone(&gate));
        async move {
            let lock = current_lock().unwrap();
            let _ = holding.send(n);
            let superseded = tokio::select! {
                () = lock.superseded() => true,
                () = gate.notified() => false,
            };
            assert_eq!(lock.is_superseded(), superseded);
            Ok((n, superseded))
        }
    })
}

async fn only_superseding_layers_listen_and_the_wait_is_bounded<S: LockStore + StoreClock>(store: S) {
    let (holding, mut holds) = mpsc::unbounded_channel();
    let gate = Arc::new(Notify::new());
    let superseding = LockLayer::new(store.clone(), account)
        .on_conflict(Supersede::new().max_wait(300 * MS))
        .layer(holding_handler(holding.clone(), Arc::clone(&gate)));

    // The holder hears the newer request, which runs next, with a higher fence.
    let first = tokio::spawn(superseding.clone().oneshot(1));
    assert_eq!(holds.recv().await, Some(1));
    let second = tokio::spawn(superseding.clone().oneshot(2));
    assert_eq!(first.await.unwrap().unwrap().done(), Some((1, true)));
    assert_eq!(holds.recv().await, Some(2));
    gate.notify_one();
    assert_eq!(second.await.unwrap().unwrap().done(), Some((2, false)));

    // A holder whose layer does not supersede is not listening: the newer request waits its
    // 300 ms, then fails fast.
    let deaf = LockLayer::new(store.clone(), account).layer(holding_handler(holding, Arc::clone(&gate)));
    let third = tokio::spawn(deaf.oneshot(3));
    assert_eq!(holds.recv().await, Some(3));
    let before = store.now().await;
    let refused = superseding.oneshot(4).await;
    assert!(matches!(refused, Err(Error::Locked { .. })), "{refused:?}");
    let waited = store.now().await.duration_since(before).unwrap();
    assert!(waited >= 290 * MS, "fell through after {waited:?}");
    gate.notify_one();
    assert_eq!(third.await.unwrap().unwrap().done(), Some((3, false)));
}

for_each_store!(only_superseding_layers_listen_and_the_wait_is_bounded);
