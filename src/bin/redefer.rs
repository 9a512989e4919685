//! `redefer`: inspect and operate a redefer deployment in Redis.
//!
//! ```text
//! redefer --queue orders stats
//! redefer --queue orders list dead --limit 50
//! redefer --queue orders show 3f2c...
//! redefer --queue orders requeue 3f2c...        # or: requeue --all
//! redefer --queue orders purge dead --yes
//! redefer locks
//! ```
//!
//! Human tables by default, `--json` for scripts. Payloads are shown as JSON; a job whose
//! bytes do not decode is shown as such.

use std::process::ExitCode;
use std::time::SystemTime;

use clap::{Parser, Subcommand, ValueEnum};
use redefer::RedisStore;
use redefer::queue::{DelayQueue, JobId, ListedEntry};
use redefer::queue::{JobSet, QueueStats, QueueStore, RawJobState};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(
    name = "redefer",
    version,
    about = "Inspect and operate redefer's locks and delay queues in Redis"
)]
struct Cli {
    /// The Redis server.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    url: String,
    /// The prefix of redefer's keys.
    #[arg(long, default_value = redefer::key::DEFAULT_PREFIX)]
    prefix: String,
    /// The queue.
    #[arg(long, default_value = "deferred")]
    queue: String,
    /// How many shards the queue has (as configured in the application).
    #[arg(long, default_value_t = 1)]
    shards: usize,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Count the queue's jobs: waiting, due now, in flight, dead.
    Stats,
    /// List one of the queue's sets, oldest first.
    List {
        set: Set,
        #[arg(long, default_value_t = 20)]
        limit: usize,
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
    /// Delete every job of one set, for good.
    Purge {
        set: Set,
        /// Confirms the deletion.
        #[arg(long)]
        yes: bool,
    },
    /// List the queues under the prefix (each registers itself when it first pushes, or
    /// when a scheduler starts on it).
    Queues,
    /// List held locks with their remaining TTL, fencing token and waiters in line.
    Locks {
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Set {
    Waiting,
    InFlight,
    Dead,
}

impl From<Set> for JobSet {
    fn from(set: Set) -> JobSet {
        match set {
            Set::Waiting => JobSet::Waiting,
            Set::InFlight => JobSet::InFlight,
            Set::Dead => JobSet::Dead,
        }
    }
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

/// Fails for a queue the registry does not know and that holds nothing: a mistyped `--queue`
/// or `--prefix` is an error, not a row of zeros. A queue with jobs counts as known (it may
/// predate the registry).
async fn known_queue(
    store: &RedisStore,
    queue: &DelayQueue<Value, RedisStore>,
    prefix: &str,
) -> Result<(), Failure> {
    let known = store.registered().await?;
    if known.iter().any(|name| name == queue.name().as_str()) {
        return Ok(());
    }
    if queue.stats().await? != QueueStats::default() {
        return Ok(());
    }
    let known = if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    };
    Err(format!(
        "no queue {:?} under prefix {prefix:?} (known: {known}); check --queue and --prefix",
        queue.name().as_str()
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
    let store = RedisStore::builder()
        .prefix(cli.prefix.as_str())?
        .connect(&cli.url)
        .await
        .map_err(|error| {
            format!(
                "cannot connect to {}: {error} (is the server running? --url or REDIS_URL says where)",
                without_password(&cli.url)
            )
        })?;
    let queue = DelayQueue::<Value, _>::new(store.clone(), cli.queue.as_str())?.shards(cli.shards)?;
    if !matches!(cli.command, Command::Queues | Command::Locks { .. }) {
        known_queue(&store, &queue, &cli.prefix).await?;
    }
    let output = match cli.command {
        Command::Queues => Output::Table(
            store
                .registered()
                .await?
                .into_iter()
                .map(|name| json!({ "queue": name }))
                .collect(),
        ),
        Command::Stats => {
            let stats = queue.stats().await?;
            Output::Record(serde_json::to_value(stats)?)
        }
        Command::List { set, limit } => {
            let entries = queue.list(set.into(), limit).await?;
            Output::Table(entries.iter().map(entry_row).collect())
        }
        Command::Show { id } => {
            let id = JobId::new(id)?;
            let Some(info) = queue.job(&id).await? else {
                return Err(format!("no job {id} in queue {}", cli.queue).into());
            };
            let (state, at, reason) = match info.state {
                RawJobState::Delayed { due } => ("waiting", Some(due), None),
                RawJobState::InFlight { lease_until } => ("in-flight", Some(lease_until), None),
                RawJobState::Dead { buried_at, reason } => ("dead", Some(buried_at), reason),
                RawJobState::Missing => ("bytes only", None, None),
            };
            let mut record = json!({ "id": id, "state": state, "at": at.map(timestamp), "reason": reason });
            match info.envelope {
                Some(Ok(envelope)) => record["envelope"] = serde_json::to_value(envelope)?,
                Some(Err(error)) => record["undecodable"] = Value::String(error),
                None => {}
            }
            Output::Record(record)
        }
        Command::Requeue { ids, all } => {
            let moved = if all {
                queue.requeue_dead().await?
            } else {
                let ids = ids.into_iter().map(JobId::new).collect::<Result<Vec<_>, _>>()?;
                // Only dead jobs move: any other is named, and nothing is moved.
                for id in &ids {
                    let state = match queue.job(id).await?.map(|info| info.state) {
                        Some(RawJobState::Dead { .. }) => continue,
                        Some(RawJobState::Delayed { .. }) => "waiting",
                        Some(RawJobState::InFlight { .. }) => "in flight",
                        Some(RawJobState::Missing) | None => "not in the queue",
                    };
                    return Err(format!("job {id} is not dead ({state}): nothing requeued").into());
                }
                queue.requeue(&ids).await?
            };
            Output::Record(json!({ "requeued": moved }))
        }
        Command::Purge { set, yes } => {
            if !yes {
                return Err("purge deletes jobs for good: add --yes".into());
            }
            Output::Record(json!({ "purged": queue.purge(set.into()).await? }))
        }
        Command::Locks { limit } => {
            let locks = store.locks(limit).await?;
            Output::Table(
                locks
                    .into_iter()
                    .map(|lock| {
                        json!({
                            "key": lock.key,
                            "remaining_ms": lock.remaining.map(|d| d.as_millis() as u64),
                            "fence": lock.fence,
                            "waiters": lock.waiters,
                            "reserved_for": lock.reserved_for,
                        })
                    })
                    .collect(),
            )
        }
    };
    output.print(cli.json)
}

/// One listed job as a row: its payload summarized, or why it does not decode.
fn entry_row(entry: &ListedEntry<Value>) -> Value {
    let mut row = json!({ "id": entry.id, "at": timestamp(entry.at) });
    match &entry.envelope {
        Some(Ok(envelope)) => {
            row["attempt"] = json!(envelope.attempt);
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
}

impl Output {
    fn print(self, json: bool) -> Result<(), Failure> {
        if json {
            let value = match self {
                Output::Record(record) => record,
                Output::Table(rows) => Value::Array(rows),
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
            Output::Table(rows) => print_table(&rows),
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
