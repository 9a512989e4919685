//! A `Config` cannot be misused: its prefix reaches every store, queue and layer built from it.

use crate::support;

use crate::support::Shorthand;
use std::convert::Infallible;
use std::time::Duration;

use redefer::{Config, LockKey, LockToken};
use tower::{Layer, ServiceExt, service_fn};

use support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_prefix_reaches_stores_queues_and_layers_built_elsewhere() {
    let server = RedisServer::start();
    let config: Config = toml::from_str("prefix = \"billing\"").unwrap();
    // A store connected without the prefix: the application forgot it.
    let elsewhere = server.store_with_prefix("redefer").await;
    let queue = config.queue::<u64, _>(elsewhere.clone()).unwrap();
    assert_eq!(queue.store().prefix().as_str(), "billing");
    queue.push(&1, Duration::ZERO).await.unwrap();
    let keys: Vec<String> = server.cmd(redis::cmd("KEYS").arg("*")).await;
    assert!(
        !keys.is_empty() && keys.iter().all(|key| key.starts_with("billing:")),
        "every key under the configured prefix: {keys:?}"
    );

    // The lock layer locks under it too: a holder under "billing" blocks it.
    let holder = config.connect(&server.url()).await.unwrap();
    assert_eq!(holder.prefix().as_str(), "billing");
    let key = LockKey::new("order:1").unwrap();
    holder
        .try_acquire(&key, LockToken::random(), Duration::from_secs(30))
        .await
        .unwrap();
    let service = config
        .lock_layer(elsewhere, |_: &u64| Some("order:1".to_string()), queue)
        .unwrap()
        .layer(service_fn(|_: u64| async { Ok::<_, Infallible>(()) }));
    let refused = service.oneshot(1).await;
    assert!(
        matches!(refused, Err(redefer::Error::Locked { .. })),
        "the layer saw the lock under the configured prefix: {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_fencing_reaches_the_layer() {
    let server = RedisServer::start();
    let store = server.store().await;
    for (toml, fenced) in [
        ("", true),
        ("[lock]\nfencing = \"on\"", true),
        ("[lock]\nfencing = \"off\"", false),
    ] {
        let config: Config = toml::from_str(toml).unwrap();
        let queue = config.queue::<u64, _>(store.clone()).unwrap();
        let service = config
            .lock_layer(store.clone(), |n: &u64| Some(format!("order:{n}")), queue)
            .unwrap()
            .layer(service_fn(|_: u64| async {
                Ok::<_, Infallible>(redefer::current_lock().unwrap().fence.is_some())
            }));
        assert_eq!(service.oneshot(1).await.unwrap().done(), Some(fenced), "{toml:?}");
    }
    assert!(toml::from_str::<Config>("[lock]\nfencing = \"maybe\"").is_err());
}
