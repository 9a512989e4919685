//! The configuration's unit tests.

use std::time::Duration;

use super::*;
use crate::lock::Fencing;
use crate::queue::{Counters, Retention};
use crate::strategy::RetryLimits;

fn parsed(text: &str) -> Config {
    toml::from_str(text).unwrap()
}

#[test]
fn defaults_are_valid_and_fail_fast() {
    let config = parsed("");
    assert_eq!(config, Config::default());
    config.validate().unwrap();
    assert_eq!(config.strategy.retry.max_attempts, 0);
    assert_eq!(config.strategy.then, FallThrough::FailFast);
}

#[test]
fn values_that_cannot_work_are_rejected() {
    let invalid = [
        ("prefix = \"a{b}\"", "prefix"),
        ("[queue]\nname = \"\"", "queue name"),
        ("[lock]\nttl = \"1ms\"", "lock.ttl"),
        ("[lock]\npermits = 0", "lock.permits"),
        ("[queue.retry]\nmax_attempts = 0", "max_attempts"),
        ("[scheduler]\nconcurrency = 0", "concurrency"),
        ("[queue]\nshards = 0", "queue.shards"),
        ("[scheduler]\nconcurrency = 4931564660701547677", "concurrency"),
        ("[scheduler]\nbatch = 1000000", "batch"),
        (
            "[strategy.retry.backoff]\njitter = -2.0",
            "strategy.retry.backoff.jitter: ",
        ),
        (
            "[queue.retry.backoff]\nfactor = 0.5",
            "queue.retry.backoff.factor: ",
        ),
        (
            "[scheduler.error_backoff]\nfactor = nan",
            "scheduler.error_backoff.factor: ",
        ),
        (
            "[strategy.retry.backoff]\ninitial = \"10s\"\ncap = \"1s\"",
            "strategy.retry.backoff.initial: must not exceed cap",
        ),
        ("[scheduler]\nlease = \"0s\"", "scheduler.lease"),
        ("[scheduler]\nmax_idle = \"0s\"", "scheduler.max_idle: "),
        ("[scheduler]\ntime_limit = \"0s\"", "scheduler.time_limit: "),
        ("[queue]\nmax_payload = 0", "queue.max_payload: "),
        (
            "[queue]\nretention = { max_count = 0, max_age = \"1h\" }",
            "queue.retention.max_count: ",
        ),
        (
            "[queue]\nretention = { max_count = 10, max_age = \"0s\" }",
            "queue.retention.max_age: ",
        ),
    ];
    for (text, mentions) in invalid {
        let error = parsed(text).validate().unwrap_err().to_string();
        assert!(error.contains(mentions), "{text:?}: {error}");
    }
}

/// A partial table keeps the documented defaults for what it leaves out.
#[test]
fn a_partial_table_gets_the_defaults() {
    let config = parsed("[strategy]\nretry = { max_attempts = 3, backoff = { initial = \"20ms\" } }");
    config.validate().unwrap();
    let defaults = RetryLimits::default();
    assert_eq!(config.strategy.retry.max_attempts, 3);
    assert_eq!(config.strategy.retry.max_wait, defaults.max_wait);
    assert_eq!(config.strategy.retry.backoff.initial, Duration::from_millis(20));
    assert_eq!(config.strategy.retry.backoff.cap, defaults.backoff.cap);
    assert_eq!(config.strategy.retry.backoff.factor, defaults.backoff.factor);
}

#[test]
fn the_configured_retention_reaches_the_queue() {
    let config = parsed("[queue]\nretention = { max_count = 500, max_age = \"2h\" }");
    config.validate().unwrap();
    let queue = config.queue::<u32, _>(crate::MemoryStore::new()).unwrap();
    assert_eq!(
        queue.retention(),
        Some(Retention::new(500, Duration::from_secs(7200)))
    );
    let plain = parsed("").queue::<u32, _>(crate::MemoryStore::new()).unwrap();
    assert_eq!(plain.retention(), None, "none by default");
}

#[test]
fn the_configured_activity_counters_reach_the_queue() {
    let off = parsed("[queue]\nactivity = \"off\"");
    assert_eq!(
        off.queue::<u32, _>(crate::MemoryStore::new()).unwrap().counters(),
        Counters::Off
    );
    let plain = parsed("").queue::<u32, _>(crate::MemoryStore::new()).unwrap();
    assert_eq!(plain.counters(), Counters::On, "on by default");
    assert!(toml::from_str::<Config>("[queue]\nactivity = \"sometimes\"").is_err());
}

#[test]
fn toml_is_read_and_checked_by_the_crate_itself() {
    let partial = Config::from_toml_str("[queue]\nretention = { max_count = 10 }").unwrap();
    let retention = partial.queue.retention.unwrap();
    assert_eq!(retention.max_count, 10);
    assert_eq!(retention.max_age, crate::queue::Retention::default().max_age);
    assert!(matches!(
        Config::from_toml_str("[queue]\nretention = { max_count = 10, keep = 3 }"),
        Err(ConfigError::Parse(_))
    ));
    assert!(matches!(
        Config::from_toml_str("[scheduler]\nmax_idle = \"0s\""),
        Err(ConfigError::OutOfRange { .. })
    ));
    assert!(matches!(
        Config::from_file("/nonexistent/redefer.toml"),
        Err(ConfigError::Read { .. })
    ));
}

#[test]
fn the_line_cap_and_the_re_deferral_cap_are_read_from_their_sections() {
    let config = parsed(
        "[strategy]\nthen = \"defer\"\nmax_waiting = { max = 3, overflow = \"drop_oldest\" }\n\
         [queue]\nretry = { max_lock_waits = 50 }",
    );
    assert_eq!(
        config.strategy.max_waiting,
        Some(crate::guard::LineCap::new(3).drop_oldest())
    );
    assert_eq!(config.queue.retry.max_lock_waits, 50);
    assert_eq!(parsed("").strategy.max_waiting, None);
    assert!(
        toml::from_str::<Config>("[strategy]\nmax_waiting = { max = 3, overflow = \"newest\" }").is_err()
    );
}

#[test]
fn the_semaphore_and_the_throttle_are_built_from_their_sections() {
    let store = crate::MemoryStore::new();
    let by_key = |n: &u64| Some(format!("key:{n}"));
    let plain = parsed("");
    let queue = || plain.queue::<u64, _>(store.clone()).unwrap();
    assert!(plain.lock_layer(store.clone(), by_key, queue()).is_ok());
    let missing = |error: ConfigError| error.to_string();
    let no_permits = plain
        .semaphore_layer(store.clone(), by_key, queue())
        .map(|_| ())
        .unwrap_err();
    assert!(missing(no_permits).contains("lock.permits"));
    let no_rate = plain
        .throttle_layer(store.clone(), by_key, queue())
        .map(|_| ())
        .unwrap_err();
    assert!(missing(no_rate).contains("throttle"));

    let both = parsed("[lock]\npermits = 3\n[throttle]\nrate = { count = 600, per = \"1m\", burst = 4 }");
    assert!(both.semaphore_layer(store.clone(), by_key, queue()).is_ok());
    assert!(both.throttle_layer(store.clone(), by_key, queue()).is_ok());
    let rate = both.throttle.unwrap().rate;
    assert_eq!(
        (rate.interval(), rate.burst_size()),
        (Duration::from_millis(100), 4)
    );
    // A mutex asked of a semaphore's configuration is a mistake, not a silent mutex.
    let mutex = both
        .lock_layer(store.clone(), by_key, queue())
        .map(|_| ())
        .unwrap_err();
    assert!(missing(mutex).contains("lock.permits"));
    assert!(toml::from_str::<Config>("[throttle]\nrate = { count = 0, per = \"1s\" }").is_err());
}

#[test]
fn unknown_fields_and_bad_durations_do_not_parse() {
    assert!(toml::from_str::<Config>("[lock]\nttl = \"10 parsecs\"").is_err());
    assert!(toml::from_str::<Config>("[lock]\nttll = \"10s\"").is_err());
    assert!(toml::from_str::<Config>("[strategy]\nthen = \"pray\"").is_err());
    assert!(
        toml::from_str::<Config>("[queue]\nretention = { max_count = 1, max_age = \"1h\", max_size = 2 }")
            .is_err()
    );
}

/// A service with several queues and guards, each with its own strategy, in one file: every
/// part is built by name, and what the names refer to is checked.
#[test]
fn a_whole_service_is_described_and_built_by_name() {
    let config = Config::from_toml_str(
        r#"
        prefix = "shop"

        [queues.exports]
        shards = 2
        [queues.syncs]
        retry = { max_attempts = 3 }
        [schedulers.syncs]
        concurrency = 4

        [guards.exports]
        lock = { permits = 4 }
        strategy = { then = "defer" }
        queue = "exports"

        [guards.customers]
        rate = { count = 10, per = "1s", burst = 5 }

        [guards.syncs]
        strategy = { then = "defer", max_waiting = { max = 100 } }
        queue = "syncs"
        "#,
    )
    .unwrap();
    let store = crate::MemoryStore::new();
    let exports = config.queue_named::<u64, _>("exports", store.clone()).unwrap();
    let syncs = config.queue_named::<u64, _>("syncs", store.clone()).unwrap();
    assert_eq!(exports.shard_names().len(), 2);
    assert_eq!(syncs.policy().max_attempts, 3);
    assert_eq!(config.scheduler_named("syncs").unwrap().concurrency, 4);
    assert_eq!(config.scheduler_named("exports").unwrap(), config.scheduler);
    // A typo is an error, as it is for a queue.
    assert!(matches!(
        config.scheduler_named("syncz"),
        Err(ConfigError::OutOfRange { field, .. }) if field == "queues.syncz"
    ));
    let by_key = |n: &u64| Some(n.to_string());
    assert!(
        config
            .semaphore_layer_named("exports", store.clone(), by_key, exports.clone())
            .is_ok()
    );
    assert!(
        config
            .throttle_layer_named("customers", store.clone(), by_key, syncs.clone())
            .is_ok()
    );
    assert!(
        config
            .lock_layer_named("syncs", store.clone(), by_key, syncs.clone())
            .is_ok()
    );
    let error = |result: Result<(), ConfigError>| result.unwrap_err().to_string();
    assert!(
        error(
            config
                .lock_layer_named("exports", store.clone(), by_key, exports.clone())
                .map(|_| ())
        )
        .contains("semaphore_layer_named")
    );
    assert!(
        error(
            config
                .lock_layer_named("syncs", store.clone(), by_key, exports.clone())
                .map(|_| ())
        )
        .contains("guards.syncs.queue")
    );
    assert!(
        error(
            config
                .lock_layer_named("nope", store, by_key, exports)
                .map(|_| ())
        )
        .contains("guards.nope")
    );

    for (text, field) in [
        ("[guards.a]\nqueue = \"nowhere\"", "guards.a.queue"),
        ("[guards.a]\nstrategy = { then = \"defer\" }", "guards.a.queue"),
        (
            "[guards.a]\nlock = { permits = 2 }\nrate = { count = 1, per = \"1s\" }",
            "guards.a",
        ),
        ("[guards.a]\nlock = { permits = 0 }", "guards.a.lock.permits"),
        (
            "[queues.q]\nretry = { max_attempts = 0 }",
            "queues.q.retry.max_attempts",
        ),
        ("[queues.q]\nname = \"other\"", "queues.q.name"),
        ("[schedulers.nowhere]\nconcurrency = 2", "schedulers.nowhere"),
        (
            "[queues.q]\n[schedulers.q]\nconcurrency = 0",
            "schedulers.q.concurrency",
        ),
    ] {
        let refused = Config::from_toml_str(text).unwrap_err().to_string();
        assert!(refused.starts_with(field), "{text}: {refused}");
    }
}

#[test]
fn a_guard_is_taken_apart_for_any_kind_and_one_that_fails_fast_needs_no_queue() {
    let config = Config::from_toml_str(
        r#"
        prefix = "bank"

        [queues.transfers]

        [guards.transfers]
        lock = { ttl = "45s", fencing = "off" }
        strategy = { then = "defer" }
        queue = "transfers"

        [guards.crawler]
        rate = { count = 5, per = "1s" }
        strategy = { retry = { max_attempts = 2 } }
        "#,
    )
    .unwrap();
    let store = crate::MemoryStore::new();
    let transfers = config.guard_named("transfers").unwrap();
    assert_eq!(
        (transfers.ttl(), transfers.fencing(), transfers.permits()),
        (Duration::from_secs(45), Fencing::Off, None)
    );
    let queue = config
        .queue_named::<Vec<String>, _>("transfers", store.clone())
        .unwrap();
    assert!(transfers.deferring_to(queue).is_ok());
    let other = crate::queue::DelayQueue::<Vec<String>, _>::new(store.clone(), "elsewhere").unwrap();
    let error = |result: Result<(), ConfigError>| result.unwrap_err().to_string();
    assert!(error(transfers.deferring_to(other).map(|_| ())).contains("guards.transfers.queue"));
    // A guard that defers has no strategy without its queue.
    assert!(error(transfers.failing_fast().map(|_| ())).contains("guards.transfers.strategy.then"));
    assert!(error(transfers.rate().map(|_| ())).contains("guards.transfers.rate"));

    let crawler = config.guard_named("crawler").unwrap();
    assert_eq!(
        crawler.rate().unwrap(),
        crate::throttle::Rate::per_second(5).unwrap()
    );
    assert!(crawler.failing_fast().is_ok());
    assert!(crawler.store(store).is_ok());
    assert!(error(config.guard_named("crawlr").map(|_| ())).contains("guards.crawlr"));
}
