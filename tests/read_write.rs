//! Readers beside writers (`ReadWriteLayer`), on every store: readers share a key, a writer
//! holds it alone; one line per key in arrival order, where a waiting writer holds back the
//! readers that come after it and the readers behind a writer enter together; a writer's fence
//! is above every earlier holder's; every strategy; the listing shows the mode, the readers and
//! the waiting writers.

/// Worker processes SIGKILLed at random while they read and write (a module, so that it
/// shares this test binary).
#[path = "read_write/process_faults.rs"]
mod process_faults;
/// Generated readers and writers, some dying holding the key (a module, so that it shares this
/// test binary).
#[path = "read_write/properties.rs"]
mod properties;
use crate::support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{RngExt, SeedableRng};
use redefer::lock::{Acquisition, Holders, LockStore};
use redefer::queue::{DelayQueue, PendingStore, QueueStats, QueueStore};
use redefer::read_write::{Access, ReadWriteLayer};
use redefer::store::ListLocks;
use redefer::strategy::{Coalesce, Defer, Retry};
use redefer::{
    Backoff, Error, Fencing, FencingToken, LockKey, LockToken, Outcome, Scheduler, SchedulerOptions,
    current_lock,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Barrier;
use tower::{Layer, ServiceExt, service_fn};

use support::{eventually, for_each_store};

const TTL: Duration = Duration::from_secs(30);

/// The readers' limit of a layer without one.
const UNLIMITED: u32 = u32::MAX;

fn key(name: &str) -> LockKey {
    LockKey::new(name).unwrap()
}

/// A request: who it is, and whether it writes `doc`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Request {
    who: String,
    writes: bool,
}

fn read(who: &str) -> Request {
    Request {
        who: who.to_string(),
        writes: false,
    }
}

fn write(who: &str) -> Request {
    Request {
        who: who.to_string(),
        writes: true,
    }
}

fn access(request: &Request) -> Access {
    if request.writes {
        Access::Write
    } else {
        Access::Read
    }
}

/// Every request's key.
fn doc(_: &Request) -> Option<String> {
    Some("doc".to_string())
}

type Extractor = fn(&Request) -> Option<String>;
type ByAccess = fn(&Request) -> Access;

/// The layer every test guards `doc` with.
fn layer<St: LockStore>(store: &St) -> ReadWriteLayer<St, Extractor, ByAccess> {
    ReadWriteLayer::new(store.clone(), doc as Extractor, access as ByAccess)
}

/// Takes `doc` at the store as a reader (`Holders::Permits`) or a writer would.
async fn hold<St: LockStore>(store: &St, holders: Holders) -> (LockToken, FencingToken) {
    let token = LockToken::random();
    let taken = store
        .acquire(&key("doc"), token, TTL, holders, None, Fencing::On)
        .await
        .unwrap();
    let Acquisition::Acquired(Some(fence)) = taken else {
        panic!("doc is free for {holders:?}: {taken:?}");
    };
    (token, fence)
}

async fn release<St: LockStore>(store: &St, token: LockToken, holders: Holders) {
    assert!(
        store
            .release_holding(&key("doc"), token, holders, None)
            .await
            .unwrap()
    );
}

/// How many wait in `doc`'s line, as a reader not in it meets it (taking and giving back a
/// permit when it is free).
async fn waiting<St: LockStore>(store: &St) -> u64 {
    let probe = LockToken::random();
    let holders = Holders::Permits(UNLIMITED);
    match store
        .acquire(&key("doc"), probe, TTL, holders, None, Fencing::On)
        .await
        .unwrap()
    {
        Acquisition::Held { ahead, .. } => ahead,
        Acquisition::Acquired(_) => {
            release(store, probe, holders).await;
            0
        }
    }
}

/// A patient `Retry`: waits in line, looking again every 20 to 200 ms.
fn retry() -> Retry {
    Retry::new(Backoff::exponential(
        Duration::from_millis(20),
        Duration::from_millis(200),
    ))
    .max_attempts(1_000)
}

/// Who ran, in the order they ran.
type Order = Arc<Mutex<Vec<String>>>;

fn recorder(
    order: &Order,
) -> impl tower::Service<Request, Response = (), Error = Infallible, Future: Send> + Clone + Send + 'static {
    let order = Arc::clone(order);
    service_fn(move |request: Request| {
        order.lock().unwrap().push(request.who);
        async { Ok::<_, Infallible>(()) }
    })
}

/// Readers hold the key together, each with a fence of its own; a writer meets them and is
/// refused (`FailFast`) with an estimate; a writer's fence is above every earlier reader's.
async fn readers_share_a_key_and_a_writer_holds_it_alone<St: LockStore>(store: St) {
    let (first, first_fence) = hold(&store, Holders::Permits(UNLIMITED)).await;
    let (second, second_fence) = hold(&store, Holders::Permits(UNLIMITED)).await;
    assert!(second_fence > first_fence);
    // A writer beside readers: refused.
    let writer = layer(&store).layer(service_fn(|_: Request| async { Ok::<_, Infallible>(()) }));
    match writer.clone().oneshot(write("w")).await {
        Err(Error::Locked { key, retry_after }) => {
            assert_eq!(key.as_str(), "doc");
            assert!(retry_after.is_some());
        }
        other => panic!("a writer ran beside readers: {other:?}"),
    }
    // A reader through the layer runs beside them.
    let reader = layer(&store).layer(service_fn(|_: Request| async {
        Ok::<_, Infallible>(current_lock().unwrap().fence)
    }));
    let read_fence = reader
        .clone()
        .oneshot(read("r"))
        .await
        .unwrap()
        .done()
        .unwrap()
        .unwrap();
    assert!(read_fence > second_fence);
    release(&store, first, Holders::Permits(UNLIMITED)).await;
    release(&store, second, Holders::Permits(UNLIMITED)).await;
    // Alone now: the writer runs, its fence above every reader's.
    let fence = layer(&store)
        .layer(service_fn(|_: Request| async {
            Ok::<_, Infallible>(current_lock().unwrap().fence)
        }))
        .oneshot(write("w"))
        .await
        .unwrap()
        .done()
        .unwrap()
        .unwrap();
    assert!(fence > read_fence, "{fence:?} after {read_fence:?}");
    // A writer holding: a reader is refused, and so is another writer.
    let (held, _) = hold(&store, Holders::Writer(UNLIMITED)).await;
    for request in [read("r"), write("w2")] {
        assert!(matches!(
            reader.clone().oneshot(request).await,
            Err(Error::Locked { .. })
        ));
    }
    release(&store, held, Holders::Writer(UNLIMITED)).await;
}

/// Writer precedence: a writer waiting for a reader holds back the readers that come after it,
/// though the key has room for them; it runs once the reader ahead of it leaves, and they run
/// after it.
async fn a_waiting_writer_holds_back_later_readers<St: LockStore>(store: St) {
    let (reader, _) = hold(&store, Holders::Permits(UNLIMITED)).await;
    let order = Order::default();
    let service = layer(&store).on_conflict(retry()).layer(recorder(&order));
    let writer = tokio::spawn(service.clone().oneshot(write("writer")));
    eventually(Duration::from_secs(10), "the writer waits in line", || async {
        (waiting(&store).await == 1).then_some(())
    })
    .await;
    let later = tokio::spawn(service.clone().oneshot(read("later reader")));
    eventually(
        Duration::from_secs(10),
        "the later reader waits behind it",
        || async { (waiting(&store).await == 2).then_some(()) },
    )
    .await;
    assert!(
        order.lock().unwrap().is_empty(),
        "nobody passed the waiting writer"
    );
    release(&store, reader, Holders::Permits(UNLIMITED)).await;
    assert!(writer.await.unwrap().unwrap().done().is_some());
    assert!(later.await.unwrap().unwrap().done().is_some());
    assert_eq!(*order.lock().unwrap(), ["writer", "later reader"]);
}

/// The readers that queued behind a writer enter together when it is done: each waits inside
/// its handler for all of them.
async fn the_readers_behind_a_writer_enter_together<St: LockStore>(store: St) {
    const READERS: usize = 4;
    let (writer, _) = hold(&store, Holders::Writer(UNLIMITED)).await;
    let together = Arc::new(Barrier::new(READERS));
    let service = layer(&store).on_conflict(retry()).layer(service_fn({
        let together = Arc::clone(&together);
        move |_: Request| {
            let together = Arc::clone(&together);
            async move {
                together.wait().await;
                Ok::<_, Infallible>(())
            }
        }
    }));
    let readers: Vec<_> = (0..READERS)
        .map(|n| tokio::spawn(service.clone().oneshot(read(&format!("reader {n}")))))
        .collect();
    eventually(Duration::from_secs(10), "the readers wait in line", || async {
        (waiting(&store).await == READERS as u64).then_some(())
    })
    .await;
    release(&store, writer, Holders::Writer(UNLIMITED)).await;
    let all = async {
        for reader in readers {
            assert!(reader.await.unwrap().unwrap().done().is_some());
        }
    };
    tokio::time::timeout(Duration::from_secs(10), all)
        .await
        .expect("the readers behind the writer are inside together");
}

/// With a limit of readers, the next reader waits in line as a writer would, and enters when
/// a reader leaves.
async fn a_limit_of_readers_holds_the_next_in_line<St: LockStore>(store: St) {
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let service = layer(&store).readers(2).on_conflict(retry()).layer(service_fn({
        let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
        move |_: Request| {
            let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
            async move {
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Infallible>(())
            }
        }
    }));
    let calls: Vec<_> = (0..8)
        .map(|n| tokio::spawn(service.clone().oneshot(read(&n.to_string()))))
        .collect();
    for call in calls {
        assert!(call.await.unwrap().unwrap().done().is_some());
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "two readers at most, and two together"
    );
}

/// Readers and writers at random, all retrying: a writer never has anyone beside it, readers
/// do share, and every request ends.
async fn a_writer_is_never_beside_anyone<St: LockStore>(store: St) {
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let (broken, shared) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let service = layer(&store)
        .on_conflict(
            Retry::new(Backoff::exponential(
                Duration::from_millis(5),
                Duration::from_millis(50),
            ))
            .max_attempts(10_000),
        )
        .layer(service_fn({
            let (readers, writers, broken, shared) = (
                Arc::clone(&readers),
                Arc::clone(&writers),
                Arc::clone(&broken),
                Arc::clone(&shared),
            );
            move |request: Request| {
                let (readers, writers, broken, shared) = (
                    Arc::clone(&readers),
                    Arc::clone(&writers),
                    Arc::clone(&broken),
                    Arc::clone(&shared),
                );
                async move {
                    let mine = if request.writes { &writers } else { &readers };
                    let before = mine.fetch_add(1, Ordering::SeqCst);
                    let others = if request.writes {
                        readers.load(Ordering::SeqCst) + before
                    } else {
                        writers.load(Ordering::SeqCst)
                    };
                    if others > 0 {
                        broken.fetch_add(1, Ordering::SeqCst);
                    }
                    if !request.writes && before > 0 {
                        shared.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    mine.fetch_sub(1, Ordering::SeqCst);
                    Ok::<_, Infallible>(())
                }
            }
        }));
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let calls: Vec<_> = (0..80)
        .map(|n| {
            let request = if rng.random_bool(0.25) {
                write(&n.to_string())
            } else {
                read(&n.to_string())
            };
            tokio::spawn(service.clone().oneshot(request))
        })
        .collect();
    let all = async {
        for call in calls {
            assert!(call.await.unwrap().unwrap().done().is_some());
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("every request ends");
    assert_eq!(broken.load(Ordering::SeqCst), 0, "a writer had company");
    assert!(shared.load(Ordering::SeqCst) > 0, "readers ran together");
}

/// A handler that reads a key and calls the stack again to write it would wait for itself: it
/// is refused at once, naming the key.
async fn a_writer_under_its_own_readers_holding_is_refused<St: LockStore>(store: St) {
    let inner = layer(&store)
        .on_conflict(retry())
        .layer(service_fn(|_: Request| async { Ok::<_, Infallible>(()) }));
    let outer = layer(&store).layer(service_fn(move |_: Request| {
        let inner = inner.clone();
        async move { Ok::<_, Infallible>(inner.oneshot(write("inner")).await) }
    }));
    let inner = outer.oneshot(read("outer")).await.unwrap().done().unwrap();
    match inner {
        Err(Error::HeldByCaller { key }) => assert_eq!(key.as_str(), "doc"),
        other => panic!("expected HeldByCaller, got {other:?}"),
    }
}

/// A scheduler that looks for due jobs at least every 200 ms.
fn quick() -> SchedulerOptions {
    SchedulerOptions {
        max_idle: Duration::from_millis(200),
        ..SchedulerOptions::default()
    }
}

/// Deferred readers and writers wait in the key's one line and run in its order: the writer
/// deferred first runs alone, then the readers behind it, then the next writer.
async fn deferred_readers_and_writers_run_in_line_order<St: LockStore + QueueStore>(store: St) {
    let queue = DelayQueue::<Request, _>::new(store.clone(), "documents").unwrap();
    let order = Order::default();
    let service = layer(&store)
        .on_conflict(Defer::new(queue.clone()))
        .layer(recorder(&order));
    let (writer, _) = hold(&store, Holders::Writer(UNLIMITED)).await;
    for request in [write("w1"), read("r1"), read("r2"), write("w2")] {
        match service.clone().oneshot(request).await {
            Ok(Outcome::Deferred(_)) => {}
            other => panic!("expected a deferral, got {other:?}"),
        }
    }
    assert_eq!(waiting(&store).await, 4, "every job is in line");
    let scheduler = Scheduler::new(queue.clone(), service).options(quick()).start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(order.lock().unwrap().is_empty(), "nobody ran beside the writer");
    release(&store, writer, Holders::Writer(UNLIMITED)).await;
    eventually(Duration::from_secs(10), "every job ran", || async {
        (order.lock().unwrap().len() == 4).then_some(())
    })
    .await;
    let report = scheduler.shutdown().await;
    let order = order.lock().unwrap().clone();
    assert_eq!(order[0], "w1");
    let mut readers = order[1..3].to_vec();
    readers.sort();
    assert_eq!(readers, ["r1", "r2"]);
    assert_eq!(order[3], "w2");
    assert_eq!((report.acked, report.buried), (4, 0), "{report:?}");
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

/// The listing (what `redefer locks`, the dashboard and its JSON API show) says who holds a
/// key (a writer, or how many readers) and how many writers wait.
async fn the_listing_shows_the_mode_the_readers_and_the_waiting_writers<St: LockStore + ListLocks>(
    store: St,
) {
    let (first, _) = hold(&store, Holders::Permits(UNLIMITED)).await;
    let (second, _) = hold(&store, Holders::Permits(UNLIMITED)).await;
    let service = layer(&store)
        .on_conflict(retry())
        .layer(service_fn(|_: Request| async { Ok::<_, Infallible>(()) }));
    let writer = tokio::spawn(service.clone().oneshot(write("w")));
    eventually(Duration::from_secs(10), "the writer waits", || async {
        (waiting(&store).await == 1).then_some(())
    })
    .await;
    let listed = store.list_locks(100).await.unwrap();
    let doc = listed
        .iter()
        .find(|info| info.key == "doc")
        .expect("doc is listed");
    assert_eq!(
        (
            doc.holders,
            doc.limit,
            doc.writing,
            doc.waiters,
            doc.writers_waiting
        ),
        (2, None, false, 1, 1),
        "{doc:?}: readers without a limit are listed with none"
    );
    release(&store, first, Holders::Permits(UNLIMITED)).await;
    release(&store, second, Holders::Permits(UNLIMITED)).await;
    assert!(writer.await.unwrap().unwrap().done().is_some());
    let (held, _) = hold(&store, Holders::Writer(UNLIMITED)).await;
    let listed = store.list_locks(100).await.unwrap();
    let doc = listed
        .iter()
        .find(|info| info.key == "doc")
        .expect("doc is listed");
    assert_eq!(
        (doc.holders, doc.writing, doc.writers_waiting),
        (1, true, 0),
        "{doc:?}"
    );
    release(&store, held, Holders::Writer(UNLIMITED)).await;
}

/// A writer whose handler outlives its TTL keeps the key (its holding is renewed): readers
/// meanwhile are refused; and a writer cut off (its future dropped) gives the key back at
/// once, not at the end of its TTL.
async fn a_writer_is_renewed_and_released_on_every_exit_path<St: LockStore>(store: St) {
    let (started, mut start) = tokio::sync::mpsc::channel::<()>(1);
    let writer = layer(&store)
        .ttl(Duration::from_millis(450))
        .layer(service_fn(move |_: Request| {
            let started = started.clone();
            async move {
                started.send(()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1_800)).await;
                Ok::<_, Infallible>(())
            }
        }));
    let reader = layer(&store).layer(service_fn(|_: Request| async { Ok::<_, Infallible>(()) }));
    let long = tokio::spawn(writer.clone().oneshot(write("long")));
    start.recv().await.unwrap();
    // Four TTLs while it writes: every reader is refused.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(360)).await;
        assert!(matches!(
            reader.clone().oneshot(read("r")).await,
            Err(Error::Locked { .. })
        ));
    }
    assert!(long.await.unwrap().unwrap().done().is_some());
    // Cut off while it writes, with a TTL of a minute: the key is free at once.
    let (writing, mut started) = tokio::sync::mpsc::channel::<()>(1);
    let writer = layer(&store)
        .ttl(Duration::from_secs(60))
        .on_conflict(retry())
        .layer(service_fn(move |_: Request| {
            let writing = writing.clone();
            async move {
                writing.send(()).await.unwrap();
                std::future::pending::<()>().await;
                Ok::<_, Infallible>(())
            }
        }));
    let cut = tokio::spawn(writer.oneshot(write("forever")));
    started.recv().await.unwrap();
    assert!(matches!(
        reader.clone().oneshot(read("r")).await,
        Err(Error::Locked { .. })
    ));
    cut.abort();
    eventually(Duration::from_secs(5), "the key is given back", || async {
        reader.clone().oneshot(read("r")).await.ok().map(|_| ())
    })
    .await;
}

/// `Coalesce` keeps one waiting job per key and access: the requests to write a held key make
/// one job (the latest runs), the requests to read it another; a read never takes the place of
/// a waiting write.
async fn coalesce_keeps_a_waiting_write_and_a_waiting_read_apart<
    St: LockStore + QueueStore + PendingStore,
>(
    store: St,
) {
    let queue = DelayQueue::<Request, _>::new(store.clone(), "documents").unwrap();
    let order = Order::default();
    let service = layer(&store)
        .on_conflict(Coalesce::latest(queue.clone()))
        .layer(recorder(&order));
    let (writer, _) = hold(&store, Holders::Writer(UNLIMITED)).await;
    let mut jobs = Vec::new();
    for request in [write("w1"), read("r1"), write("w2"), read("r2")] {
        match service.clone().oneshot(request).await {
            Ok(Outcome::Deferred(deferred)) => jobs.push(deferred.job_id),
            other => panic!("expected a deferral, got {other:?}"),
        }
    }
    assert_eq!(jobs[0], jobs[2], "one waiting job for the writes");
    assert_eq!(jobs[1], jobs[3], "one waiting job for the reads");
    assert_ne!(jobs[0], jobs[1], "a read does not take a write's place");
    let scheduler = Scheduler::new(queue.clone(), service).options(quick()).start();
    release(&store, writer, Holders::Writer(UNLIMITED)).await;
    eventually(Duration::from_secs(10), "both jobs ran", || async {
        (order.lock().unwrap().len() == 2).then_some(())
    })
    .await;
    scheduler.shutdown().await;
    let mut ran = order.lock().unwrap().clone();
    ran.sort();
    assert_eq!(ran, ["r2", "w2"], "each job ran once, with its latest request");
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

for_each_store!(
    coalesce_keeps_a_waiting_write_and_a_waiting_read_apart,
    a_writer_is_renewed_and_released_on_every_exit_path,
    readers_share_a_key_and_a_writer_holds_it_alone,
    a_waiting_writer_holds_back_later_readers,
    the_readers_behind_a_writer_enter_together,
    a_limit_of_readers_holds_the_next_in_line,
    a_writer_is_never_beside_anyone,
    a_writer_under_its_own_readers_holding_is_refused,
    deferred_readers_and_writers_run_in_line_order,
    the_listing_shows_the_mode_the_readers_and_the_waiting_writers,
);
