//! Sets of keys worked by real worker processes SIGKILLed at random while they hold sets, beside
//! live callers of the same sets in this process (the storm of `support/storm.rs`): random
//! overlapping sets of 1 to 4 of 6 keys, in random orders. Afterwards: no key ever had two
//! handlers inside (each handler checks that itself, against Redis, for every key of its set),
//! and the storm's own checks (every request ran to its end, within its bound; twice only when
//! a kill cut it off before its acknowledgement).

use std::time::Duration;

use rand::RngExt;
use rand::seq::SliceRandom;
use redefer::RedisStore;
use redefer::lock_set::LockSetLayer;
use redefer::strategy::ConflictStrategy;
use serde::{Deserialize, Serialize};
use tower::{Layer, service_fn};

use crate::storm::{self, Stack, Stacks, TTL, WORK};
use crate::support::Server;

/// The keys the sets are drawn from.
const KEYS: usize = 6;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Transfer {
    n: u64,
    keys: Vec<String>,
}

/// A set of 1 to 4 of the keys, in a random order.
fn random_set(n: u64) -> Transfer {
    let mut keys: Vec<String> = (0..KEYS).map(|k| format!("acct:{k}")).collect();
    keys.shuffle(&mut rand::rng());
    keys.truncate(rand::rng().random_range(1..=4));
    Transfer { n, keys }
}

/// A handler's check-in, atomically: for each key of its set (`KEYS[3..]`, a running set each),
/// drop the runs whose heartbeat ran out (their process died), note this run until `ARGV[2]`
/// ms from now, and count a violation (`KEYS[1]`) when another run is inside.
const CHECK_IN: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 3, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  redis.call('ZADD', KEYS[i], now + tonumber(ARGV[2]), ARGV[1])
  if redis.call('ZCARD', KEYS[i]) > 1 then
    redis.call('INCR', KEYS[1])
  end
end
return 0
";

/// Leaves the running sets (`KEYS[3..]`) and notes the request done (`KEYS[2]`); counts a
/// second end of one request in `KEYS[1]`.
const DONE: &str = r"
for i = 3, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[1])
end
if redis.call('SADD', KEYS[2], ARGV[2]) == 0 then
  redis.call('INCR', KEYS[1])
end
return 0
";

/// The stack every process runs: the set's handler checks in for `WORK`, then notes itself
/// done.
struct Sets;

impl Stacks<Transfer> for Sets {
    fn stack<C>(&self, store: &RedisStore, prefix: &str, strategy: C) -> Stack<Transfer>
    where
        C: ConflictStrategy<Transfer> + Clone + Send + Sync + 'static,
    {
        let conn = store.connection();
        let prefix = prefix.to_string();
        let handler = service_fn(move |transfer: Transfer| {
            let (mut conn, prefix) = (conn.clone(), prefix.clone());
            async move {
                let run = format!("{}:{}", transfer.n, rand::random::<u64>());
                let running: Vec<String> = transfer
                    .keys
                    .iter()
                    .map(|key| format!("{prefix}:test-in:{key}"))
                    .collect();
                // A heartbeat a third of the TTL long, renewed every 50 ms: a dead worker's run
                // leaves the sets before its keys come free, a live one's never does.
                let heartbeat = (TTL / 3).as_millis() as u64;
                let started = tokio::time::Instant::now();
                while started.elapsed() < WORK {
                    let script = ::redis::Script::new(CHECK_IN);
                    let mut check_in = script.prepare_invoke();
                    check_in.key(format!("{prefix}:test-violations")).key("unused");
                    for key in &running {
                        check_in.key(key);
                    }
                    let _: i64 = check_in
                        .arg(&run)
                        .arg(heartbeat)
                        .invoke_async(&mut conn)
                        .await
                        .map_err(|error| error.to_string())?;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let script = ::redis::Script::new(DONE);
                let mut done = script.prepare_invoke();
                done.key(format!("{prefix}:test-twice"))
                    .key(format!("{prefix}:test-done"));
                for key in &running {
                    done.key(key);
                }
                let _: i64 = done
                    .arg(&run)
                    .arg(transfer.n)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|error| error.to_string())?;
                Ok::<_, String>(())
            }
        });
        let keys: fn(&Transfer) -> Option<Vec<String>> = |transfer| Some(transfer.keys.clone());
        Stack::new(
            LockSetLayer::new(store.clone(), keys)
                .ttl(TTL)
                .on_conflict(strategy)
                .layer(handler),
        )
    }
}

/// The worker's side: a scheduler of the transfers in a worker process of the storm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_set_worker_process() {
    storm::worker(Sets, "transfers").await;
}

async fn sigkilled_set_holders_never_overlap_and_every_request_ends(server: Server) {
    let storm = storm::run(
        server,
        &crate::support::test_name(module_path!(), "lock_set_worker_process"),
        "transfers",
        Sets,
        random_set,
    )
    .await;
    assert_eq!(
        storm.counter("test-violations").await,
        0,
        "a key had two handlers inside"
    );
}

crate::support::for_each_server!(sigkilled_set_holders_never_overlap_and_every_request_ends);
