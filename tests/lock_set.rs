//! Several keys at once (`LockSetLayer`), on every store: a request runs only while it holds
//! every key of its set, with a fencing token per key; a set is taken all or nothing; sets that
//! overlap, in any order of their keys, beside single-key callers, never overlap nor deadlock;
//! a set waits in its keys' lines in arrival order (a later single-key caller does not pass
//! it); a deferred set runs when its whole set is handed to its job.

/// Worker processes SIGKILLed at random while they hold sets (a module, so that it shares this
/// test binary).
#[path = "lock_set/process_faults.rs"]
mod process_faults;
use crate::support;

use crate::support::Shorthand;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use redefer::lock::{Acquisition, LockStore, current_locks};
use redefer::lock_set::{LockSetLayer, LockSetStore};
use redefer::queue::{DelayQueue, PendingStore, QueueStats, QueueStore};
use redefer::store::ListLocks;
use redefer::strategy::{Coalesce, Defer, Retry};
use redefer::{Backoff, Error, LockKey, LockLayer, LockToken, Outcome, Scheduler, SchedulerOptions};
use serde::{Deserialize, Serialize};
use tower::{Layer, ServiceExt, service_fn};

use support::{eventually, for_each_store};

const TTL: Duration = Duration::from_secs(30);

fn key(name: &str) -> LockKey {
    LockKey::new(name).unwrap()
}

/// Takes `name` as a single-key holder would.
async fn hold<St: LockStore>(store: &St, name: &str) -> LockToken {
    let token = LockToken::random();
    let taken = store.try_acquire(&key(name), token, TTL).await.unwrap();
    assert!(
        matches!(taken, Acquisition::Acquired(_)),
        "{name} is free: {taken:?}"
    );
    token
}

/// How many wait in `name`'s line, as a caller not in it meets it.
async fn waiting<St: LockStore>(store: &St, name: &str) -> u64 {
    let probe = LockToken::random();
    match store.try_acquire(&key(name), probe, TTL).await.unwrap() {
        Acquisition::Held { ahead, .. } => ahead,
        Acquisition::Acquired(_) => {
            store.release(&key(name), probe).await.unwrap();
            0
        }
    }
}

async fn a_set_runs_holding_every_key_with_a_fence_each<St: LockSetStore>(store: St) {
    let service = LockSetLayer::new(store.clone(), |names: &Vec<String>| Some(names.clone())).layer(
        service_fn(|_: Vec<String>| async move {
            let held: Vec<(String, bool)> = current_locks()
                .iter()
                .map(|held| (held.key.to_string(), held.fence.is_some()))
                .collect();
            Ok::<_, Infallible>(held)
        }),
    );
    let request = vec![
        "account:7".to_string(),
        "account:3".to_string(),
        "account:7".to_string(),
    ];
    let held = service.clone().oneshot(request).await.unwrap().done().unwrap();
    // Once each, innermost first: the set's keys in their order, the last one innermost.
    assert_eq!(
        held,
        [("account:7".to_string(), true), ("account:3".to_string(), true)]
    );
    // Released on the way out: each is free again.
    for name in ["account:3", "account:7"] {
        let token = hold(&store, name).await;
        assert!(store.release(&key(name), token).await.unwrap());
    }
    // A set's fence for a key is above every earlier holder's.
    let token = LockToken::random();
    let Acquisition::Acquired(Some(earlier)) =
        store.try_acquire(&key("account:3"), token, TTL).await.unwrap()
    else {
        panic!("account:3 is free");
    };
    assert!(store.release(&key("account:3"), token).await.unwrap());
    let fences = LockSetLayer::new(store.clone(), |names: &Vec<String>| Some(names.clone()))
        .layer(service_fn(|_: Vec<String>| async move {
            Ok::<_, Infallible>(current_locks().iter().map(|held| held.fence).collect::<Vec<_>>())
        }))
        .oneshot(vec!["account:3".to_string()])
        .await
        .unwrap()
        .done()
        .unwrap();
    assert!(fences[0] > Some(earlier), "{fences:?} after {earlier:?}");
}

async fn a_set_is_taken_all_or_nothing<St: LockSetStore>(store: St) {
    let holder = hold(&store, "doc:b").await;
    let ran = Arc::new(AtomicBool::new(false));
    let service =
        LockSetLayer::new(store.clone(), |names: &Vec<String>| Some(names.clone())).layer(service_fn({
            let ran = Arc::clone(&ran);
            move |_: Vec<String>| {
                ran.store(true, Ordering::SeqCst);
                async { Ok::<_, Infallible>(()) }
            }
        }));
    let refused = service
        .oneshot(vec!["doc:a".to_string(), "doc:b".to_string()])
        .await;
    match refused {
        Err(Error::Locked { key, retry_after }) => {
            assert_eq!(key.as_str(), "doc:b", "names the key that is held");
            assert!(retry_after.is_some());
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    assert!(!ran.load(Ordering::SeqCst));
    // Nothing of the set was taken: its free key is free.
    let a = hold(&store, "doc:a").await;
    assert!(store.release(&key("doc:a"), a).await.unwrap());
    assert!(store.release(&key("doc:b"), holder).await.unwrap());
}

/// Sets of 1 to 3 of 4 keys, in random orders, beside single-key callers, all retrying: no key
/// ever has two requests inside, and every request ends (no deadlock).
async fn overlapping_sets_in_any_order_never_overlap_nor_deadlock<St: LockSetStore>(store: St) {
    const KEYS: [&str; 4] = ["acct:1", "acct:2", "acct:3", "acct:4"];
    let inside: Arc<HashMap<String, AtomicBool>> = Arc::new(
        KEYS.iter()
            .map(|name| (name.to_string(), AtomicBool::new(false)))
            .collect(),
    );
    let overlaps = Arc::new(AtomicUsize::new(0));
    let handler = service_fn({
        let (inside, overlaps) = (Arc::clone(&inside), Arc::clone(&overlaps));
        move |names: Vec<String>| {
            let (inside, overlaps) = (Arc::clone(&inside), Arc::clone(&overlaps));
            async move {
                for name in &names {
                    if inside[name].swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                for name in &names {
                    inside[name].store(false, Ordering::SeqCst);
                }
                Ok::<_, Infallible>(())
            }
        }
    });
    let retry = || {
        Retry::new(Backoff::exponential(
            Duration::from_millis(5),
            Duration::from_millis(50),
        ))
        .max_attempts(10_000)
    };
    let sets = LockSetLayer::new(store.clone(), |names: &Vec<String>| Some(names.clone()))
        .on_conflict(retry())
        .layer(handler.clone());
    let singles = LockLayer::new(store.clone(), |names: &Vec<String>| names.first().cloned())
        .on_conflict(retry())
        .layer(handler);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut calls = Vec::new();
    for n in 0..60 {
        let mut names: Vec<String> = KEYS.iter().map(|name| name.to_string()).collect();
        names.shuffle(&mut rng);
        names.truncate(rng.random_range(1..=3));
        let call = if n % 4 == 0 {
            names.truncate(1);
            let singles = singles.clone();
            tokio::spawn(async move { singles.oneshot(names).await.map(|_| ()) })
        } else {
            let sets = sets.clone();
            tokio::spawn(async move { sets.oneshot(names).await.map(|_| ()) })
        };
        calls.push(call);
    }
    let all = async {
        for call in calls {
            call.await.unwrap().unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("every request ends: no deadlock");
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a key had two requests inside"
    );
}

/// Sets under `Retry`'s defaults (5 attempts, 5 s) wait in their lines as a single key's
/// callers do: until served or `max_wait`. 40 calls over the sets (1,2), (2,1), (2,3), (3,1),
/// each holding its keys 20 ms, all end done (the whole run takes well under `max_wait`). A
/// set is handed its keys one at a time; each handoff wakes it for a look, which is its turn,
/// not one of its attempts: counted as attempts, they made 15 of 40 give up `Locked` within
/// 0.6 s, some 0.6 ms after they started.
async fn sets_under_retry_wait_until_served_not_until_their_keys_were_handed_five_times<St: LockSetStore>(
    store: St,
) {
    const SETS: [[&str; 2]; 4] = [
        ["acct:1", "acct:2"],
        ["acct:2", "acct:1"],
        ["acct:2", "acct:3"],
        ["acct:3", "acct:1"],
    ];
    let sets = LockSetLayer::new(store, |names: &Vec<String>| Some(names.clone()))
        .on_conflict(Retry::new(Backoff::default()))
        .layer(service_fn(|_: Vec<String>| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, Infallible>(())
        }));
    let calls: Vec<_> = (0..40)
        .map(|n| {
            let names: Vec<String> = SETS[n % SETS.len()].iter().map(|name| name.to_string()).collect();
            let sets = sets.clone();
            tokio::spawn(async move { sets.oneshot(names).await.map(|outcome| outcome.done().is_some()) })
        })
        .collect();
    let mut refused = Vec::new();
    for call in calls {
        match call.await.unwrap() {
            Ok(true) => {}
            other => refused.push(format!("{other:?}")),
        }
    }
    assert!(
        refused.is_empty(),
        "{} of 40 not served: {refused:?}",
        refused.len()
    );
}

/// An extractor that returns `Some` of no keys (a bug: the keys were lost on the way) is
/// refused before the handler runs, not run under no lock at all; `None` still passes the
/// request through.
async fn a_set_of_no_keys_is_refused_and_none_passes_through<St: LockSetStore>(store: St) {
    let ran = Arc::new(AtomicUsize::new(0));
    let service = LockSetLayer::new(store, |names: &Option<Vec<String>>| names.clone()).layer(service_fn({
        let ran = Arc::clone(&ran);
        move |_: Option<Vec<String>>| {
            ran.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(()) }
        }
    }));
    let refused = service.clone().oneshot(Some(vec![])).await;
    assert!(
        matches!(refused, Err(Error::InvalidKey(redefer::KeyError::EmptySet))),
        "{refused:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the handler did not run");
    let passed = service.oneshot(None).await.unwrap();
    assert!(passed.done().is_some());
    assert_eq!(ran.load(Ordering::SeqCst), 1, "None passes through");
}

/// A scheduler that looks for due jobs at least every 200 ms.
fn quick() -> SchedulerOptions {
    SchedulerOptions {
        max_idle: Duration::from_millis(200),
        ..SchedulerOptions::default()
    }
}

/// Who ran, in the order they ran.
type Order = Arc<Mutex<Vec<&'static str>>>;

/// A handler that notes `who` in `order` when it runs.
fn recorder(
    order: &Order,
    who: &'static str,
) -> impl tower::Service<Vec<String>, Response = (), Error = Infallible, Future: Send> + Clone + Send + 'static
{
    let order = Arc::clone(order);
    service_fn(move |_: Vec<String>| {
        order.lock().unwrap().push(who);
        async { Ok::<_, Infallible>(()) }
    })
}

/// A patient `Retry`: waits in line, looking again every 20 to 200 ms.
fn retry() -> Retry {
    Retry::new(Backoff::exponential(
        Duration::from_millis(20),
        Duration::from_millis(200),
    ))
    .max_attempts(1_000)
}

/// A set that waits is in line on each of its keys: a single-key caller that comes after it
/// on one of them waits behind it, though that key frees first.
async fn a_waiting_set_keeps_its_place_before_later_callers<St: LockSetStore>(store: St) {
    let a = hold(&store, "doc:a").await;
    let b = hold(&store, "doc:b").await;
    let order = Order::default();
    let record = |who: &'static str| recorder(&order, who);
    let set = LockSetLayer::new(store.clone(), |names: &Vec<String>| Some(names.clone()))
        .on_conflict(retry())
        .layer(record("set"));
    let set = tokio::spawn(set.oneshot(vec!["doc:a".to_string(), "doc:b".to_string()]));
    eventually(
        Duration::from_secs(10),
        "the set waits in doc:a's line",
        || async { (waiting(&store, "doc:a").await == 1).then_some(()) },
    )
    .await;
    let single = LockLayer::new(store.clone(), |_: &Vec<String>| Some("doc:a".to_string()))
        .on_conflict(retry())
        .layer(record("single"));
    let single = tokio::spawn(single.oneshot(vec!["doc:a".to_string()]));
    eventually(
        Duration::from_secs(10),
        "the single caller waits behind it",
        || async { (waiting(&store, "doc:a").await == 2).then_some(()) },
    )
    .await;
    // doc:a frees first: it is the set's (first in line), which still waits for doc:b.
    assert!(store.release(&key("doc:a"), a).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(order.lock().unwrap().is_empty(), "nobody ran before doc:b freed");
    assert!(store.release(&key("doc:b"), b).await.unwrap());
    assert!(set.await.unwrap().unwrap().done().is_some());
    assert!(single.await.unwrap().unwrap().done().is_some());
    assert_eq!(*order.lock().unwrap(), ["set", "single"]);
}

/// A set that others wait before on one of its keys does not keep its other keys idle: a
/// single-key caller behind it on a free key runs while the set waits, and the set runs once
/// those before it are done.
async fn a_set_waiting_behind_others_does_not_idle_its_free_keys<St: LockSetStore>(store: St) {
    let b = hold(&store, "doc:b").await;
    let order = Order::default();
    let record = |who: &'static str| recorder(&order, who);
    let single = |name: &'static str| {
        LockLayer::new(store.clone(), move |_: &Vec<String>| Some(name.to_string())).on_conflict(retry())
    };
    // First in doc:b's line: a single-key caller.
    let on_b = tokio::spawn(single("doc:b").layer(record("b")).oneshot(vec![]));
    eventually(Duration::from_secs(10), "a caller waits for doc:b", || async {
        (waiting(&store, "doc:b").await == 1).then_some(())
    })
    .await;
    // Then the set, first in doc:a's line, second in doc:b's.
    let set = LockSetLayer::new(store.clone(), |names: &Vec<String>| Some(names.clone()))
        .on_conflict(retry())
        .layer(record("set"));
    let set = tokio::spawn(set.oneshot(vec!["doc:a".to_string(), "doc:b".to_string()]));
    eventually(Duration::from_secs(10), "the set waits for doc:b", || async {
        (waiting(&store, "doc:b").await == 2).then_some(())
    })
    .await;
    // A caller for doc:a alone, after the set: doc:a is free, the set cannot use it yet.
    let on_a = single("doc:a").layer(record("a")).oneshot(vec![]);
    let on_a = tokio::time::timeout(Duration::from_secs(5), on_a)
        .await
        .expect("the free key is not kept idle for the set");
    assert!(on_a.unwrap().done().is_some());
    assert_eq!(*order.lock().unwrap(), ["a"], "doc:a ran while the set waited");
    assert!(store.release(&key("doc:b"), b).await.unwrap());
    assert!(on_b.await.unwrap().unwrap().done().is_some());
    assert!(set.await.unwrap().unwrap().done().is_some());
    assert_eq!(*order.lock().unwrap(), ["a", "b", "set"]);
}

/// The listing (what `redefer locks`, the dashboard and its JSON API show) shows a set's holder
/// on each of its keys, with that key's fence.
async fn a_sets_holder_is_listed_on_each_of_its_keys<St: LockSetStore + ListLocks>(store: St) {
    let service =
        LockSetLayer::new(store.clone(), |names: &Vec<String>| Some(names.clone())).layer(service_fn({
            let store = store.clone();
            move |_: Vec<String>| {
                let store = store.clone();
                async move {
                    let held: Vec<(String, u64)> = current_locks()
                        .iter()
                        .map(|held| (held.key.to_string(), held.fence.unwrap().0))
                        .collect();
                    let listed = store.list_locks(100).await.unwrap();
                    Ok::<_, Infallible>((held, listed))
                }
            }
        }));
    let (held, listed) = service
        .oneshot(vec!["list:a".to_string(), "list:b".to_string()])
        .await
        .unwrap()
        .done()
        .unwrap();
    for (key, fence) in held {
        let info = listed
            .iter()
            .find(|info| info.key == key)
            .unwrap_or_else(|| panic!("{key} is not listed: {listed:?}"));
        assert_eq!(
            (info.holders, info.limit, info.fence),
            (1, Some(1), fence),
            "{info:?}"
        );
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Transfer {
    n: u32,
    accounts: Vec<String>,
}

/// The transfers that ran, by number, in the order they ran.
type Ran = Arc<Mutex<Vec<u32>>>;

/// Transfers that hold both accounts, deferred to the queue "transfers" when one is held; each
/// run notes its transfer's number in the list returned.
fn deferred_transfers<St: LockSetStore + QueueStore>(
    store: &St,
) -> (
    DelayQueue<Transfer, St>,
    impl tower::Service<Transfer, Response = Outcome<()>, Error = Error<Infallible>, Future: Send>
    + Clone
    + Send
    + 'static,
    Ran,
) {
    let queue = DelayQueue::<Transfer, _>::new(store.clone(), "transfers").unwrap();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let service = LockSetLayer::new(store.clone(), |t: &Transfer| Some(t.accounts.clone()))
        .on_conflict(Defer::new(queue.clone()))
        .layer(service_fn({
            let ran = Arc::clone(&ran);
            move |t: Transfer| {
                ran.lock().unwrap().push(t.n);
                async { Ok::<_, Infallible>(()) }
            }
        }));
    (queue, service, ran)
}

/// A deferred set waits for its whole set and runs once it is handed to its job.
async fn a_deferred_set_runs_when_its_set_is_handed_to_it<St: LockSetStore + QueueStore>(store: St) {
    let (queue, service, ran) = deferred_transfers(&store);
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(quick())
        .start();
    let a = hold(&store, "acct:a").await;
    let b = hold(&store, "acct:b").await;
    let transfer = Transfer {
        n: 1,
        accounts: vec!["acct:b".to_string(), "acct:a".to_string()],
    };
    match service.clone().oneshot(transfer).await {
        Ok(Outcome::Deferred(_)) => {}
        other => panic!("expected a deferral, got {other:?}"),
    }
    assert_eq!(waiting(&store, "acct:a").await, 1, "the job is in both lines");
    assert_eq!(waiting(&store, "acct:b").await, 1, "the job is in both lines");
    assert!(store.release(&key("acct:a"), a).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ran.lock().unwrap().is_empty(), "half the set is not the set");
    assert!(store.release(&key("acct:b"), b).await.unwrap());
    eventually(Duration::from_secs(10), "the transfer ran", || async {
        (!ran.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!(*ran.lock().unwrap(), [1]);
    assert_eq!((report.acked, report.buried), (1, 0), "{report:?}");
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

/// A deferred set's job handed one key of its set while another is held waits for the rest in
/// place, woken by its turn (it does not go back to the queue, where each turn costs a claim
/// and a run while the key handed to it idles), and it gives its scheduler slot back
/// meanwhile: with one slot, another job runs while it waits.
async fn a_deferred_sets_job_waits_for_its_turn_in_place_out_of_its_slot<St: LockSetStore + QueueStore>(
    store: St,
) {
    let (queue, service, ran) = deferred_transfers(&store);
    let (a, b, c) = (
        hold(&store, "acct:a").await,
        hold(&store, "acct:b").await,
        hold(&store, "acct:c").await,
    );
    for (n, accounts) in [(1, vec!["acct:a", "acct:b"]), (2, vec!["acct:c"])] {
        let transfer = Transfer {
            n,
            accounts: accounts.into_iter().map(String::from).collect(),
        };
        match service.clone().oneshot(transfer).await {
            Ok(Outcome::Deferred(_)) => {}
            other => panic!("expected a deferral, got {other:?}"),
        }
    }
    let one_slot = SchedulerOptions {
        concurrency: 1,
        ..quick()
    };
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(one_slot)
        .start();
    // Handed acct:a, the first job runs and meets acct:b held.
    assert!(store.release(&key("acct:a"), a).await.unwrap());
    eventually(Duration::from_secs(10), "the first job was claimed", || async {
        (queue.operator().stats().await.unwrap().in_flight == 1).then_some(())
    })
    .await;
    // Handed acct:c, the second job runs in the one slot while the first waits.
    assert!(store.release(&key("acct:c"), c).await.unwrap());
    eventually(Duration::from_secs(10), "the second job ran", || async {
        (ran.lock().unwrap().as_slice() == [2]).then_some(())
    })
    .await;
    assert!(store.release(&key("acct:b"), b).await.unwrap());
    eventually(Duration::from_secs(10), "the first job ran", || async {
        (ran.lock().unwrap().len() == 2).then_some(())
    })
    .await;
    let report = scheduler.shutdown().await;
    assert_eq!(*ran.lock().unwrap(), [2, 1]);
    assert_eq!(
        (report.acked, report.waited),
        (2, 0),
        "each job ran once, none went back to the queue: {report:?}"
    );
}

/// A scheduler that stops gives a job waiting in place back to the queue at once (in its
/// lines, using no attempt), rather than keep its shutdown waiting for the job's grace.
async fn a_stopping_scheduler_gives_a_waiting_job_back_at_once<St: LockSetStore + QueueStore>(store: St) {
    let (queue, service, _) = deferred_transfers(&store);
    let (a, b) = (hold(&store, "acct:a").await, hold(&store, "acct:b").await);
    let transfer = Transfer {
        n: 1,
        accounts: vec!["acct:a".to_string(), "acct:b".to_string()],
    };
    match service.clone().oneshot(transfer).await {
        Ok(Outcome::Deferred(_)) => {}
        other => panic!("expected a deferral, got {other:?}"),
    }
    let patient = SchedulerOptions {
        shutdown_grace: Duration::from_secs(3600),
        ..quick()
    };
    let scheduler = Scheduler::new(queue.clone(), service).options(patient).start();
    // Handed acct:a, the job runs, meets acct:b held and waits for it in place.
    assert!(store.release(&key("acct:a"), a).await.unwrap());
    eventually(Duration::from_secs(10), "the job was claimed", || async {
        (queue.operator().stats().await.unwrap().in_flight == 1).then_some(())
    })
    .await;
    // It would wait in place for 10 s, and the shutdown for it up to its hour of grace.
    let report = tokio::time::timeout(Duration::from_secs(5), scheduler.shutdown())
        .await
        .expect("the shutdown did not wait for the waiting job");
    // Back to wait in line (or handed back, when the stop came as its claim was on its way).
    assert_eq!(
        (report.acked, report.waited + report.returned),
        (0, 1),
        "{report:?}"
    );
    let stats = queue.operator().stats().await.unwrap();
    assert_eq!((stats.in_flight, stats.waiting), (0, 1), "{stats:?}");
    assert_eq!(waiting(&store, "acct:b").await, 1, "the job is still in line");
    assert!(store.release(&key("acct:b"), b).await.unwrap());
}

/// A deferred set first in its lines keeps its place however long the holder of its other key
/// takes, past any number of reservation times: a single-key caller that comes later on its
/// free key waits behind it.
async fn a_deferred_set_keeps_its_place_past_the_reservation_time<
    St: LockSetStore + QueueStore + Reserving,
>(
    store: St,
) {
    let store = store.reserving(Duration::from_millis(100));
    let queue = DelayQueue::<Transfer, _>::new(store.clone(), "transfers").unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let set = LockSetLayer::new(store.clone(), |t: &Transfer| Some(t.accounts.clone()))
        .on_conflict(Defer::new(queue.clone()))
        .layer(service_fn({
            let order = Arc::clone(&order);
            move |_: Transfer| {
                order.lock().unwrap().push("set");
                async { Ok::<_, Infallible>(()) }
            }
        }));
    let scheduler = Scheduler::new(queue.clone(), set.clone())
        .options(quick())
        .start();
    let a = hold(&store, "acct:a").await;
    let b = hold(&store, "acct:b").await;
    let transfer = Transfer {
        n: 1,
        accounts: vec!["acct:a".to_string(), "acct:b".to_string()],
    };
    assert!(matches!(set.oneshot(transfer).await, Ok(Outcome::Deferred(_))));
    // acct:a frees: the job is handed it, runs, finds acct:b held, and goes back to wait.
    assert!(store.release(&key("acct:a"), a).await.unwrap());
    tokio::time::sleep(Duration::from_millis(600)).await;
    let single = LockLayer::new(store.clone(), |_: &u32| Some("acct:a".to_string()))
        .on_conflict(
            Retry::new(Backoff::exponential(
                Duration::from_millis(20),
                Duration::from_millis(100),
            ))
            .max_attempts(1_000),
        )
        .layer(service_fn({
            let order = Arc::clone(&order);
            move |_: u32| {
                order.lock().unwrap().push("single");
                async { Ok::<_, Infallible>(()) }
            }
        }));
    let single = tokio::spawn(single.oneshot(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        order.lock().unwrap().is_empty(),
        "the later caller waits behind the set"
    );
    assert!(store.release(&key("acct:b"), b).await.unwrap());
    assert!(single.await.unwrap().unwrap().done().is_some());
    eventually(Duration::from_secs(10), "the set ran", || async {
        (order.lock().unwrap().len() == 2).then_some(())
    })
    .await;
    scheduler.shutdown().await;
    assert_eq!(*order.lock().unwrap(), ["set", "single"]);
}

/// Stores whose reservation time a test can shorten.
trait Reserving {
    fn reserving(self, reservation: Duration) -> Self;
}

impl Reserving for redefer::MemoryStore {
    fn reserving(self, reservation: Duration) -> Self {
        self.with_reservation(reservation)
    }
}

impl Reserving for redefer::RedisStore {
    fn reserving(self, reservation: Duration) -> Self {
        self.with_reservation(reservation)
    }
}

/// `Coalesce` keeps one waiting job per set: requests for one set (in any order of its keys)
/// share a job, which runs with the latest; a request for another set that meets the same held
/// key is a job of its own.
async fn coalesce_keeps_one_waiting_job_per_set<St: LockSetStore + QueueStore + PendingStore>(store: St) {
    let queue = DelayQueue::<Transfer, _>::new(store.clone(), "transfers").unwrap();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let service = LockSetLayer::new(store.clone(), |t: &Transfer| Some(t.accounts.clone()))
        .on_conflict(Coalesce::latest(queue.clone()))
        .layer(service_fn({
            let ran = Arc::clone(&ran);
            move |t: Transfer| {
                ran.lock().unwrap().push(t.n);
                async { Ok::<_, Infallible>(()) }
            }
        }));
    let b = hold(&store, "acct:b").await;
    let transfer = |n: u32, accounts: [&str; 2]| Transfer {
        n,
        accounts: accounts.iter().map(|key| key.to_string()).collect(),
    };
    let mut jobs = Vec::new();
    for request in [
        transfer(1, ["acct:a", "acct:b"]),
        transfer(2, ["acct:b", "acct:a"]),
        transfer(3, ["acct:b", "acct:c"]),
    ] {
        match service.clone().oneshot(request).await {
            Ok(Outcome::Deferred(deferred)) => jobs.push(deferred.job_id),
            other => panic!("expected a deferral, got {other:?}"),
        }
    }
    assert_eq!(jobs[0], jobs[1], "one job for the set {{a, b}}");
    assert_ne!(jobs[0], jobs[2], "another for {{b, c}}");
    let scheduler = Scheduler::new(queue.clone(), service.clone())
        .options(quick())
        .start();
    assert!(store.release(&key("acct:b"), b).await.unwrap());
    eventually(Duration::from_secs(10), "both jobs ran", || async {
        (ran.lock().unwrap().len() == 2).then_some(())
    })
    .await;
    scheduler.shutdown().await;
    let mut ran = ran.lock().unwrap().clone();
    ran.sort_unstable();
    assert_eq!(ran, [2, 3], "the set's job ran once, with its latest request");
    assert_eq!(queue.operator().stats().await.unwrap(), QueueStats::default());
}

for_each_store!(
    a_set_runs_holding_every_key_with_a_fence_each,
    a_set_is_taken_all_or_nothing,
    a_set_of_no_keys_is_refused_and_none_passes_through,
    a_sets_holder_is_listed_on_each_of_its_keys,
    overlapping_sets_in_any_order_never_overlap_nor_deadlock,
    sets_under_retry_wait_until_served_not_until_their_keys_were_handed_five_times,
    a_waiting_set_keeps_its_place_before_later_callers,
    a_set_waiting_behind_others_does_not_idle_its_free_keys,
    a_deferred_set_runs_when_its_set_is_handed_to_it,
    a_deferred_sets_job_waits_for_its_turn_in_place_out_of_its_slot,
    a_stopping_scheduler_gives_a_waiting_job_back_at_once,
    a_deferred_set_keeps_its_place_past_the_reservation_time,
    coalesce_keeps_one_waiting_job_per_set,
);
