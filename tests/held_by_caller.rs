//! A call for a key its caller already holds, on every store: refused at once with
//! `Error::HeldByCaller`, whatever the strategy (under `Retry` it waited for its own caller and
//! failed as `Locked`), from the handler's task and from a task it spawned with its holding
//! (`HeldLock::scope`), for the mutex and the semaphore alike; a call for another key, through
//! another store, or under a holding that has ended is not the caller's and runs.

use crate::support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex, OnceLock};

use redefer::lock::LockStore;
use redefer::strategy::Retry;
use redefer::{Backoff, Error, LockLayer, MemoryStore, Outcome, current_lock};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt, service_fn};

use support::for_each_store;

/// An order, and what its handler does under the order's lock.
#[derive(Clone, Copy)]
struct Request {
    order: u32,
    then: Then,
}

#[derive(Clone, Copy)]
enum Then {
    Return,
    /// Calls the stack for this order from the handler's task.
    Call(u32),
    /// Calls the stack for this order from a task the handler spawns with its holding.
    Spawn(u32),
}

type Stack = BoxCloneSyncService<Request, Outcome<String>, Error<Infallible>>;
type Orders = BoxCloneSyncService<u32, Outcome<String>, Error<Infallible>>;
/// The signal that lets a spawned call go, and the call.
type Later = Arc<Mutex<Option<(oneshot::Sender<()>, JoinHandle<String>)>>>;

/// What a call through the stack came to, as text a test compares.
fn told(result: Result<Outcome<String>, Error<Infallible>>) -> String {
    match result {
        Ok(Outcome::Done(said)) => said,
        Err(Error::HeldByCaller { key }) => format!("held by caller: {key}"),
        other => format!("{other:?}"),
    }
}

/// A lock stack (`permits` per key, or a mutex) whose handler calls the stack itself as its
/// request says, waiting for a held key with `Retry`.
fn stack<St: LockStore>(store: St, permits: Option<u32>) -> Stack {
    let itself: Arc<OnceLock<Stack>> = Arc::default();
    let handler = service_fn({
        let itself = Arc::clone(&itself);
        move |request: Request| {
            let again = itself.get().expect("the stack is built").clone();
            async move {
                let inner = |order| Request {
                    order,
                    then: Then::Return,
                };
                Ok::<_, Infallible>(match request.then {
                    Then::Return => "ran".to_string(),
                    Then::Call(order) => told(again.oneshot(inner(order)).await),
                    Then::Spawn(order) => {
                        let lock = current_lock().expect("runs under the lock");
                        let call = tokio::spawn(lock.scope(again.oneshot(inner(order))));
                        told(call.await.expect("the spawned call ends"))
                    }
                })
            }
        }
    });
    let layer = LockLayer::new(store, |request: &Request| {
        Some(format!("order:{}", request.order))
    })
    .on_conflict(Retry::new(Backoff::default()));
    let stack = match permits {
        Some(permits) => Stack::new(layer.permits(permits).layer(handler)),
        None => Stack::new(layer.layer(handler)),
    };
    assert!(itself.set(stack.clone()).is_ok(), "built once");
    stack
}

async fn a_handler_calling_for_its_own_key_is_refused_at_once<St: LockStore>(store: St) {
    let orders = stack(store, None);
    let request = Request {
        order: 1,
        then: Then::Call(1),
    };
    assert_eq!(told(orders.oneshot(request).await), "held by caller: order:1");
}

async fn a_task_spawned_with_the_holding_is_refused_at_once<St: LockStore>(store: St) {
    let orders = stack(store, None);
    let request = Request {
        order: 1,
        then: Then::Spawn(1),
    };
    assert_eq!(told(orders.oneshot(request).await), "held by caller: order:1");
}

async fn a_permit_holder_calling_for_its_own_key_is_refused_at_once<St: LockStore>(store: St) {
    let tenants = stack(store, Some(4));
    for then in [Then::Call(1), Then::Spawn(1)] {
        let request = Request { order: 1, then };
        assert_eq!(
            told(tenants.clone().oneshot(request).await),
            "held by caller: order:1"
        );
    }
}

async fn a_call_for_another_key_runs_inside<St: LockStore>(store: St) {
    let orders = stack(store, None);
    for then in [Then::Call(2), Then::Spawn(2)] {
        let request = Request { order: 1, then };
        assert_eq!(told(orders.clone().oneshot(request).await), "ran");
    }
}

/// A task that carried the holding past its handler's return holds nothing: its call for the
/// key takes the lock as anyone's would.
async fn a_holding_that_ended_is_nobodys<St: LockStore>(store: St) {
    let later: Later = Arc::default();
    let itself: Arc<OnceLock<Orders>> = Arc::default();
    let handler = service_fn({
        let (later, itself) = (Arc::clone(&later), Arc::clone(&itself));
        move |order: u32| {
            let again = itself.get().expect("the stack is built").clone();
            let later = Arc::clone(&later);
            async move {
                if order == 1 {
                    let (go, wait) = oneshot::channel::<()>();
                    let lock = current_lock().expect("runs under the lock");
                    let call = tokio::spawn(lock.scope(async move {
                        let _ = wait.await;
                        match again.oneshot(2).await {
                            Ok(Outcome::Done(said)) => said,
                            other => format!("{other:?}"),
                        }
                    }));
                    *later.lock().unwrap() = Some((go, call));
                }
                Ok::<_, Infallible>(format!("order {order} ran"))
            }
        }
    });
    // Orders 1 and 2 share one key.
    let stack = Orders::new(
        LockLayer::new(store, |_: &u32| Some("order:shared".to_string()))
            .on_conflict(Retry::new(Backoff::default()))
            .layer(handler),
    );
    assert!(itself.set(stack.clone()).is_ok(), "built once");
    assert_eq!(
        stack.oneshot(1).await.unwrap().done().as_deref(),
        Some("order 1 ran")
    );
    let (go, call) = later
        .lock()
        .unwrap()
        .take()
        .expect("the handler spawned its call");
    go.send(()).unwrap();
    assert_eq!(call.await.unwrap(), "order 2 ran");
}

for_each_store!(
    a_handler_calling_for_its_own_key_is_refused_at_once,
    a_task_spawned_with_the_holding_is_refused_at_once,
    a_permit_holder_calling_for_its_own_key_is_refused_at_once,
    a_call_for_another_key_runs_inside,
    a_holding_that_ended_is_nobodys,
);

/// What a handler under the lock of `order:1` in `outer` gets from `inner` for the same key.
async fn same_key_through(outer: MemoryStore, inner: MemoryStore) -> String {
    let inner = stack(inner, None);
    let handler = service_fn(move |order: u32| {
        let inner = inner.clone();
        async move {
            Ok::<_, Infallible>(told(
                inner
                    .oneshot(Request {
                        order,
                        then: Then::Return,
                    })
                    .await,
            ))
        }
    });
    let orders = LockLayer::new(outer, |order: &u32| Some(format!("order:{order}"))).layer(handler);
    orders
        .oneshot(1)
        .await
        .unwrap()
        .done()
        .expect("the outer call runs")
}

/// The same key name in another store is another lock, which the inner call takes; through a
/// clone of the caller's store, it is the caller's own.
#[tokio::test]
async fn the_same_key_in_another_store_is_another_lock() {
    assert_eq!(
        same_key_through(MemoryStore::new(), MemoryStore::new()).await,
        "ran"
    );
    let store = MemoryStore::new();
    assert_eq!(
        same_key_through(store.clone(), store).await,
        "held by caller: order:1"
    );
}
