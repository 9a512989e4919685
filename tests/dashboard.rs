//! The dashboard in a real browser: headless Chromium, driven through chromedriver (Debian's
//! `chromium` and `chromium-driver`, which `.ci/run` installs), against a real Redis. Signs in,
//! opens each page, requeues a dead job with a click and checks Redis; screenshots each page
//! (into `target/dashboard-screenshots/`, and into `docs/screenshots/` for the operations chapter when
//! `REDEFER_UPDATE_SCREENSHOTS` is set). Without chromedriver the browser test is skipped,
//! unless `REDEFER_REQUIRE_BROWSER` is set (CI sets it).

use crate::support;

use crate::support::Shorthand;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use fantoccini::{Client, ClientBuilder, Locator};
use redefer::dashboard::{Dashboard, DashboardOptions};
use redefer::queue::{DelayQueue, JobGroup, JobId, JobSet, QueueCore, RawJobState};
use redefer::{LockKey, LockToken, RedisStore};
use serde_json::{Value, json};

use support::{RedisServer, eventually, free_port};

const TOKEN: &str = "let-me-act";

/// Serves `dashboard` on a free loopback port; its base URL.
async fn serve<St>(dashboard: Dashboard<St>) -> String
where
    St: redefer::queue::QueueStore + redefer::store::ListLocks + Sync,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = dashboard
        .router()
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Serves `dashboard` nested under `mount` in an application's router (without telling it
/// `mounted_at`: it finds its mount itself); its base URL, the mount included.
async fn serve_nested<St>(dashboard: Dashboard<St>, mount: &str) -> String
where
    St: redefer::queue::QueueStore + redefer::store::ListLocks + Sync,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}{mount}", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .nest(mount, dashboard.router())
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The body of a GET of `url`.
async fn body(http: &reqwest::Client, url: String) -> String {
    http.get(url).send().await.unwrap().text().await.unwrap()
}

/// A client that does not follow redirects (so that a sign-in's cookie can be read).
fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Signs in at `url` with `token`: the response.
async fn sign_in(http: &reqwest::Client, url: &str, token: &str) -> reqwest::Response {
    http.post(format!("{url}/login"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
}

/// The `name=value` of a sign-in's session cookie.
fn session_cookie(signed_in: &reqwest::Response) -> String {
    signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string()
}

/// A queue with jobs in every state, an undecodable entry, activity and a held lock.
async fn deployment(server: &RedisServer) -> (RedisStore, DelayQueue<Value, RedisStore>, String) {
    let store = server.store().await;
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    for n in 1..=3 {
        queue
            .push(
                &json!({ "order": n, "action": "charge", "amount_cents": 1999 * n }),
                Duration::from_secs(600 * n),
            )
            .await
            .unwrap();
    }
    // A payload that would be a script if it were not escaped.
    queue
        .push(
            &json!({ "note": "<script>alert('xss')</script>" }),
            Duration::from_secs(3600),
        )
        .await
        .unwrap();
    queue
        .push_many(&[json!({ "order": 7 }), json!({ "order": 8 })], Duration::ZERO)
        .await
        .unwrap();
    let mut claimed = queue.claim(2, Duration::from_secs(300)).await.unwrap().jobs;
    let dead = claimed.remove(0);
    queue
        .bury(&dead.lease, "card declined after 5 attempts")
        .await
        .unwrap();
    queue.ack(&claimed.remove(0).lease).await.unwrap();
    let prefix = store.prefix().as_str().to_string();
    let _: () = server
        .cmd(
            redis::cmd("HSET")
                .arg(format!("{prefix}:q:{{orders}}:jobs"))
                .arg("foreign")
                .arg("\u{1}not json"),
        )
        .await;
    let _: () = server
        .cmd(
            redis::cmd("ZADD")
                .arg(format!("{prefix}:q:{{orders}}:delayed"))
                .arg(4_102_444_800_000u64)
                .arg("foreign"),
        )
        .await;
    // An hour of activity, as the scripts count it, so that the plots have a past.
    let activity = format!("{prefix}:q:{{orders}}:activity");
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60;
    for age in 1..60u64 {
        let minute = now - age;
        let done = 600 + (age * 37 % 23) * 20;
        for (counter, count) in [
            ("claimed", done + 3),
            ("done", done),
            ("failed", age % 7),
            ("dead", u64::from(age % 19 == 0)),
            ("lag_ms", (done + 3) * (2 + age % 5)),
        ] {
            let _: () = server
                .cmd(
                    redis::cmd("HSET")
                        .arg(&activity)
                        .arg(format!("{minute}:{counter}"))
                        .arg(count),
                )
                .await;
        }
    }
    store
        .try_acquire(
            &LockKey::new("order:{42}").unwrap(),
            LockToken::random(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    (store, queue, dead.envelope.id.to_string())
}

/// chromedriver on a free port, or `None` when this machine has none.
fn chromedriver() -> Option<(Child, u16)> {
    let port = free_port();
    match Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => Some((child, port)),
        Err(error) => {
            assert!(
                std::env::var_os("REDEFER_REQUIRE_BROWSER").is_none(),
                "REDEFER_REQUIRE_BROWSER is set and chromedriver cannot start: {error}"
            );
            eprintln!("skipped: no chromedriver ({error}); install chromium and chromium-driver");
            None
        }
    }
}

async fn browser(port: u16) -> Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({ "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"] }),
    );
    let webdriver = format!("http://127.0.0.1:{port}");
    // chromedriver takes a moment to listen: a refused session is retried until it does.
    eventually(Duration::from_secs(20), "chromedriver accepts a session", || {
        let capabilities = capabilities.clone();
        let webdriver = webdriver.clone();
        async move {
            ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(capabilities)
                .connect(&webdriver)
                .await
                .ok()
        }
    })
    .await
}

/// Clicks the element `what` once the page shows it.
async fn click(client: &Client, what: Locator<'_>) {
    client
        .wait()
        .for_element(what)
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// The text of the element `what` once the page shows it.
async fn text(client: &Client, what: Locator<'_>) -> String {
    client
        .wait()
        .for_element(what)
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
    if std::env::var_os("REDEFER_UPDATE_SCREENSHOTS").is_some() {
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(docs.join(format!("{name}.png")), &png).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_requeues_a_dead_job_with_a_click() {
    let Some((mut driver, port)) = chromedriver() else {
        return;
    };
    let server = RedisServer::start();
    let (store, queue, dead) = deployment(&server).await;
    // Mounted under a prefix, as an application nests it: every link and form must stay there.
    let url = serve_nested(
        Dashboard::new(store, DashboardOptions::default().token(Some(TOKEN.into()))),
        "/ops",
    )
    .await;
    let client = browser(port).await;

    client.goto(&format!("{url}/login")).await.unwrap();
    client
        .find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    click(&client, Locator::Id("sign-in")).await;
    let queues = text(&client, Locator::Id("queues")).await;
    assert!(queues.contains("orders"), "{queues}");
    let bars = client.find_all(Locator::Css("#queues svg rect")).await.unwrap();
    assert_eq!(bars.len(), 3 * 60, "three plots of an hour, a bar per minute");
    screenshot(&client, "queues").await;

    click(&client, Locator::LinkText("orders")).await;
    let jobs = text(&client, Locator::Id("jobs")).await;
    assert!(
        jobs.contains("undecodable"),
        "the foreign entry is shown as such: {jobs}"
    );
    screenshot(&client, "queue").await;

    click(&client, Locator::Css("a[href$='set=dead']")).await;
    let row = client
        .wait()
        .for_element(Locator::Css(&format!(
            "tr[data-id='{dead}'] button[value=requeue]"
        )))
        .await
        .unwrap();
    screenshot(&client, "dead").await;
    row.click().await.unwrap();
    assert_eq!(
        text(&client, Locator::Id("notice")).await,
        format!("requeued {dead}")
    );
    // Purging asks first, on a page of its own; back changes nothing, yes purges.
    click(&client, Locator::Id("purge")).await;
    click(&client, Locator::Id("back")).await;
    text(&client, Locator::Id("jobs")).await;
    click(&client, Locator::Id("purge")).await;
    click(&client, Locator::Css("button[value=purge-dead]")).await;
    assert_eq!(text(&client, Locator::Id("notice")).await, "purged 0 dead jobs");

    // Redis says so too.
    let job = queue
        .operator()
        .job(&JobId::new(dead.as_str()).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(job.state, RawJobState::Delayed { .. }),
        "{:?}",
        job.state
    );
    assert_eq!(queue.operator().stats().await.unwrap().dead, 0);

    client
        .goto(&format!("{url}/queues/orders/jobs/{dead}"))
        .await
        .unwrap();
    assert!(
        text(&client, Locator::Id("envelope")).await.contains("\"order\""),
        "the decoded payload"
    );
    screenshot(&client, "job").await;
    client.goto(&format!("{url}/locks")).await.unwrap();
    assert!(text(&client, Locator::Id("locks")).await.contains("order:{42}"));
    screenshot(&client, "locks").await;
    assert_eq!(
        queue.operator().list(JobSet::Done, 10).await.unwrap().len(),
        0,
        "no retention: none kept"
    );

    client.close().await.unwrap();
    let _ = driver.kill();
    let _ = driver.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_need_the_token_and_the_csrf_field_and_read_only_has_none() {
    let server = RedisServer::start();
    let (store, queue, dead) = deployment(&server).await;
    let http = http_client();
    let requeue = |url: &str| format!("{url}/queues/orders/requeue");

    let url = serve(Dashboard::new(
        store.clone(),
        DashboardOptions::default().token(Some(TOKEN.into())),
    ))
    .await;
    // With a token, a stranger reads nothing: every page answers 401 and the sign-in form.
    for path in [
        "/".to_string(),
        "/locks".to_string(),
        "/queues/orders".to_string(),
        "/queues/orders?set=dead".to_string(),
        format!("/queues/orders/jobs/{dead}"),
        "/queues/orders/confirm/purge-dead".to_string(),
        "/queues/nothing-here".to_string(),
    ] {
        let stranger = http.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(stranger.status(), 401, "{path}");
        let page = stranger.text().await.unwrap();
        assert!(
            page.contains("id=token")
                && !page.contains("amount_cents")
                && !page.contains("orders")
                && !page.contains(&dead),
            "{path}: {page}"
        );
    }
    let wrong_bearer = http
        .get(format!("{url}/queues/orders"))
        .bearer_auth("guess")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_bearer.status(), 401);
    let page = http
        .get(format!("{url}/queues/orders?set=dead"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(&dead) && !page.contains("<button"),
        "a script with the token reads, and gets no forms"
    );
    let waiting = http
        .get(format!("{url}/queues/orders"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(
        waiting.headers()["x-frame-options"],
        "DENY",
        "never framed by another site"
    );
    assert!(
        waiting.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
    let waiting = waiting.text().await.unwrap();
    assert!(
        waiting.contains("&lt;script&gt;") && !waiting.contains("<script>alert"),
        "payloads are escaped"
    );
    let forged = http
        .post(requeue(&url))
        .form(&[("id", dead.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403, "no session, no CSRF field");
    let signed_in = sign_in(&http, &url, TOKEN).await;
    assert_eq!(signed_in.status(), 303);
    let set_cookie = signed_in.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set_cookie.contains("HttpOnly")
            && set_cookie.contains("SameSite=Strict")
            && !set_cookie.contains("Secure"),
        "{set_cookie}"
    );
    let cookie = session_cookie(&signed_in);
    let page = http
        .get(format!("{url}/queues/orders?set=dead"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("<button"), "a signed-in browser gets the actions");
    let without_csrf = http
        .post(requeue(&url))
        .header("cookie", &cookie)
        .form(&[("id", dead.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(
        without_csrf.status(),
        403,
        "a cross-site form has the cookie but not the field"
    );
    let wrong = sign_in(&http, &url, "guess").await;
    assert_eq!(wrong.status(), 403);
    assert_eq!(queue.operator().stats().await.unwrap().dead, 1, "nothing moved");
    let bearer = http
        .post(requeue(&url))
        .bearer_auth(TOKEN)
        .form(&[("id", dead.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 303, "a script with the token");
    let unconfirmed = http
        .post(format!("{url}/queues/orders/purge-dead"))
        .bearer_auth(TOKEN)
        .form(&[("csrf", "")])
        .send()
        .await
        .unwrap();
    assert_eq!(unconfirmed.status(), 400, "a purge needs its confirmation");
    assert_eq!(queue.operator().stats().await.unwrap().dead, 0);

    let read_only = serve(Dashboard::new(store, DashboardOptions::default())).await;
    let page = body(&http, format!("{read_only}/queues/orders")).await;
    assert!(page.contains("read-only") && !page.contains("<button"), "{page}");
    let refused = http
        .post(format!("{read_only}/queues/orders/pause"))
        .bearer_auth("")
        .form(&[("csrf", "")])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert!(!queue.operator().stats().await.unwrap().paused);
    let unknown = http
        .get(format!("{read_only}/queues/ordres"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404, "a mistyped queue is not an empty page");

    // A broken activity hash (another client's) costs the plots, not the page.
    let activity = format!("{}:q:{{orders}}:activity", queue.store().prefix().as_str());
    let _: () = server.cmd(redis::cmd("DEL").arg(&activity)).await;
    let _: () = server
        .cmd(redis::cmd("SET").arg(&activity).arg("not a hash"))
        .await;
    let queues = http.get(format!("{read_only}/")).send().await.unwrap();
    assert_eq!(queues.status(), 200);
    assert!(queues.text().await.unwrap().contains("activity unreadable"));

    // A sharded queue is read over its registered shards.
    let refunds = DelayQueue::<Value, _>::new(queue.store().clone(), "refunds")
        .unwrap()
        .shards(3)
        .unwrap();
    let items: Vec<Value> = (0..6).map(|n| json!({ "refund": n })).collect();
    refunds.push_many(&items, Duration::from_secs(60)).await.unwrap();
    let page = body(&http, format!("{read_only}/queues/refunds")).await;
    assert!(page.contains("waiting (6)"), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_serves_the_in_memory_store_too() {
    let store = redefer::MemoryStore::new();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    queue
        .push(&json!({ "order": 1 }), Duration::from_secs(60))
        .await
        .unwrap();
    store
        .try_acquire(
            &LockKey::new("order:{9}").unwrap(),
            LockToken::random(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let rate = redefer::throttle::Rate::new(1, Duration::from_secs(60)).unwrap();
    redefer::throttle::ThrottleStore::admit(&store, &LockKey::new("customer:5").unwrap(), rate, None)
        .await
        .unwrap();
    let closed = LockKey::new("api.example").unwrap();
    redefer::throttle::ThrottleStore::close_for(&store, &closed, rate, Duration::from_secs(600))
        .await
        .unwrap();
    let url = serve(Dashboard::new(store, DashboardOptions::default())).await;
    let http = reqwest::Client::new();
    let page = body(&http, format!("{url}/queues/orders")).await;
    assert!(
        page.contains("waiting (1)") && page.contains("{&quot;order&quot;:1}"),
        "{page}"
    );
    let locks = body(&http, format!("{url}/locks")).await;
    assert!(locks.contains("order:{9}"), "{locks}");
    assert!(
        locks.contains("customer:5") && locks.contains("throttle"),
        "{locks}"
    );
    assert!(
        locks.contains("in 59") || locks.contains("in 60"),
        "the next slot, a minute ahead: {locks}"
    );
    // A key its handler closed says so, with how long it stays closed.
    assert!(
        locks.contains("api.example")
            && (locks.contains("closed for 599") || locks.contains("closed for 600")),
        "{locks}"
    );
}

/// A key with a value no redefer process writes (here its fencing counter) is listed with
/// what could be read and what could not, beside the others: it failed the whole page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_locks_page_lists_a_key_it_cannot_read_in_full() {
    let server = RedisServer::start();
    let store = server.store().await;
    let prefix = store.prefix().as_str().to_string();
    for tag in ["order:1", "order:2"] {
        store
            .try_acquire(
                &LockKey::new(tag).unwrap(),
                LockToken::random(),
                Duration::from_secs(60),
            )
            .await
            .unwrap();
    }
    let counter = format!("{prefix}:fence:{{order:2}}");
    let _: () = server.cmd(::redis::cmd("SET").arg(&counter).arg("zzz")).await;
    let url = serve(Dashboard::new(store, DashboardOptions::default())).await;
    let locks = body(&reqwest::Client::new(), format!("{url}/locks")).await;
    assert!(locks.contains("order:1") && locks.contains("order:2"), "{locks}");
    assert!(
        locks.contains("unreadable: its fencing counter holds &quot;zzz&quot;"),
        "{locks}"
    );
}

/// Holds the keys `order:<n>` for each `n` of `orders`, for a minute.
async fn hold_orders(store: &redefer::MemoryStore, orders: std::ops::Range<u32>) {
    for n in orders {
        let key = LockKey::new(format!("order:{n}")).unwrap();
        store
            .try_acquire(&key, LockToken::random(), Duration::from_secs(60))
            .await
            .unwrap();
    }
}

/// The locks page lists the first 1,000 keys it finds and says when there may be more: it
/// showed a full page as if it were all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_locks_page_says_when_it_may_have_left_keys_out() {
    let store = redefer::MemoryStore::new();
    let url = serve(Dashboard::new(store.clone(), DashboardOptions::default())).await;
    let http = reqwest::Client::new();
    hold_orders(&store, 0..3).await;
    let few = body(&http, format!("{url}/locks")).await;
    assert!(
        few.contains("order:2") && !few.contains("there may be more"),
        "{few}"
    );
    hold_orders(&store, 3..1_001).await;
    let many = body(&http, format!("{url}/locks")).await;
    assert!(
        many.contains("The first 1000 keys found: there may be more"),
        "{many}"
    );
    // The JSON API lists as many (its page size of jobs, 50, cut it before), and says in a
    // header when its answer may have left keys out.
    let api = |query: &'static str| {
        let request = http.get(format!("{url}/api/locks{query}")).send();
        async move {
            let response = request.await.unwrap();
            let truncated = response.headers().get("redefer-truncated").is_some();
            (
                response.status().as_u16(),
                truncated,
                response.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let (status, truncated, locks) = api("").await;
    assert_eq!(
        (status, truncated, locks.as_array().map(Vec::len)),
        (200, true, Some(1_000))
    );
    let (status, truncated, locks) = api("?limit=60").await;
    assert_eq!(
        (status, truncated, locks.as_array().map(Vec::len)),
        (200, true, Some(60))
    );
    for refused in ["?limit=0", "?limit=1001", "?limit=many"] {
        let (status, _, problem) = api(refused).await;
        assert_eq!(status, 400, "{refused}: {problem}");
        assert!(problem["error"].as_str().unwrap().contains("limit"), "{problem}");
    }
}

/// A registry member no queue can have (empty, or longer than a queue name may be: another
/// tool's, or damaged) is listed as unreadable beside the queues, on the page and in the JSON
/// API: it failed both whole (a 400 naming the bad name, no queue listed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_member_that_is_no_queue_name_is_listed_beside_the_queues() {
    let server = RedisServer::start();
    let (store, _queue, _) = deployment(&server).await;
    let registry = format!("{}:queues", store.prefix().as_str());
    for hostile in [String::new(), "x".repeat(300)] {
        let _: ::redis::Value = server.cmd(::redis::cmd("SADD").arg(&registry).arg(hostile)).await;
    }
    let url = serve(Dashboard::new(store, DashboardOptions::default())).await;
    let http = reqwest::Client::new();
    let page = http.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(page.contains("/queues/orders"), "{page}");
    assert_eq!(
        page.matches("not a queue name redefer writes").count(),
        2,
        "{page}"
    );
    let api = http.get(format!("{url}/api/queues")).send().await.unwrap();
    assert_eq!(api.status(), 200);
    let queues: serde_json::Value = api.json().await.unwrap();
    let orders = queues
        .as_array()
        .unwrap()
        .iter()
        .find(|queue| queue["name"] == "orders");
    assert!(
        orders.is_some_and(|orders| orders["stats"]["waiting"].as_u64() > Some(0)),
        "{queues}"
    );
    let unreadable: Vec<_> = queues
        .as_array()
        .unwrap()
        .iter()
        .filter(|queue| queue["unreadable"].is_string())
        .collect();
    assert_eq!(unreadable.len(), 2, "{queues}");
}

/// A listing of fewer keys than its limit is whole: no `Redefer-Truncated` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_locks_api_lists_every_key_below_its_limit_without_the_cut_header() {
    let store = redefer::MemoryStore::new();
    let url = serve(Dashboard::new(store.clone(), DashboardOptions::default())).await;
    hold_orders(&store, 0..60).await;
    let response = reqwest::get(format!("{url}/api/locks")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("redefer-truncated").is_none());
    let locks: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        locks.as_array().map(Vec::len),
        Some(60),
        "the 50 of a page of jobs before"
    );
}

/// The waiting jobs per group: the JSON API and the queue's page list them, the largest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_jobs_per_group_are_shown_largest_first() {
    let server = RedisServer::start();
    let (store, queue, _) = deployment(&server).await;
    for (tenant, count) in [("tenant-<b>", 1), ("tenant-a", 3)] {
        let items: Vec<Value> = (0..count).map(|n| json!({ "n": n })).collect();
        queue
            .in_group(JobGroup::new(tenant).unwrap())
            .push_many(&items, Duration::ZERO)
            .await
            .unwrap();
    }
    let url = serve(Dashboard::new(store, DashboardOptions::default())).await;
    let http = http_client();
    let groups: Value = http
        .get(format!("{url}/api/queues/orders/groups"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        groups,
        json!({ "groups": 2, "largest": [
            { "group": "tenant-a", "waiting": 3 },
            { "group": "tenant-<b>", "waiting": 1 },
        ] })
    );
    let page = http
        .get(format!("{url}/queues/orders"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("<table id=groups>"), "{page}");
    assert!(page.contains("<td>tenant-&lt;b&gt;</td>"), "escaped: {page}");
}

/// The JSON API reads what the pages show and runs the same actions, with the bearer token
/// only: without it a read is 401; a signed-in browser's cookie cannot act (no CSRF field
/// there); an unknown job is 404, in the API and on its page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_api_reads_and_acts_with_the_bearer_token() {
    let server = RedisServer::start();
    let (store, queue, dead) = deployment(&server).await;
    let url = serve(Dashboard::new(
        store,
        DashboardOptions::default().token(Some(TOKEN.into())),
    ))
    .await;
    let http = http_client();
    let get = |path: &str, bearer: bool| {
        let request = http.get(format!("{url}{path}"));
        if bearer {
            request.bearer_auth(TOKEN)
        } else {
            request
        }
        .send()
    };
    let json_of = |response: reqwest::Response| async move {
        let status = response.status().as_u16();
        (status, response.json::<Value>().await.unwrap())
    };

    let (status, refused) = json_of(get("/api/queues", false).await.unwrap()).await;
    assert_eq!(status, 401, "{refused}");
    assert!(refused["error"].is_string());
    let (status, queues) = json_of(get("/api/queues", true).await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(queues[0]["name"], "orders");
    assert_eq!(queues[0]["stats"]["dead"], 1);
    let (_, stats) = json_of(get("/api/queues/orders", true).await.unwrap()).await;
    assert_eq!(stats["dead"], 1);
    let (_, jobs) = json_of(get("/api/queues/orders/jobs?set=dead", true).await.unwrap()).await;
    assert_eq!(jobs[0]["id"], dead.as_str(), "{jobs}");
    let (status, job) = json_of(
        get(&format!("/api/queues/orders/jobs/{dead}"), true)
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, job["status"]["status"].clone()),
        (200, json!("dead")),
        "{job}"
    );
    let (status, _) = json_of(get("/api/queues/orders/jobs/no-such-job", true).await.unwrap()).await;
    assert_eq!(status, 404);
    let page = get("/queues/orders/jobs/no-such-job", true).await.unwrap();
    assert_eq!(page.status(), 404, "the page of an unknown job too");
    let (status, locks) = json_of(get("/api/locks", true).await.unwrap()).await;
    assert_eq!(status, 200);
    assert!(locks.to_string().contains("order:{42}"), "{locks}");
    // Durations have one shape, the command's: whole milliseconds in `..._ms`.
    assert!(locks[0]["remaining_ms"].as_u64().is_some(), "{locks}");
    assert!(locks[0].get("remaining").is_none(), "{locks}");
    // A wrong token is told so, not that one is needed.
    let wrong = http
        .get(format!("{url}/api/queues"))
        .bearer_auth("guess")
        .send()
        .await
        .unwrap();
    let (status, refused) = json_of(wrong).await;
    assert_eq!(status, 401);
    assert!(refused["error"].as_str().unwrap().contains("wrong"), "{refused}");

    // Acting: a signed-in browser's cookie alone is refused; the bearer token acts.
    let cookie = session_cookie(&sign_in(&http, &url, TOKEN).await);
    let by_cookie = http
        .post(format!("{url}/api/queues/orders/requeue"))
        .header("cookie", cookie)
        .json(&json!({ "id": dead.as_str() }))
        .send()
        .await
        .unwrap();
    assert_eq!(by_cookie.status(), 403);
    let (status, done) = json_of(
        http.post(format!("{url}/api/queues/orders/requeue"))
            .bearer_auth(TOKEN)
            .json(&json!({ "id": dead.as_str() }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, done["notice"].clone()),
        (200, json!(format!("requeued {dead}")))
    );
    let job = queue
        .operator()
        .job(&JobId::new(dead.as_str()).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(job.state, RawJobState::Delayed { .. }),
        "{:?}",
        job.state
    );
    // Actions that find nothing to do say why, with the status a script checks: 404 for a job
    // the queue does not have, 409 for one elsewhere (the requeued job now waits).
    let act = |action: &str, body: Value| {
        http.post(format!("{url}/api/queues/orders/{action}"))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
    };
    for action in ["requeue", "cancel", "run-now"] {
        let (status, answer) = json_of(act(action, json!({ "id": "nope" })).await.unwrap()).await;
        assert_eq!(status, 404, "{action}: {answer}");
        assert!(
            answer["error"].as_str().unwrap().contains("not in the queue"),
            "{answer}"
        );
    }
    let (status, answer) = json_of(act("requeue", json!({ "id": dead.as_str() })).await.unwrap()).await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("is waiting"),
        "{answer}"
    );
    let (status, answer) = json_of(act("requeue", json!([dead.as_str()])).await.unwrap()).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        !answer["error"].as_str().unwrap().contains("ActionBody"),
        "{answer}"
    );
    let (status, answer) = json_of(act("purge-dead", json!({})).await.unwrap()).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains(r#""confirm": "yes""#),
        "{answer}"
    );

    let (status, paused) = json_of(
        http.post(format!("{url}/api/queues/orders/pause"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, paused["notice"].clone()), (200, json!("paused")));
}

/// Every link of a dashboard nested under `/admin` stays in the mount and answers, whether the
/// application told it `mounted_at("/admin")` or not (it then finds its mount itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_link_resolves_under_a_mount_with_or_without_mounted_at() {
    for told in [true, false] {
        let store = redefer::MemoryStore::new();
        let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
        queue
            .push(&json!({ "order": 1 }), Duration::from_secs(60))
            .await
            .unwrap();
        store
            .try_acquire(
                &LockKey::new("order:1").unwrap(),
                LockToken::random(),
                Duration::from_secs(60),
            )
            .await
            .unwrap();
        let options = if told {
            DashboardOptions::default().mounted_at("/admin")
        } else {
            DashboardOptions::default()
        };
        let app = axum::Router::new().merge(Dashboard::new(store, options).nested_at("/admin"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
            )
            .await
        });
        let http = reqwest::Client::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut next = vec!["/admin".to_string()];
        while let Some(path) = next.pop() {
            if !seen.insert(path.clone()) {
                continue;
            }
            let response = http.get(format!("{origin}{path}")).send().await.unwrap();
            assert_eq!(response.status(), 200, "{path} (mounted_at told: {told})");
            let page = response.text().await.unwrap();
            for link in page
                .split("href='")
                .skip(1)
                .filter_map(|rest| rest.split('\'').next())
            {
                let link = link.split('?').next().unwrap_or(link).replace("&amp;", "&");
                assert!(
                    link.starts_with("/admin"),
                    "{link} leaves the mount, on {path} (told: {told})"
                );
                next.push(link);
            }
        }
        assert!(seen.len() >= 4, "{seen:?}");
        // The mount with a trailing slash leads to the dashboard too.
        let slash = http.get(format!("{origin}/admin/")).send().await.unwrap();
        assert_eq!(slash.status(), 200, "/admin/ (told: {told})");
        assert!(slash.url().path() == "/admin", "{}", slash.url());
    }
}

/// The queue page counts what the policies for waiting did: requests that joined a waiting job
/// (coalesced) and waiting jobs dropped from a full line for newer ones (superseded), as the
/// store's scripts counted them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_page_counts_what_was_coalesced_and_superseded() {
    let server = RedisServer::start();
    let store = server.store().await;
    let queue = DelayQueue::<Value, _>::new(store.clone(), "syncs").unwrap();
    let due = redefer::queue::Due::In(Duration::from_secs(60));
    let key = LockKey::new("account:1").unwrap();
    for n in 0..4 {
        queue
            .push_pending(&key, &json!({ "n": n }), due, redefer::queue::Keep::Latest)
            .await
            .unwrap();
    }
    let dropped = queue
        .push(&json!({ "n": "old" }), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(
        redefer::queue::QueueCore::bury_waiting(
            &store,
            &redefer::queue::QueueName::new("syncs").unwrap(),
            &dropped.id,
            redefer::guard::SUPERSEDED_BY_NEWER,
            redefer::queue::Counters::On,
        )
        .await
        .unwrap()
    );
    let url = serve(Dashboard::new(store, DashboardOptions::default())).await;
    let page = body(&reqwest::Client::new(), format!("{url}/queues/syncs")).await;
    assert!(
        page.contains("<span id=coalesced>3</span>") && page.contains("<span id=superseded>1</span>"),
        "{page}"
    );
    let queues = body(&reqwest::Client::new(), format!("{url}/")).await;
    assert!(queues.contains("coalesced + superseded"), "{queues}");
}

/// A queue whose scheduler counts no activity gets a note instead of three empty plots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_whose_counters_are_off_says_so_instead_of_plotting() {
    use redefer::queue::{Counters, QueueName};

    let store = redefer::MemoryStore::new();
    let counted = QueueName::new("counted").unwrap();
    let quiet = QueueName::new("quiet").unwrap();
    store.register(&counted, 1, Some(Counters::On)).await.unwrap();
    store.register(&quiet, 1, Some(Counters::Off)).await.unwrap();
    let url = serve(Dashboard::new(store, DashboardOptions::default())).await;
    let page = body(&http_client(), format!("{url}/")).await;
    let row = |name: &str| {
        let start = page.find(&format!(">{name}</a>")).unwrap();
        page[start..].split("</tr>").next().unwrap().to_string()
    };
    assert!(row("counted").contains("<svg"), "{page}");
    let quiet = row("quiet");
    assert!(
        quiet.contains("activity counters are off") && !quiet.contains("<svg"),
        "{quiet}"
    );
}

/// The CSRF field a page's forms carry.
fn csrf_field(page: &str) -> String {
    let at = page
        .find("name=csrf value='")
        .expect("a form with the CSRF field")
        + "name=csrf value='".len();
    page[at..].split('\'').next().unwrap().to_string()
}

/// Sends 1,000 guesses of the token (`guess(n)`), which the dashboard refuses with `refused`
/// until the address's limit is spent, then with 429 and a `Retry-After`; checks that only the
/// limit's worth were compared: 10 at once, then one every 6 s.
async fn guess_1000_times<F, Fut>(refused: &[u16], mut guess: F)
where
    F: FnMut(u32) -> Fut,
    Fut: std::future::Future<Output = reqwest::Response>,
{
    let started = std::time::Instant::now();
    let (mut checked, mut limited) = (0u32, 0u32);
    for attempt in 0..1_000 {
        let response = guess(attempt).await;
        match response.status().as_u16() {
            429 => {
                limited += 1;
                let retry_after: u64 = response.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!((1..=6).contains(&retry_after), "Retry-After: {retry_after}");
            }
            status if refused.contains(&status) => checked += 1,
            other => panic!("attempt {attempt}: {other}"),
        }
    }
    let refilled = u32::try_from(started.elapsed().as_secs() / 6).unwrap() + 1;
    assert!(
        (10..=10 + refilled).contains(&checked),
        "{checked} of 1,000 guesses were checked"
    );
    assert_eq!(checked + limited, 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_ins_are_limited_per_client_address() {
    let url = serve(Dashboard::new(
        redefer::MemoryStore::new(),
        DashboardOptions::default().token(Some(TOKEN.into())),
    ))
    .await;
    let http = http_client();
    guess_1000_times(&[403], |attempt| {
        let (http, url) = (&http, &url);
        async move { sign_in(http, url, &format!("guess-{attempt}")).await }
    })
    .await;
    // The right token waits its turn too: guessing cannot be sped up by knowing when to stop.
    assert_eq!(sign_in(&http, &url, TOKEN).await.status(), 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_guesses_are_limited_like_sign_ins() {
    let url = serve(Dashboard::new(
        redefer::MemoryStore::new(),
        DashboardOptions::default().token(Some(TOKEN.into())),
    ))
    .await;
    let http = http_client();
    guess_1000_times(&[401, 403], |attempt| {
        // Pages and actions alike.
        let request = if attempt % 2 == 0 {
            http.get(format!("{url}/queues/orders"))
        } else {
            http.post(format!("{url}/queues/orders/pause"))
                .form(&[("csrf", "")])
        };
        async move {
            request
                .bearer_auth(format!("guess-{attempt}"))
                .send()
                .await
                .unwrap()
        }
    })
    .await;
    let right = http
        .get(format!("{url}/"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 429, "not even compared while the address waits");
    assert_eq!(
        sign_in(&http, &url, TOKEN).await.status(),
        429,
        "one limit for both"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_end_when_signed_out_or_expired_and_are_secure_over_https() {
    let store = redefer::MemoryStore::new();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    queue
        .push(&json!({ "order": 1 }), Duration::from_secs(60))
        .await
        .unwrap();
    let ttl = Duration::from_secs(2);
    let url = serve(Dashboard::new(
        store,
        DashboardOptions::default()
            .token(Some(TOKEN.into()))
            .served_over_https(true)
            .session_ttl(ttl),
    ))
    .await;
    let http = http_client();
    let read = |cookie: String| {
        let http = http.clone();
        let url = url.clone();
        async move {
            let response = http
                .get(format!("{url}/queues/orders"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let first = sign_in(&http, &url, TOKEN).await;
    let set_cookie = first.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set_cookie.contains("; Secure"), "{set_cookie}");
    let first = session_cookie(&first);
    let second = session_cookie(&sign_in(&http, &url, TOKEN).await);
    assert_ne!(first, second, "a session per sign-in");
    let (status, page) = read(first.clone()).await;
    assert_eq!(status, 200);
    // Signing out takes the form's CSRF field, and ends that session only.
    let no_field = http
        .post(format!("{url}/logout"))
        .header("cookie", &first)
        .form(&[("csrf", "forged")])
        .send()
        .await
        .unwrap();
    assert_eq!(no_field.status(), 403);
    let signed_out = http
        .post(format!("{url}/logout"))
        .header("cookie", &first)
        .form(&[("csrf", csrf_field(&page))])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), 303);
    assert_eq!(read(first).await.0, 401, "signed out");
    assert_eq!(read(second.clone()).await.0, 200, "the other session goes on");
    tokio::time::sleep(ttl).await;
    assert_eq!(read(second).await.0, 401, "expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_read_lets_strangers_read_but_not_act() {
    let store = redefer::MemoryStore::new();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    queue
        .push(&json!({ "order": 1 }), Duration::from_secs(60))
        .await
        .unwrap();
    let url = serve(Dashboard::new(
        store,
        DashboardOptions::default()
            .token(Some(TOKEN.into()))
            .public_read(true),
    ))
    .await;
    let http = http_client();
    let page = http.get(format!("{url}/queues/orders")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(
        page.contains("order") && !page.contains("<button") && page.contains("id=login"),
        "{page}"
    );
    let refused = http
        .post(format!("{url}/queues/orders/pause"))
        .form(&[("csrf", "")])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert!(!queue.operator().stats().await.unwrap().paused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invisible_and_reordering_characters_are_shown_escaped() {
    let store = redefer::MemoryStore::new();
    let queue = DelayQueue::<Value, _>::new(store.clone(), "orders").unwrap();
    queue
        .push(&json!({ "file": "invoice\u{202E}fdp.exe" }), Duration::ZERO)
        .await
        .unwrap();
    let claimed = queue.claim(1, Duration::from_secs(60)).await.unwrap().jobs;
    let id = claimed[0].envelope.id.to_string();
    queue
        .bury(&claimed[0].lease, "declined\u{2066} by\u{200B} bank\u{2069}")
        .await
        .unwrap();
    store
        .try_acquire(
            &LockKey::new("order:\u{202E}42").unwrap(),
            LockToken::random(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let url = serve(Dashboard::new(store, DashboardOptions::default())).await;
    let http = http_client();
    for (path, shown) in [
        (
            "/queues/orders?set=dead".to_string(),
            vec![
                "invoice\\u{202E}fdp.exe",
                "declined\\u{2066} by\\u{200B} bank\\u{2069}",
            ],
        ),
        (
            format!("/queues/orders/jobs/{id}"),
            vec!["invoice\\u{202E}fdp.exe", "declined\\u{2066}"],
        ),
        ("/locks".to_string(), vec!["order:\\u{202E}42"]),
    ] {
        let page = body(&http, format!("{url}{path}")).await;
        for text in shown {
            assert!(page.contains(text), "{path}: {text} in {page}");
        }
        assert!(
            !page.contains(['\u{202E}', '\u{2066}', '\u{2069}', '\u{200B}']),
            "{path}: a raw control character in {page}"
        );
    }
}
