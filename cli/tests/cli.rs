//! The `redefer` command against a real Redis: stats, list (undecodable bytes shown as such),
//! show, requeue, purge, locks; JSON and tables.

// The library's test harness: real Redis servers on free ports.
#[path = "../../tests/support/mod.rs"]
mod support;

use crate::support::Shorthand;
use std::process::Command;
use std::time::Duration;

use redefer::guard::Waiter;
use redefer::queue::{DelayQueue, JobGroup, JobId, QueueName};
use redefer::throttle::{Rate, ThrottleStore};
use redefer::{LockKey, LockToken};
use serde_json::Value;

use support::RedisServer;

/// Runs `redefer <args>` against `server` under `prefix`; its stdout, or its stderr on failure.
fn redefer(server: &RedisServer, prefix: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(env!("CARGO_BIN_EXE_redefer"))
        .args(["--url", &server.url(), "--prefix", prefix, "--queue", "orders"])
        .args(args)
        .output()
        .expect("run redefer");
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

fn json(server: &RedisServer, prefix: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&redefer(server, prefix, &all).expect("redefer succeeds")).expect("JSON output")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_inspects_and_operates_a_queue_and_its_locks() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    queue
        .push(&serde_json::json!({ "order": 1 }), Duration::from_secs(60))
        .await
        .unwrap();
    let doomed = queue
        .push(&serde_json::json!({ "order": 2 }), Duration::ZERO)
        .await
        .unwrap()
        .id;
    let job = queue
        .claim(10, Duration::from_secs(30))
        .await
        .unwrap()
        .jobs
        .remove(0);
    assert!(queue.bury(&job.lease, "boom").await.unwrap());
    // Bytes another tool wrote, in the dead-letter set.
    let key = |suffix: &str| format!("{prefix}:q:{{orders}}:{suffix}");
    let _: i64 = server
        .cmd(
            redis::cmd("HSET")
                .arg(key("jobs"))
                .arg("garbage")
                .arg("\u{1}not json"),
        )
        .await;
    let _: i64 = server
        .cmd(redis::cmd("ZADD").arg(key("dead")).arg(1).arg("garbage"))
        .await;
    let _: i64 = server
        .cmd(
            redis::cmd("HSET")
                .arg(key("errors"))
                .arg("garbage")
                .arg("cannot decode"),
        )
        .await;
    let redefer::lock::Acquisition::Acquired(Some(fence)) = store
        .try_acquire(
            &LockKey::new("order:{7}").unwrap(),
            LockToken::random(),
            Duration::from_secs(60),
        )
        .await
        .unwrap()
    else {
        panic!("order 7 is free");
    };
    // Two callers wait in the key's line.
    for _ in 0..2 {
        store
            .join(
                &LockKey::new("order:{7}").unwrap(),
                &redefer::guard::Waiter::caller(LockToken::random()),
                None,
            )
            .await
            .unwrap();
    }

    let stats = json(&server, &prefix, &["stats"]);
    assert_eq!(
        (stats["waiting"].as_u64(), stats["dead"].as_u64()),
        (Some(1), Some(2))
    );

    let dead = json(&server, &prefix, &["list", "dead"]);
    let dead = dead.as_array().unwrap();
    assert_eq!(dead.len(), 2);
    let garbage = dead.iter().find(|row| row["id"] == "garbage").unwrap();
    assert!(
        garbage["undecodable"].as_str().unwrap().contains("cannot decode"),
        "{garbage}"
    );
    let buried = dead.iter().find(|row| row["id"] == doomed.as_str()).unwrap();
    assert_eq!(buried["reason"], "boom");
    assert_eq!(
        buried["payload"],
        serde_json::json!({ "order": 2 }),
        "whole, as JSON"
    );
    // The same as a table, for people.
    let table = redefer(&server, &prefix, &["list", "dead"]).unwrap();
    assert!(
        table.contains("garbage") && table.contains("boom") && table.contains("undecodable"),
        "{table}"
    );

    let shown = json(&server, &prefix, &["show", doomed.as_str()]);
    assert_eq!(shown["state"], "dead");
    assert_eq!(shown["envelope"]["payload"]["order"], 2);
    assert!(redefer(&server, &prefix, &["show", "no-such-job"]).is_err());

    assert_eq!(
        json(&server, &prefix, &["requeue", doomed.as_str()])["requeued"],
        1
    );
    assert_eq!(
        json(&server, &prefix, &["requeue", "--all"])["requeued"],
        1,
        "the garbage entry has a valid id"
    );
    let stats = json(&server, &prefix, &["stats"]);
    assert_eq!(
        (stats["waiting"].as_u64(), stats["dead"].as_u64()),
        (Some(3), Some(0))
    );

    let refused = redefer(&server, &prefix, &["purge", "waiting"]).unwrap_err();
    assert!(refused.contains("--yes"), "{refused}");
    assert_eq!(
        json(&server, &prefix, &["purge", "waiting", "--yes"])["purged"],
        3
    );
    assert_eq!(json(&server, &prefix, &["stats"])["waiting"], 0);

    // A throttled key with an admission and two bookings at 1 per minute.
    let rate = Rate::new(1, Duration::from_secs(60)).unwrap();
    let customer = LockKey::new("customer:3").unwrap();
    store.admit(&customer, rate, None).await.unwrap();
    for n in 0..2 {
        let job = Waiter::job(
            &QueueName::new("calls").unwrap(),
            &JobId::new(format!("call-{n}")).unwrap(),
        );
        store.book(&customer, rate, &job).await.unwrap();
    }

    let locks = json(&server, &prefix, &["locks"]);
    let locks = locks.as_array().unwrap();
    assert_eq!(locks.len(), 2);
    assert_eq!(locks[0]["key"], "order:{7}", "the key as the application gave it");
    assert_eq!(locks[0]["fence"], fence.0, "the holder's fencing token");
    assert!(locks[0]["remaining_ms"].as_u64().unwrap() > 50_000);
    assert_eq!(locks[0]["waiters"], 2, "the key's line");
    assert_eq!(locks[0]["next_slot_ms"], Value::Null, "a lock has no slots");
    assert_eq!(locks[1]["key"], "customer:3");
    assert_eq!(locks[1]["waiters"], 2, "the slots booked ahead");
    let next_slot = locks[1]["next_slot_ms"].as_u64().unwrap();
    assert!((170_000..=180_000).contains(&next_slot), "{next_slot}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_of_a_job_that_is_not_dead_says_so_and_exits_1() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    let waiting = queue
        .push(&serde_json::json!({ "order": 1 }), Duration::from_secs(60))
        .await
        .unwrap()
        .id;
    let refused = redefer(&server, &prefix, &["requeue", waiting.as_str()]).expect_err("exit 1");
    assert!(refused.contains("is not dead (waiting)"), "{refused}");
    let unknown = redefer(&server, &prefix, &["requeue", "no-such-job"]).expect_err("exit 1");
    assert!(unknown.contains("not in the queue"), "{unknown}");
    let as_json = redefer(&server, &prefix, &["--json", "requeue", "no-such-job"]).expect_err("exit 1");
    let error: Value = serde_json::from_str(as_json.trim()).expect("a JSON error with --json");
    assert!(
        error["error"].as_str().unwrap().contains("not in the queue"),
        "{error}"
    );
    assert_eq!(
        queue.operator().stats().await.unwrap().waiting,
        1,
        "nothing moved"
    );
}

#[test]
fn a_connection_error_names_the_url_without_its_password_and_gives_a_hint() {
    let port = support::free_port();
    let output = Command::new(env!("CARGO_BIN_EXE_redefer"))
        .args(["--url", &format!("redis://app:s3cret@127.0.0.1:{port}"), "stats"])
        .output()
        .expect("run redefer");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("redis://app:***@127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
    assert!(stderr.contains("--url or REDIS_URL"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_queue_is_an_error_and_queues_lists_the_known_ones() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    queue
        .push(&serde_json::json!({ "order": 1 }), Duration::from_secs(60))
        .await
        .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_redefer"))
        .args([
            "--url",
            &server.url(),
            "--prefix",
            &prefix,
            "--queue",
            "ordres",
            "stats",
        ])
        .output()
        .expect("run redefer");
    assert_eq!(output.status.code(), Some(1), "a mistyped queue fails");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no queue \"ordres\"") && stderr.contains("known: orders"),
        "{stderr}"
    );
    let wrong_prefix = redefer(&server, "elsewhere", &["stats"]).expect_err("an unknown prefix fails");
    assert!(wrong_prefix.contains("known: none"), "{wrong_prefix}");
    assert_eq!(
        json(&server, &prefix, &["queues"]),
        serde_json::json!([{ "queue": "orders", "shards": 1, "activity": "on" }])
    );
    assert_eq!(json(&server, &prefix, &["stats"])["waiting"], 1);
}

/// A queue key another tool overwrote: `redefer stats` says what is wrong with it, where it
/// printed the client's text (`WRONGTYPE ... script: <sha>, on @user_script:545.`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_said_to_be_one() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    queue
        .push(&serde_json::json!({ "order": 1 }), Duration::ZERO)
        .await
        .unwrap();
    let _: redis::Value = server
        .cmd(
            redis::cmd("SET")
                .arg(format!("{prefix}:q:{{orders}}:dead"))
                .arg("x"),
        )
        .await;
    let stderr = redefer(&server, &prefix, &["stats"]).expect_err("stats cannot count a string");
    assert!(
        stderr.contains("a key under the prefix holds another type of value than redefer keeps there"),
        "{stderr}"
    );
    assert!(!stderr.contains("script"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_config_file_names_the_prefix_queue_and_shards() {
    let server = RedisServer::start();
    let prefix = server.store().await.prefix().as_str().to_string();
    let config: redefer::Config = toml::from_str(&format!(
        "prefix = \"{prefix}-billing\"\n[queue]\nname = \"charges\"\nshards = 3\n"
    ))
    .unwrap();
    let queue = config.queue::<Value, _>(server.store().await).unwrap();
    queue
        .push_many(
            &[serde_json::json!(1), serde_json::json!(2), serde_json::json!(3)],
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let file = tempfile::NamedTempFile::with_suffix(".toml").unwrap();
    std::fs::write(
        file.path(),
        format!("prefix = \"{prefix}-billing\"\n[queue]\nname = \"charges\"\nshards = 3\n"),
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_redefer"))
            .args([
                "--url",
                &server.url(),
                "--config",
                file.path().to_str().unwrap(),
                "--json",
            ])
            .args(args)
            .output()
            .expect("run redefer")
    };
    let stats = run(&["stats"]);
    assert!(
        stats.status.success(),
        "{}",
        String::from_utf8_lossy(&stats.stderr)
    );
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(
        stats["waiting"], 3,
        "every shard counted, under the config's prefix"
    );
    // A flag still wins over the file.
    let other = run(&["--queue", "chrages", "stats"]);
    assert_eq!(other.status.code(), Some(1));
    // A config that does not validate is an error naming the key.
    std::fs::write(file.path(), "[scheduler]\nmax_idle = \"0s\"\n").unwrap();
    let invalid = run(&["stats"]);
    assert_eq!(invalid.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&invalid.stderr).contains("scheduler.max_idle"),
        "{}",
        String::from_utf8_lossy(&invalid.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_json_gives_whole_payloads_and_names_the_time_column() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    let long = serde_json::json!({ "note": "x".repeat(200), "items": [1, 2, 3] });
    queue.push(&long, Duration::from_secs(60)).await.unwrap();
    queue
        .push(&serde_json::json!({ "order": 2 }), Duration::ZERO)
        .await
        .unwrap();
    let mut claimed = queue.claim(1, Duration::from_secs(30)).await.unwrap().jobs;
    let waiting = json(&server, &prefix, &["list", "waiting"]);
    assert_eq!(waiting[0]["payload"], long, "the whole payload, as JSON");
    assert!(waiting[0]["due"].is_string(), "{waiting}");
    let in_flight = json(&server, &prefix, &["list", "in_flight"]);
    assert!(in_flight[0]["lease_deadline"].is_string(), "{in_flight}");
    assert!(queue.bury(&claimed.remove(0).lease, "boom").await.unwrap());
    let dead = json(&server, &prefix, &["list", "dead"]);
    assert!(dead[0]["buried_at"].is_string(), "{dead}");
    let table = redefer(&server, &prefix, &["list", "waiting"]).unwrap();
    assert!(table.lines().next().unwrap().contains("due"), "{table}");
    assert!(table.contains('…'), "a table summarizes: {table}");
    // The set names are those of stats.
    let stats = json(&server, &prefix, &["stats"]);
    for set in ["waiting", "in_flight", "dead", "done"] {
        assert!(stats.get(set).is_some(), "stats names {set}: {stats}");
        redefer(&server, &prefix, &["list", set]).unwrap_or_else(|error| panic!("list {set}: {error}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_run_now_pause_and_resume_act_on_the_queue() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    let later = queue
        .push(&serde_json::json!(1), Duration::from_secs(3600))
        .await
        .unwrap()
        .id;
    let doomed = queue
        .push(&serde_json::json!(2), Duration::from_secs(3600))
        .await
        .unwrap()
        .id;

    json(&server, &prefix, &["run-now", later.as_str()]);
    assert_eq!(queue.operator().stats().await.unwrap().due, 1);
    json(&server, &prefix, &["cancel", doomed.as_str()]);
    assert_eq!(queue.operator().stats().await.unwrap().waiting, 1);
    let gone = redefer(&server, &prefix, &["cancel", doomed.as_str()]).expect_err("exit 1");
    assert!(gone.contains("not in the queue"), "{gone}");

    json(&server, &prefix, &["pause"]);
    assert_eq!(json(&server, &prefix, &["stats"])["paused"], true);
    assert!(
        queue
            .claim(10, Duration::from_secs(30))
            .await
            .unwrap()
            .jobs
            .is_empty()
    );
    json(&server, &prefix, &["resume"]);
    let job = queue
        .claim(10, Duration::from_secs(30))
        .await
        .unwrap()
        .jobs
        .remove(0);
    let running = redefer(&server, &prefix, &["run-now", job.envelope.id.as_str()]).expect_err("exit 1");
    assert!(running.contains("not waiting (in flight)"), "{running}");
    let cancel_running =
        redefer(&server, &prefix, &["cancel", job.envelope.id.as_str()]).expect_err("exit 1");
    assert!(cancel_running.contains("in flight"), "{cancel_running}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_command_serves_the_pages_on_loopback_read_only_without_a_token() {
    use std::io::{BufRead, BufReader};

    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store, "orders").unwrap();
    queue
        .push(&serde_json::json!({ "order": 1 }), Duration::from_secs(60))
        .await
        .unwrap();
    let port = support::free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_redefer"))
        .args(["--url", &server.url(), "--prefix", &prefix, "dashboard"])
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .env_remove("REDEFER_DASHBOARD_TOKEN")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run redefer dashboard");
    // It says where it listens once it does.
    let mut first = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(
        first.contains(&format!("http://127.0.0.1:{port}")) && first.contains("read-only"),
        "{first}"
    );
    let http = reqwest::Client::new();
    let page = http
        .get(format!("http://127.0.0.1:{port}/queues/orders"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("order"));
    let refused = http
        .post(format!("http://127.0.0.1:{port}/queues/orders/pause"))
        .form(&[("csrf", "")])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert!(!queue.operator().stats().await.unwrap().paused);
    child.kill().unwrap();
    child.wait().unwrap();
    // Anything but loopback needs a token: such a dashboard would show every payload to all.
    let exposed = redefer(&server, &prefix, &["dashboard", "--bind", "0.0.0.0:0"]).expect_err("exit 1");
    assert!(exposed.contains("without a token"), "{exposed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_queue_is_read_with_its_registered_shards_and_a_wrong_count_is_an_error() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store, "orders")
        .unwrap()
        .shards(4)
        .unwrap();
    let items: Vec<Value> = (0..8).map(|n| serde_json::json!(n)).collect();
    queue.push_many(&items, Duration::from_secs(60)).await.unwrap();
    assert_eq!(
        json(&server, &prefix, &["stats"])["waiting"],
        8,
        "no --shards: the registered count, every shard"
    );
    assert_eq!(json(&server, &prefix, &["--shards", "4", "stats"])["waiting"], 8);
    let wrong = redefer(&server, &prefix, &["--shards", "1", "stats"]).expect_err("exit 1");
    assert!(
        wrong.contains("has 4 shards") && wrong.contains("--shards says 1"),
        "{wrong}"
    );
    assert_eq!(json(&server, &prefix, &["queues"])[0]["shards"], 4);
}

/// `groups` counts the waiting jobs per group over a sharded queue's shards, the largest first,
/// and says how many it left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_lists_the_waiting_jobs_per_group_largest_first() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store, "orders")
        .unwrap()
        .shards(2)
        .unwrap();
    for (tenant, count) in [("small", 2), ("large", 7), ("middle", 4)] {
        let items: Vec<Value> = (0..count).map(|n| serde_json::json!(n)).collect();
        queue
            .in_group(JobGroup::new(tenant).unwrap())
            .push_many(&items, Duration::ZERO)
            .await
            .unwrap();
    }
    let groups = json(&server, &prefix, &["groups", "--limit", "2"]);
    assert_eq!(
        groups,
        serde_json::json!([{ "group": "large", "waiting": 7 }, { "group": "middle", "waiting": 4 }])
    );
    let table = redefer(&server, &prefix, &["groups"]).unwrap();
    assert!(table.contains("large") && table.contains("small"), "{table}");
}

/// A count the command cannot honour is refused, not answered with fewer rows than there are:
/// `--limit 0` listed nothing and printed "(none)" beside a queue and locks that held some, and
/// a limit over a page (1000) was cut to one without a word. A malformed cursor is told its
/// form (its time's error alone said "timestamp format is invalid").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_of_zero_or_over_a_page_is_refused_not_an_empty_listing() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store, "orders").unwrap();
    queue
        .push(&serde_json::json!(1), Duration::from_secs(60))
        .await
        .unwrap();
    for (args, why) in [
        (&["list", "waiting", "--limit", "0"][..], "0 is not in 1..=1000"),
        (&["list", "waiting", "--limit", "1001"], "1001 is not in 1..=1000"),
        (&["groups", "--limit", "0"], "0 is not in 1..=1000"),
        (&["locks", "--limit", "0"], "must be at least 1"),
        (&["footprint", "--max-keys", "0"], "must be at least 1"),
        // A cursor whose time does not parse is told its form, as one without a `/` is.
        (
            &["list", "waiting", "--after", "5/x"],
            "--after takes <time>/<id>",
        ),
        (&["list", "waiting", "--after", "5"], "--after takes <time>/<id>"),
    ] {
        let refused = redefer(&server, &prefix, args).expect_err("refused");
        assert!(refused.contains(why), "{args:?}: {refused}");
    }
    let page = json(&server, &prefix, &["list", "waiting", "--limit", "1000"]);
    assert_eq!(page.as_array().map(Vec::len), Some(1), "{page}");
}

/// A listing cut by its limit says so on stderr, and where the next page starts: `list` and
/// `locks` printed a full page as if it were all there was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_cut_by_its_limit_says_so_and_where_to_go_on() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    let items: Vec<Value> = (0..5).map(|n| serde_json::json!(n)).collect();
    queue.push_many(&items, Duration::from_secs(60)).await.unwrap();
    for n in 0..3 {
        let key = LockKey::new(format!("order:{n}")).unwrap();
        let acquired = store
            .try_acquire(&key, LockToken::random(), Duration::from_secs(60))
            .await
            .unwrap();
        assert!(matches!(acquired, redefer::lock::Acquisition::Acquired(_)));
    }
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_redefer"))
            .args(["--url", &server.url(), "--prefix", &prefix, "--queue", "orders"])
            .args(args)
            .output()
            .expect("run redefer");
        assert!(output.status.success(), "{args:?}");
        (
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (_, cut) = run(&["locks", "--limit", "2"]);
    assert!(cut.contains("2 shown (--limit), there may be more"), "{cut}");
    let (_, all) = run(&["locks", "--limit", "10"]);
    assert_eq!(all, "", "not cut");

    let (first, cut) = run(&["list", "waiting", "--limit", "3"]);
    assert_eq!(first.lines().count(), 4, "a header and 3 rows: {first}");
    let after = cut
        .split("--after ")
        .nth(1)
        .map(str::trim)
        .unwrap_or_else(|| panic!("where the next page starts: {cut}"));
    let (rest, end) = run(&["list", "waiting", "--limit", "3", "--after", after]);
    assert_eq!(rest.lines().count(), 3, "a header and the last 2 rows: {rest}");
    assert_eq!(end, "", "not cut");
}

/// An error or a hint that quotes text from outside (a key, a URL, a prefix found by a scan)
/// writes its control characters escaped, as the tables do: `redefer reopen` of a key holding an
/// escape sequence, a URL holding one, and the prefixes `redefer queues` suggests printed it raw
/// on the operator's terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_or_hint_quoting_outside_text_writes_it_escaped() {
    let server = RedisServer::start();
    let key = redefer(&server, "hostile", &["reopen", "k\u{1b}[31m"]).expect_err("not closed");
    let url = Command::new(env!("CARGO_BIN_EXE_redefer"))
        .args(["--url", "redis://\u{1b}[31m:1", "queues"])
        .output()
        .expect("run redefer");
    let url = String::from_utf8_lossy(&url.stderr).into_owned();
    // A prefix found elsewhere, for a prefix that holds no queue: another tool's key name.
    let _: ::redis::Value = server
        .cmd(::redis::cmd("SET").arg("ev\u{1b}[31mil:queues").arg(1))
        .await;
    let elsewhere = redefer(&server, "hostile", &["queues"]).expect("an empty list");
    assert_eq!(elsewhere, "(none)\n");
    let hint = Command::new(env!("CARGO_BIN_EXE_redefer"))
        .args(["--url", &server.url(), "--prefix", "hostile", "queues"])
        .output()
        .expect("run redefer");
    let hint = String::from_utf8_lossy(&hint.stderr).into_owned();
    for (stderr, shown) in [
        (&key, "k\\u{1B}[31m is not closed"),
        (&url, "redis://\\u{1B}[31m:1 is not a Redis URL"),
        (&hint, "registered under: ev\\u{1B}[31mil"),
    ] {
        assert!(stderr.contains(shown), "{stderr}");
        assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    }
}

/// The global options go before the command or after it (`redefer queues --url URL`), and a
/// configuration file is read with the crate's own TOML reader (a partial `retention` works).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_options_go_before_or_after_the_command() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    queue
        .push(&serde_json::json!({ "order": 1 }), Duration::from_secs(60))
        .await
        .unwrap();
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_redefer"))
            .args(args)
            .output()
            .expect("run redefer");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<Value>(&output.stdout).expect("JSON output")
    };
    let url = server.url();
    let after = run(&[
        "stats", "--url", &url, "--prefix", &prefix, "--queue", "orders", "--json",
    ]);
    let before = run(&[
        "--url", &url, "--prefix", &prefix, "--queue", "orders", "--json", "stats",
    ]);
    assert_eq!(after["waiting"], 1);
    assert_eq!(after, before);
    let queues = run(&["queues", "--json", "--prefix", &prefix, "--url", &url]);
    assert!(queues.to_string().contains("orders"), "{queues}");

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("app.toml");
    let text =
        format!("prefix = \"{prefix}\"\n[queue]\nname = \"orders\"\nretention = {{ max_count = 10 }}\n");
    std::fs::write(&config, text).unwrap();
    let configured = run(&[
        "stats",
        "--json",
        "--url",
        &url,
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(configured["waiting"], 1);
}

/// `list` and `show` count a job's attempts as its status does: a job done at its first run
/// has had 1 attempt, wherever it is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_show_and_status_agree_on_attempts() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders")
        .unwrap()
        .retain_finished(redefer::queue::Retention::default());
    let id = queue
        .push(&serde_json::json!({ "order": 1 }), Duration::ZERO)
        .await
        .unwrap()
        .id;
    let claimed = queue.claim(1, Duration::from_secs(30)).await.unwrap();
    assert!(queue.ack(&claimed.jobs[0].lease).await.unwrap());
    let Ok(redefer::queue::JobStatus::Done { attempts, .. }) = queue.status(&id).await else {
        panic!("the job is kept as done");
    };
    assert_eq!(attempts, Some(1));
    let listed = json(&server, &prefix, &["list", "done"]);
    assert_eq!(listed[0]["attempts"], 1, "{listed}");
    let shown = json(&server, &prefix, &["show", id.as_str()]);
    assert_eq!(shown["attempts"], 1, "{shown}");
}

/// What a newcomer meets first: `queues` under a prefix that holds none lists nothing (exit 0)
/// and says under which prefixes queues are registered; an `http://` URL is named as not a
/// Redis URL, without the hint that the server may be down; a throttled key's row in `locks`
/// shows no limit (a limit of 0 reads as "closed"); `footprint` counts the keys by kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_is_told_where_to_look() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    queue
        .push(&serde_json::json!({ "order": 1 }), Duration::from_secs(60))
        .await
        .unwrap();

    let output = Command::new(env!("CARGO_BIN_EXE_redefer"))
        .args(["--url", &server.url(), "--prefix", "elsewhere", "queues"])
        .output()
        .expect("run redefer");
    assert!(output.status.success(), "an empty list is not an error");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("registered under: {prefix}")),
        "{stderr}"
    );

    let output = Command::new(env!("CARGO_BIN_EXE_redefer"))
        .args(["--url", "http://127.0.0.1:6379", "queues"])
        .output()
        .expect("run redefer");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a Redis URL"), "{stderr}");
    assert!(!stderr.contains("is the server running"), "{stderr}");

    let rate = Rate::new(1, Duration::from_secs(60)).unwrap();
    store
        .admit(&LockKey::new("customer:1").unwrap(), rate, None)
        .await
        .unwrap();
    let locks = json(&server, &prefix, &["locks"]);
    let throttled = locks
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["key"] == "customer:1")
        .expect("the throttled key is listed");
    assert!(throttled["next_slot_ms"].is_u64(), "{throttled}");
    assert!(
        throttled["limit"].is_null() && throttled["holders"].is_null(),
        "{throttled}"
    );

    let footprint = json(&server, &prefix, &["footprint"]);
    assert_eq!(footprint["complete"], true, "{footprint}");
    assert_eq!(footprint["kinds"]["throttle"]["keys"], 1, "{footprint}");
    assert_eq!(footprint["kinds"]["throttle"]["never_expire"], 0, "{footprint}");
    assert_eq!(footprint["kinds"]["queues"]["never_expire"], 1, "{footprint}");
}

/// `reopen` lifts a closing now: the key's next slot is the one its rate gives (its closing's
/// hour gone), `locks` no longer shows it closed, and a key that is not closed is named as
/// such (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_reopens_a_closed_key() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let key = LockKey::new("api.example").unwrap();
    let rate = Rate::new(1, Duration::from_secs(60)).unwrap();
    store.admit(&key, rate, None).await.unwrap();
    store
        .close_for(&key, rate, Duration::from_secs(3_600))
        .await
        .unwrap();
    let closed_for = |locks: &Value| locks.as_array().unwrap()[0]["closed_ms"].clone();
    let locks = json(&server, &prefix, &["locks"]);
    assert!(
        closed_for(&locks).as_u64().is_some_and(|ms| ms > 3_500_000),
        "{locks}"
    );

    let reopened = json(&server, &prefix, &["reopen", "api.example"]);
    assert_eq!(reopened["reopened"], "api.example", "{reopened}");
    // The admission before the closing still holds the key's slot for its minute.
    let next_slot = reopened["next_slot_ms"].as_u64().unwrap();
    assert!(next_slot > 0 && next_slot <= 60_000, "{reopened}");
    let locks = json(&server, &prefix, &["locks"]);
    assert_eq!(closed_for(&locks), Value::Null, "{locks}");

    let again = redefer(&server, &prefix, &["reopen", "api.example"]).expect_err("exit 1");
    assert!(again.contains("not closed"), "{again}");
}

/// With `--cluster`, the command lists the locks of every master, not those of the node its
/// URL names (a SCAN of one node would see a third of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_locks_of_every_master_are_listed() {
    let cluster = support::RedisCluster::start_of(support::Server::Redis, 3, 0);
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let store = redefer::RedisStore::builder()
        .prefix(support::unique_prefix())
        .unwrap()
        .connect_cluster(&nodes)
        .await
        .expect("connect to the cluster");
    // Enough keys that every master holds some (the slots spread them).
    let keys: std::collections::HashSet<String> = (0..30).map(|n| format!("order:{n}")).collect();
    for key in &keys {
        let taken = store
            .try_acquire(
                &LockKey::new(key.as_str()).unwrap(),
                LockToken::random(),
                Duration::from_secs(60),
            )
            .await
            .unwrap();
        assert!(matches!(taken, redefer::lock::Acquisition::Acquired(_)));
    }
    let output = Command::new(env!("CARGO_BIN_EXE_redefer"))
        .args([
            "--url",
            &urls[0],
            "--cluster",
            "--prefix",
            store.prefix().as_str(),
        ])
        .args(["--json", "locks", "--limit", "1000"])
        .output()
        .expect("run redefer");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let listed: std::collections::HashSet<String> = rows
        .iter()
        .map(|row| row["key"].as_str().expect("a key").to_string())
        .collect();
    assert_eq!(listed, keys);
}

/// A key holding an escape sequence, a bell, a NUL, a right-to-left override or a line break
/// (keys come from request data) reaches the terminal escaped, on its row of the table: the
/// table has one line per lock, and no control character but the line ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_shows_hostile_keys_escaped_one_row_each() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    let hostile = [
        "order:\x1b[31mred",
        "order:\x07bell\0nul",
        "order:\u{202E}txt.exe",
        "order:a\nb\tc",
    ];
    for name in hostile {
        store
            .try_acquire(
                &LockKey::new(name).unwrap(),
                LockToken::random(),
                Duration::from_secs(60),
            )
            .await
            .unwrap();
    }
    // A value redefer cannot read, shown in the row's note, is escaped as the keys are.
    let _: () = server
        .cmd(
            ::redis::cmd("SET")
                .arg(
                    store
                        .lock_redis_key(&LockKey::new(hostile[0]).unwrap())
                        .replacen(":lock:", ":fence:", 1),
                )
                .arg("7\x1b[31m"),
        )
        .await;
    let table = redefer(&server, &prefix, &["locks"]).expect("redefer locks succeeds");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines.len(),
        1 + hostile.len(),
        "a header and a row per lock:\n{table}"
    );
    let unshown: Vec<char> = table
        .chars()
        .filter(|c| (c.is_control() && *c != '\n') || *c == '\u{202E}')
        .collect();
    assert!(unshown.is_empty(), "{unshown:?} in\n{table}");
    for shown in [
        "order:\\u{1B}[31mred",
        "order:\\u{7}bell\\u{0}nul",
        "order:\\u{202E}txt.exe",
        "order:a\\u{A}b\\u{9}c",
        "its fencing counter holds \"7\\u{1B}[31m\"",
    ] {
        assert!(table.contains(shown), "{shown} in\n{table}");
    }
    // The JSON output keeps the keys as they are, escaped as JSON.
    let listed = json(&server, &prefix, &["locks"]);
    let mut keys: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|row| row["key"].as_str())
        .collect();
    keys.sort_unstable();
    let mut expected = hostile.to_vec();
    expected.sort_unstable();
    assert_eq!(keys, expected);
}

/// A reader that closes the pipe (`redefer locks | head -c 5`) ends the command quietly
/// with success, not with a panic ("failed printing to stdout") and exit code 101.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_closes_the_pipe_ends_the_command_quietly() {
    use std::process::Stdio;

    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    // Enough rows that the output outgrows the pipe's buffer.
    for n in 0..3_000 {
        store
            .try_acquire(
                &LockKey::new(format!("order:{n}")).unwrap(),
                LockToken::random(),
                Duration::from_secs(60),
            )
            .await
            .unwrap();
    }
    for args in [
        &["locks", "--limit", "5000"][..],
        &["--json", "locks", "--limit", "5000"],
        &["footprint"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_redefer"))
            .args(["--url", &server.url(), "--prefix", &prefix])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run redefer");
        // The reader goes before the command writes: its every write finds the pipe closed.
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{args:?}: {:?}, {stderr}", output.status);
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

/// The commands `redefer --help` lists, read from its "Commands:" section.
fn commands() -> Vec<String> {
    let help = help_of(&[]);
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|command| *command != "help")
        .map(str::to_string)
        .collect()
}

/// The help of `redefer <command> --help`.
fn help_of(command: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_redefer"))
        .args(command)
        .arg("--help")
        .output()
        .expect("run redefer");
    assert!(output.status.success(), "{command:?} --help");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Every argument a command takes says in its help what it is (`list <SET>` said nothing of
/// the sets there are, `show <ID>` nothing of where an id comes from).
#[test]
fn every_argument_of_every_command_says_what_it_takes() {
    let commands = commands();
    assert!(
        commands.len() > 10,
        "the commands are read from the help: {commands:?}"
    );
    for command in &commands {
        let help = help_of(&[command]);
        let unexplained: Vec<&str> = help
            .lines()
            .skip_while(|line| !line.starts_with("Arguments:"))
            .skip(1)
            .take_while(|line| line.starts_with("  "))
            .filter(|line| {
                // `  <SET>  The set: ...`: the words after the argument's name.
                let named = line.trim_start();
                let after_name = named.split_once(char::is_whitespace).map_or("", |(_, rest)| rest);
                after_name.trim().is_empty()
            })
            .collect();
        assert!(
            unexplained.is_empty(),
            "redefer {command}: {unexplained:?} say nothing:\n{help}"
        );
    }
}
