//! Readers and writers worked by real worker processes SIGKILLed at random while they hold
//! keys, beside live callers of the same keys in this process (the storm of
//! `support/storm.rs`): requests that read or write one of two documents at random (a quarter
//! write). Afterwards: a writer never had anyone beside it (each handler checks that itself,
//! against Redis), readers did share, and the storm's own checks (every request ran to its
//! end, within its bound; twice only when a kill cut it off before its acknowledgement).

use std::time::Duration;

use rand::RngExt;
use redefer::RedisStore;
use redefer::read_write::{Access, ReadWriteLayer};
use redefer::strategy::ConflictStrategy;
use serde::{Deserialize, Serialize};
use tower::{Layer, service_fn};

use crate::storm::{self, Stack, Stacks, TTL, WORK};
use crate::support::Server;

/// The documents the requests read and write.
const DOCS: u64 = 2;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Request {
    n: u64,
    doc: String,
    writes: bool,
}

/// A read (three in four) or a write of a random document.
fn random_request(n: u64) -> Request {
    Request {
        n,
        doc: format!("doc:{}", rand::rng().random_range(0..DOCS)),
        writes: rand::rng().random_bool(0.25),
    }
}

/// A handler's check-in, atomically: drop the runs of its document whose heartbeat ran out
/// (their process died) from its readers (`KEYS[2]`) and writers (`KEYS[3]`), note this run
/// (`ARGV[1]`) among its own until `ARGV[2]` ms from now, and count a violation (`KEYS[1]`)
/// when a writer (`ARGV[3]` = '1') is not alone or a reader is beside a writer; count a reader
/// beside readers in `KEYS[4]`.
const CHECK_IN: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local writes = ARGV[3] == '1'
redis.call('ZADD', writes and KEYS[3] or KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
local readers, writers = redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3])
if (writes and readers + writers > 1) or (not writes and writers > 0) then
  redis.call('INCR', KEYS[1])
end
if not writes and readers > 1 then
  redis.call('INCR', KEYS[4])
end
return 0
";

/// Leaves the running set (`KEYS[3]`) and notes the request done (`KEYS[2]`); counts a second
/// end of one request in `KEYS[1]`.
const DONE: &str = r"
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('SADD', KEYS[2], ARGV[2]) == 0 then
  redis.call('INCR', KEYS[1])
end
return 0
";

/// The stack every process runs: the handler checks in for `WORK`, then notes itself done.
struct Documents;

impl Stacks<Request> for Documents {
    fn stack<C>(&self, store: &RedisStore, prefix: &str, strategy: C) -> Stack<Request>
    where
        C: ConflictStrategy<Request> + Clone + Send + Sync + 'static,
    {
        let conn = store.connection();
        let prefix = prefix.to_string();
        let handler = service_fn(move |request: Request| {
            let (mut conn, prefix) = (conn.clone(), prefix.clone());
            async move {
                let run = format!("{}:{}", request.n, rand::random::<u64>());
                let readers = format!("{prefix}:test-readers:{}", request.doc);
                let writers = format!("{prefix}:test-writers:{}", request.doc);
                let mine = if request.writes { &writers } else { &readers };
                // A heartbeat a third of the TTL long, renewed every 50 ms: a dead worker's run
                // leaves the sets before its holding comes free, a live one's never does.
                let heartbeat = (TTL / 3).as_millis() as u64;
                let started = tokio::time::Instant::now();
                while started.elapsed() < WORK {
                    let _: i64 = ::redis::Script::new(CHECK_IN)
                        .key(format!("{prefix}:test-violations"))
                        .key(&readers)
                        .key(&writers)
                        .key(format!("{prefix}:test-shared"))
                        .arg(&run)
                        .arg(heartbeat)
                        .arg(if request.writes { "1" } else { "0" })
                        .invoke_async(&mut conn)
                        .await
                        .map_err(|error| error.to_string())?;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let _: i64 = ::redis::Script::new(DONE)
                    .key(format!("{prefix}:test-twice"))
                    .key(format!("{prefix}:test-done"))
                    .key(mine)
                    .arg(&run)
                    .arg(request.n)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(|error| error.to_string())?;
                Ok::<_, String>(())
            }
        });
        let doc: fn(&Request) -> Option<String> = |request| Some(request.doc.clone());
        let access: fn(&Request) -> Access = |request| {
            if request.writes {
                Access::Write
            } else {
                Access::Read
            }
        };
        Stack::new(
            ReadWriteLayer::new(store.clone(), doc, access)
                .ttl(TTL)
                .on_conflict(strategy)
                .layer(handler),
        )
    }
}

/// The worker's side: a scheduler of the requests in a worker process of the storm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_worker_process() {
    storm::worker(Documents, "documents").await;
}

async fn sigkilled_readers_and_writers_never_meet_and_every_request_ends(server: Server) {
    let storm = storm::run(
        server,
        &crate::support::test_name(module_path!(), "read_write_worker_process"),
        "documents",
        Documents,
        random_request,
    )
    .await;
    assert_eq!(storm.counter("test-violations").await, 0, "a writer had company");
    assert!(
        storm.counter("test-shared").await > 0,
        "readers never shared a document"
    );
}

crate::support::for_each_server!(sigkilled_readers_and_writers_never_meet_and_every_request_ends);
