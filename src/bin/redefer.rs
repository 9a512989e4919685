//! `redefer`: inspect and operate a redefer deployment in Redis.
//!
//! ```text
//! redefer --config app.toml stats            # prefix, queue and shards from the app's Config
//! redefer --queue orders list dead --limit 50
//! redefer --queue orders show 3f2c...
//! redefer --queue orders requeue 3f2c...     # or: requeue --all
//! redefer --queue orders cancel 3f2c...
//! redefer --queue orders run-now 3f2c...
//! redefer --queue orders pause               # and: resume
//! redefer --queue orders purge dead --yes
//! redefer queues
//! redefer locks                              # with --cluster: every master
//! redefer footprint                          # the keys under the prefix, by kind
//! redefer dashboard --bind 127.0.0.1:7070
//! ```
//!
//! Human tables by default, `--json` for scripts (errors too). Payloads are shown as JSON; a
//! job whose bytes do not decode is shown as such. The sets are named as in the README:
//! waiting, in_flight, dead, done.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

use clap::{Parser, Subcommand};
use redefer::dashboard::{Dashboard, DashboardOptions};
use redefer::queue::{Cancelled, DelayQueue, JobId, JobSet, ListCursor, ListedEntry, attempts_in};
use redefer::queue::{QueueStats, QueueStore, RawJobState};
use redefer::redis::aio::ConnectionLike;
use redefer::store::ListLocks;
use redefer::store::footprint::{Footprint, ScanFootprint};
use redefer::{Config, RedisStore};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(
    name = "redefer",
    version,
    about = "Inspect and operate redefer's locks and delay queues in Redis"
)]
// The options before the command may come after it too (`global`): `redefer queues --url URL`.
struct Cli {
    /// The Redis server (with --cluster: any node of the cluster).
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    url: String,
    /// Connect to a Redis Cluster.
    #[arg(long, global = true)]
    cluster: bool,
    /// The application's configuration (TOML, or JSON by a .json name): the prefix, queue and
    /// shards to use, unless given below.
    #[arg(long, global = true, env = "REDEFER_CONFIG")]
    config: Option<PathBuf>,
    /// The prefix of redefer's keys [default: the config's, or redefer].
    #[arg(long, global = true)]
    prefix: Option<String>,
    /// The queue [default: the config's, or deferred].
    #[arg(long, global = true)]
    queue: Option<String>,
    /// How many shards the queue has [default: the config's, or 1].
    #[arg(long, global = true)]
    shards: Option<usize>,
    /// Print JSON instead of tables (errors too, on stderr).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Count the queue's jobs: waiting, due now, in flight, dead, done (kept); paused or not.
    Stats,
    /// List one of the queue's sets (waiting, in_flight, dead, done), oldest first.
    List {
        set: JobSet,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Start after this entry: `<time>/<id>`, as the last row of the previous page.
        #[arg(long)]
        after: Option<String>,
    },
    /// Show one job in full.
    Show { id: String },
    /// Move dead jobs back to the queue, due now.
    Requeue {
        /// The jobs to move.
        #[arg(required_unless_present = "all")]
        ids: Vec<String>,
        /// Move every dead job.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
    },
    /// Delete a waiting or dead job.
    Cancel { id: String },
    /// Make a waiting job due now.
    RunNow { id: String },
    /// Pause the queue: its claims hand out nothing, in every process, until `resume`.
    Pause,
    /// Resume a paused queue.
    Resume,
    /// Delete every job of one set, for good.
    Purge {
        set: JobSet,
        /// Confirms the deletion.
        #[arg(long)]
        yes: bool,
    },
    /// List the queues under the prefix (each registers itself when it first pushes, or
    /// when a scheduler starts on it).
    Queues,
    /// List held locks and semaphores with their remaining TTL, fencing token, holders / limit
    /// and waiters in line, and throttled keys with their next free slot and booked slots.
    Locks {
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Count the keys under the prefix by kind, and those without an expiry: what Redis keeps
    /// for redefer (a bounded SCAN, safe on a large production Redis; with --cluster: every
    /// master).
    Footprint {
        /// Stop after looking at this many keys.
        #[arg(long, default_value_t = 1_000_000)]
        max_keys: u64,
    },
    /// Serve the web dashboard: queues, jobs, locks, and actions.
    Dashboard {
        /// Where to listen. Loopback by default; any other address needs a token.
        #[arg(long, default_value = "127.0.0.1:7070")]
        bind: std::net::SocketAddr,
        /// The token that signs in: every page and action (requeue, cancel, run now, purge,
        /// pause, resume) needs it. Without one, the dashboard is read-only and readable by
        /// anyone who reaches it, so it serves on loopback only.
        #[arg(long, env = "REDEFER_DASHBOARD_TOKEN")]
        token: Option<String>,
        /// Turn the actions off, token or not (the token still guards reading).
        #[arg(long)]
        read_only: bool,
        /// Let anyone read the pages; the actions still need the token.
        #[arg(long)]
        public_read: bool,
        /// The dashboard is reached over HTTPS (a proxy in front): the session cookie is `Secure`.
        #[arg(long)]
        https: bool,
        /// How long a sign-in lasts.
        #[arg(long, default_value = "12h", value_parser = humantime::parse_duration)]
        session_ttl: std::time::Duration,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // With --json, a script reads the error as it reads the output.
            if json {
                eprintln!("{}", json!({ "error": error.to_string() }));
            } else {
                eprintln!("redefer: {error}");
            }
            ExitCode::FAILURE
        }
    }
}

type Failure = Box<dyn std::error::Error>;

/// What the command works on: the flags, over the config file, over the defaults.
struct Target {
    prefix: String,
    queue: String,
    /// The shard count given (flag, or config file), and by what; `None`: as registered.
    shards: Option<(usize, &'static str)>,
}

impl Target {
    fn of(cli: &Cli) -> Result<Target, Failure> {
        let config = cli.config.as_deref().map(read_config).transpose()?;
        let queue = cli.queue.clone().unwrap_or_else(|| {
            config
                .as_ref()
                .map_or_else(|| Config::default().queue.name, |c| c.queue.name.clone())
        });
        // The config file's count for the queue: its `[queues.<name>]`, or `[queue]` by name.
        let configured = config
            .as_ref()
            .and_then(|config| match config.queues.get(&queue) {
                Some(named) => Some(named.shards),
                None => (config.queue.name == queue).then_some(config.queue.shards),
            });
        let shards = match (cli.shards, configured) {
            (Some(shards), _) => Some((shards, "--shards")),
            (None, Some(shards)) => Some((shards, "the config file")),
            (None, None) => None,
        };
        Ok(Target {
            prefix: cli
                .prefix
                .clone()
                .unwrap_or_else(|| config.map_or_else(|| Config::default().prefix, |c| c.prefix)),
            queue,
            shards,
        })
    }
}

/// The application's [`Config`], validated: TOML, or JSON for a `.json` file.
fn read_config(path: &std::path::Path) -> Result<Config, Failure> {
    let text =
        std::fs::read_to_string(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let parsed = if path.extension().is_some_and(|extension| extension == "json") {
        serde_json::from_str::<Config>(&text)
            .map_err(|error| redefer::ConfigError::Parse(error.to_string()))
            .and_then(|config| config.validate().map(|()| config))
    } else {
        Config::from_toml_str(&text)
    };
    parsed.map_err(|error| format!("{}: {error}", path.display()).into())
}

/// The queue the command works on, with its shards: as given, else as registered. Fails for a
/// queue the registry does not know and that holds nothing (a mistyped `--queue` or
/// `--prefix` is an error, not a row of zeros; a queue with jobs counts as known: it may
/// predate the registry), and for a shard count that is not the one its application registered
/// (the command would read other keys).
async fn known_queue<St: QueueStore>(store: &St, target: &Target) -> Result<DelayQueue<Value, St>, Failure> {
    let known = store.registered().await?;
    let registered = known.iter().find(|known| known.name == target.queue);
    let shards = match (target.shards, registered) {
        (Some((given, source)), Some(registered)) if given != registered.shards => {
            return Err(format!(
                "queue {:?} has {} shards, as its application registered it; {source} says {given}",
                target.queue, registered.shards
            )
            .into());
        }
        (Some((given, _)), _) => given,
        (None, Some(registered)) => registered.shards,
        (None, None) => 1,
    };
    let queue = DelayQueue::<Value, _>::new(store.clone(), target.queue.as_str())?.shards(shards)?;
    if registered.is_some() || queue.stats().await? != QueueStats::default() {
        return Ok(queue);
    }
    let known = if known.is_empty() {
        "none".to_string()
    } else {
        known
            .iter()
            .map(|known| known.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(format!(
        "no queue {:?} under prefix {:?} (known: {known}); check --queue and --prefix",
        target.queue, target.prefix
    )
    .into())
}

/// `url` with its password, if any, replaced by `***`: fit to print.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    match rest[..at].split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => url.to_string(),
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let target = Target::of(&cli)?;
    if let Command::Dashboard { bind, token, .. } = &cli.command {
        let has_token = token.as_deref().is_some_and(|token| !token.is_empty());
        if !bind.ip().is_loopback() && !has_token {
            return Err(format!(
                "refusing to serve the dashboard on {bind} without a token: anyone who reaches it \
                 could read every payload. Give --token (or REDEFER_DASHBOARD_TOKEN), or bind to loopback"
            )
            .into());
        }
    }
    let builder = RedisStore::builder().prefix(target.prefix.as_str())?;
    let unreachable = |error: redefer::StoreError| -> Failure {
        // An address the client cannot read: nothing was tried, the server is not the question.
        if let redefer::StoreError::Redis(refused) = &error
            && refused.kind() == redefer::redis::ErrorKind::InvalidClientConfig
        {
            return format!(
                "--url (or REDIS_URL) {} is not a Redis URL (redis://host:port, rediss:// with TLS, unix:///path): {error}",
                without_password(&cli.url)
            )
            .into();
        }
        format!(
            "cannot connect to {}: {error} (is the server running? --url or REDIS_URL says where)",
            without_password(&cli.url)
        )
        .into()
    };
    if cli.cluster {
        let store = builder
            .connect_cluster(&[cli.url.as_str()])
            .await
            .map_err(unreachable)?;
        operate(cli, target, store).await
    } else {
        let store = builder.connect(&cli.url).await.map_err(unreachable)?;
        operate(cli, target, store).await
    }
}

/// The footprint as a table (one row per kind, then the totals), or as its JSON record.
fn footprint_output(footprint: Footprint) -> Output {
    if !footprint.complete {
        eprintln!(
            "redefer: stopped after {} keys (--max-keys): the counts are of those only",
            footprint.scanned
        );
    }
    let mut rows: Vec<Value> = footprint
        .kinds
        .iter()
        .map(|(kind, found)| {
            json!({
                "kind": kind,
                "keys": found.keys,
                "never_expire": found.never_expire,
                "longest_ttl_ms": found.longest_ttl_ms,
                "lives": found.lifetime.to_string(),
            })
        })
        .collect();
    rows.push(json!({
        "kind": "(all)",
        "keys": footprint.keys(),
        "never_expire": footprint.never_expire(),
        "lives": format!("{} should expire and do not", footprint.unbounded()),
    }));
    Output::Footprint {
        rows,
        record: serde_json::to_value(&footprint).unwrap_or(Value::Null),
    }
}

async fn operate<Conn>(cli: Cli, target: Target, store: RedisStore<Conn>) -> Result<(), Failure>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    RedisStore<Conn>: ListLocks + ScanFootprint,
{
    // Every command but these works on one queue, which must be one the application has.
    let queue = match cli.command {
        Command::Queues | Command::Locks { .. } | Command::Dashboard { .. } | Command::Footprint { .. } => {
            None
        }
        _ => Some(known_queue(&store, &target).await?),
    };
    let queue = || queue.as_ref().ok_or("this command names no queue");
    let output = match cli.command {
        // None here: an empty list (not an error), and on stderr where the queues are.
        Command::Queues if store.registered().await?.is_empty() => {
            let elsewhere = store.scan_prefixes(1_000_000).await?;
            let hint = if elsewhere.is_empty() {
                "no queue has registered in this Redis".to_string()
            } else {
                let prefixes: Vec<&str> = elsewhere.iter().map(String::as_str).collect();
                format!("queues are registered under: {} (--prefix)", prefixes.join(", "))
            };
            eprintln!("redefer: no queues under prefix {:?}; {hint}", target.prefix);
            Output::Table(Vec::new())
        }
        Command::Queues => Output::Table(
            store
                .registered()
                .await?
                .into_iter()
                .map(|queue| json!({ "queue": queue.name, "shards": queue.shards, "activity": queue.counters }))
                .collect(),
        ),
        Command::Stats => {
            let queue = queue()?;
            let stats = queue.stats().await?;
            Output::Record(json!({
                "waiting": stats.waiting,
                "due": stats.due,
                "in_flight": stats.in_flight,
                "dead": stats.dead,
                "done": stats.done,
                "paused": stats.paused,
            }))
        }
        Command::List { set, limit, after } => {
            let queue = queue()?;
            let after = after.as_deref().map(parse_cursor).transpose()?;
            let entries = queue.list_after(set, after.as_ref(), limit).await?;
            Output::Table(
                entries
                    .iter()
                    .map(|entry| entry_row(set, entry, cli.json))
                    .collect(),
            )
        }
        Command::Show { id } => {
            let queue = queue()?;
            let id = JobId::new(id)?;
            let Some(info) = queue.job(&id).await? else {
                return Err(format!("no job {id} in queue {}", target.queue).into());
            };
            let (state, at) = match &info.state {
                RawJobState::Delayed { due } => (JobSet::Waiting, Some(*due)),
                RawJobState::InFlight { lease_until } => (JobSet::InFlight, Some(*lease_until)),
                RawJobState::Dead { buried_at, .. } => (JobSet::Dead, Some(*buried_at)),
                RawJobState::Done { finished_at } => (JobSet::Done, Some(*finished_at)),
                RawJobState::Missing => (JobSet::Waiting, None),
            };
            let mut record = match at {
                Some(at) => json!({ "id": id, "state": state.as_str(), state.time_label(): timestamp(at) }),
                None => json!({ "id": id, "state": "bytes only" }),
            };
            if let RawJobState::Dead { reason, .. } = info.state {
                record["reason"] = json!(reason);
            }
            match info.envelope {
                Some(Ok(envelope)) => {
                    record["attempts"] = json!(attempts_in(state, envelope.attempt));
                    record["envelope"] = serde_json::to_value(envelope)?;
                }
                Some(Err(error)) => record["undecodable"] = Value::String(error),
                None => {}
            }
            Output::Record(record)
        }
        Command::Requeue { ids, all } => {
            let queue = queue()?;
            let moved = if all {
                queue.requeue_dead().await?
            } else {
                let ids = ids.into_iter().map(JobId::new).collect::<Result<Vec<_>, _>>()?;
                // Only dead jobs move: any other is named, and nothing is moved.
                for id in &ids {
                    let state = where_is(queue, id).await?;
                    if state != "dead" {
                        return Err(format!("job {id} is not dead ({state}): nothing requeued").into());
                    }
                }
                queue.requeue(&ids).await?
            };
            Output::Record(json!({ "requeued": moved }))
        }
        Command::Cancel { id } => {
            let queue = queue()?;
            let id = JobId::new(id)?;
            match queue.cancel(&id).await? {
                Cancelled::Deleted => Output::Record(json!({ "cancelled": id })),
                Cancelled::InFlight => {
                    return Err(
                        format!("job {id} is in flight: a scheduler is running it; not cancelled").into(),
                    );
                }
                _ => {
                    return Err(format!("job {id} is not in the queue: nothing cancelled").into());
                }
            }
        }
        Command::RunNow { id } => {
            let queue = queue()?;
            let id = JobId::new(id)?;
            if !queue.run_now(&id).await? {
                let state = where_is(queue, &id).await?;
                return Err(format!("job {id} is not waiting ({state}): nothing to run now").into());
            }
            Output::Record(json!({ "due_now": id }))
        }
        Command::Pause => Output::Record(json!({ "paused": true, "was_paused": queue()?.pause().await? })),
        Command::Resume => Output::Record(json!({ "paused": false, "was_paused": queue()?.resume().await? })),
        Command::Purge { set, yes } => {
            let queue = queue()?;
            if !yes {
                return Err("purge deletes jobs for good: add --yes".into());
            }
            Output::Record(json!({ "purged": queue.purge(set).await? }))
        }
        Command::Footprint { max_keys } => footprint_output(store.scan_footprint(max_keys).await?),
        Command::Locks { limit } => {
            let locks = store.list_locks(limit).await?;
            Output::Table(
                locks
                    .into_iter()
                    .map(|lock| {
                        // The JSON API's shape. A throttled key has no holders, limit or fence:
                        // shown empty, not as a limit of 0 (which reads as "closed").
                        let throttled = lock.next_slot.is_some();
                        let mut row = serde_json::to_value(&lock).unwrap_or(Value::Null);
                        if let (true, Some(fields)) = (throttled, row.as_object_mut()) {
                            for field in ["fence", "holders", "limit"] {
                                fields.insert(field.to_string(), Value::Null);
                            }
                        }
                        row
                    })
                    .collect(),
            )
        }
        Command::Dashboard {
            bind,
            token,
            read_only,
            public_read,
            https,
            session_ttl,
        } => {
            let mut options = DashboardOptions::default()
                .token(token)
                .public_read(public_read)
                .served_over_https(https)
                .session_ttl(session_ttl);
            if read_only {
                options = options.without_actions();
            }
            // A count given by flag or config file wins over the registry's for its queue.
            if let Some((shards, _)) = target.shards {
                options = options.queue_shards(target.queue.as_str(), shards);
            }
            let listener = tokio::net::TcpListener::bind(bind).await?;
            eprintln!(
                "redefer dashboard on http://{} ({})",
                listener.local_addr()?,
                match (options.has_token(), options.read_only()) {
                    (false, _) => "read-only, readable by anyone who reaches it",
                    (true, true) => "read-only, reading needs the token",
                    (true, false) => "reading and actions need the token",
                }
            );
            // The connection's address feeds the sign-in limit.
            let app = Dashboard::new(store, options)
                .router()
                .into_make_service_with_connect_info::<std::net::SocketAddr>();
            axum::serve(listener, app).await?;
            return Ok(());
        }
    };
    output.print(cli.json)
}

/// Where job `id` is, in the set names the command uses.
async fn where_is<St: QueueStore>(
    queue: &DelayQueue<Value, St>,
    id: &JobId,
) -> Result<&'static str, Failure> {
    Ok(queue
        .job(id)
        .await?
        .map_or(RawJobState::Missing, |info| info.state)
        .place())
}

/// A `--after` cursor: `<RFC 3339 time>/<id>`.
fn parse_cursor(text: &str) -> Result<ListCursor, Failure> {
    let (at, id) = text
        .split_once('/')
        .ok_or("--after takes <time>/<id>, as the last row of the previous page")?;
    Ok(ListCursor {
        at: humantime::parse_rfc3339(at)?,
        id: id.to_string(),
    })
}

/// One listed job as a row, its time named for what it is in `set`: the payload whole (for
/// JSON) or summarized (for a table), or why it does not decode.
fn entry_row(set: JobSet, entry: &ListedEntry<Value>, whole: bool) -> Value {
    let mut row = json!({ "id": entry.id, set.time_label(): timestamp(entry.at) });
    match &entry.envelope {
        Some(Ok(envelope)) if whole => {
            row["attempts"] = json!(attempts_in(set, envelope.attempt));
            row["last_error"] = json!(envelope.last_error);
            row["payload"] = envelope.payload.clone();
        }
        Some(Ok(envelope)) => {
            row["attempts"] = json!(attempts_in(set, envelope.attempt));
            row["payload"] = Value::String(summary(&envelope.payload));
        }
        Some(Err(error)) => row["undecodable"] = Value::String(error.clone()),
        None => row["undecodable"] = Value::String("no bytes".into()),
    }
    if let Some(reason) = &entry.reason {
        row["reason"] = Value::String(reason.clone());
    }
    row
}

/// The payload as compact JSON, cut to 60 characters.
fn summary(payload: &Value) -> String {
    let text = payload.to_string();
    match text.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// A time as RFC 3339 (UTC, ms).
fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

enum Output {
    Record(Value),
    Table(Vec<Value>),
    /// Rows for people, a record for scripts.
    Footprint {
        rows: Vec<Value>,
        record: Value,
    },
}

impl Output {
    fn print(self, json: bool) -> Result<(), Failure> {
        if json {
            let value = match self {
                Output::Record(record) => record,
                Output::Table(rows) => Value::Array(rows),
                Output::Footprint { record, .. } => record,
            };
            println!("{}", serde_json::to_string_pretty(&value)?);
            return Ok(());
        }
        match self {
            Output::Record(Value::Object(fields)) => {
                let width = fields.keys().map(String::len).max().unwrap_or(0);
                for (name, value) in fields {
                    println!("{name:<width$}  {}", cell(&value));
                }
            }
            Output::Record(other) => println!("{}", cell(&other)),
            Output::Table(rows) | Output::Footprint { rows, .. } => print_table(&rows),
        }
        Ok(())
    }
}

fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Rows of JSON objects as aligned columns, in the order the fields first appear.
fn print_table(rows: &[Value]) {
    if rows.is_empty() {
        println!("(none)");
        return;
    }
    let mut columns: Vec<String> = Vec::new();
    for row in rows {
        for name in row.as_object().into_iter().flat_map(|fields| fields.keys()) {
            if !columns.contains(name) {
                columns.push(name.clone());
            }
        }
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| columns.iter().map(|c| cell(&row[c.as_str()])).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, name)| {
            cells
                .iter()
                .map(|row| row[i].chars().count())
                .chain([name.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |values: Vec<String>| {
        values
            .iter()
            .zip(&widths)
            .map(|(value, width)| format!("{value:<width$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    println!("{}", line(columns.clone()));
    for row in cells {
        println!("{}", line(row));
    }
}

#[cfg(test)]
mod tests {
    use super::without_password;

    #[test]
    fn urls_are_printed_without_their_password() {
        assert_eq!(
            without_password("redis://app:s3cret@db:6379/0"),
            "redis://app:***@db:6379/0"
        );
        assert_eq!(without_password("rediss://:s3cret@db"), "rediss://:***@db");
        assert_eq!(without_password("redis://db:6379"), "redis://db:6379");
        assert_eq!(without_password("redis://user@db"), "redis://user@db");
        assert_eq!(without_password("not a url"), "not a url");
    }
}
