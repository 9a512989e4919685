//! What the lock layer does when Redis misbehaves: unreachable, killed and restarted, a lock
//! deleted by an operator. Each test runs its own `redis-server`.

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redefer::{Error, KeyError, LockLayer, LockLost, RedisStore, StoreError};
use tokio::sync::oneshot;
use tower::{Layer, ServiceExt, service_fn};

use support::{RedisServer, eventually};

fn by_order(order: &u32) -> Option<String> {
    Some(format!("order:{order}"))
}

/// Sets its flag when dropped: shows that a handler's future was dropped, not left running.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A handler that signals when it starts, then runs until dropped.
fn endless_handler() -> (
    impl tower::Service<u32, Response = (), Error = Infallible, Future = impl Send> + Clone + Send + 'static,
    oneshot::Receiver<()>,
    Arc<AtomicBool>,
) {
    let (entered_tx, entered_rx) = oneshot::channel();
    let entered_tx = Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let handler = service_fn(move |_: u32| {
        let entered_tx = entered_tx.clone();
        let guard = DropFlag(flag.clone());
        async move {
            let _guard = guard;
            if let Some(tx) = entered_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            std::future::pending::<Result<(), Infallible>>().await
        }
    });
    (handler, entered_rx, dropped)
}

#[tokio::test]
async fn a_lock_deleted_by_an_operator_ends_the_call_with_lock_lost() {
    let server = RedisServer::start();
    let store = server.store().await;
    let lock_key = store
        .prefix()
        .lock_key(&redefer::LockKey::new("order:1").unwrap());
    let (handler, entered, dropped) = endless_handler();
    let service = LockLayer::new(store, by_order)
        .ttl(Duration::from_millis(300))
        .layer(handler);
    let call = tokio::spawn(service.oneshot(1));
    entered.await.unwrap();

    let deleted: i64 = server.cmd(redis::cmd("DEL").arg(&lock_key)).await;
    assert_eq!(deleted, 1, "the lock was in Redis under {lock_key}");

    match call.await.unwrap() {
        Err(Error::LockLost {
            reason: LockLost::Gone,
            ..
        }) => {}
        other => panic!("expected LockLost, got {other:?}"),
    }
    assert!(dropped.load(Ordering::SeqCst), "the handler's future was dropped");
}

#[tokio::test]
async fn a_server_killed_under_a_running_handler_ends_the_call_before_the_ttl_runs_out() {
    let mut server = RedisServer::start();
    let store = RedisStore::builder()
        .response_timeout(Duration::from_millis(100))
        .connect(&server.url())
        .await
        .unwrap();
    let (handler, entered, dropped) = endless_handler();
    let service = LockLayer::new(store, by_order)
        .ttl(Duration::from_millis(600))
        .layer(handler);
    let call = tokio::spawn(service.oneshot(1));
    entered.await.unwrap();
    server.kill();
    match call.await.unwrap() {
        Err(Error::LockLost {
            reason: LockLost::Unconfirmed,
            ..
        }) => {}
        other => panic!("expected LockLost (unconfirmed), got {other:?}"),
    }
    assert!(dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn an_unreachable_server_is_a_typed_error() {
    let closed_port = {
        let server = RedisServer::start();
        server.port()
    };
    match RedisStore::connect(&format!("redis://127.0.0.1:{closed_port}")).await {
        Err(StoreError::Redis(error)) => {
            assert!(error.is_connection_refusal() || error.is_io_error(), "{error}")
        }
        Ok(_) => panic!("connected to a closed port"),
        Err(other) => panic!("unexpected error {other}"),
    }
    assert!(matches!(
        RedisStore::connect("not a url").await,
        Err(StoreError::Redis(_))
    ));
}

#[tokio::test]
async fn a_prefix_with_braces_is_rejected() {
    assert!(matches!(
        RedisStore::builder().prefix("app:{1}"),
        Err(KeyError::BraceInPrefix { .. })
    ));
    assert!(matches!(
        RedisStore::builder().prefix(""),
        Err(KeyError::Empty { .. })
    ));
}

#[tokio::test]
async fn calls_fail_while_redis_is_down_and_succeed_once_it_is_back() {
    let mut server = RedisServer::start();
    let store = RedisStore::builder()
        .response_timeout(Duration::from_millis(200))
        .connection_timeout(Duration::from_millis(200))
        .connect(&server.url())
        .await
        .unwrap();
    let service =
        LockLayer::new(store, by_order).layer(service_fn(|_: u32| async { Ok::<_, Infallible>("handled") }));

    assert_eq!(service.clone().oneshot(1).await.unwrap().done(), Some("handled"));

    server.kill();
    for _ in 0..3 {
        match service.clone().oneshot(1).await {
            Err(Error::Store(error)) => assert!(error.is_transient(), "{error}"),
            other => panic!("expected a store error while Redis is down, got {other:?}"),
        }
    }

    server.restart();
    let response = eventually(
        Duration::from_secs(10),
        "the same service works once Redis is back",
        || {
            let service = service.clone();
            async move { service.oneshot(1).await.ok().and_then(|outcome| outcome.done()) }
        },
    )
    .await;
    assert_eq!(response, "handled");
}
