//! Scenario 7: what an idle scheduler costs Redis.

use std::convert::Infallible;
use std::time::Duration;

use redefer::queue::DelayQueue;
use redefer::{LockLayer, Scheduler};
use tower::{Layer, service_fn};

use crate::Size;
use crate::redis_info;
use crate::report::Table;
use crate::support::RedisServer;

pub async fn run(server: &RedisServer, size: Size) {
    let store = server.store().await;
    let queue = DelayQueue::<u64, _>::new(store.clone(), "idle").expect("queue");
    let service = LockLayer::new(store, |_: &u64| None::<String>)
        .layer(service_fn(|_: u64| async { Ok::<_, Infallible>(()) }));
    let scheduler = Scheduler::new(queue, service).start();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _: () = server
        .cmd(&redis::cmd("CONFIG").arg("RESETSTAT").to_owned())
        .await;
    let window = size.seconds(10);
    tokio::time::sleep(window).await;
    let calls = |command| redis_info::commandstat(server, command, "calls");
    let (evalsha, time, ranges, range) = (
        calls("evalsha").await,
        calls("time").await,
        calls("zrangebyscore").await,
        calls("zrange").await,
    );
    scheduler.shutdown().await;
    let mut table = Table::new(
        &format!("Idle cost: one scheduler on an empty queue, default options, over {window:?}"),
        &["round trips/s (EVALSHA)", "commands/s run inside the script"],
    );
    let seconds = window.as_secs_f64();
    let inside = time + ranges + range;
    table.row(vec![
        format!("{:.2}", evalsha / seconds),
        format!("{:.2}", inside / seconds),
    ]);
    table.print();
}
