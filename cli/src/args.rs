//! The command line: the options every command takes, and the commands.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use redefer::queue::JobSet;

#[derive(Parser)]
#[command(
    name = "redefer",
    version,
    about = "Inspect and operate redefer's locks and delay queues in Redis"
)]
// The options before the command may come after it too (`global`): `redefer queues --url URL`.
pub struct Cli {
    /// The Redis server (with --cluster: any node of the cluster).
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub url: String,
    /// Connect to a Redis Cluster.
    #[arg(long, global = true)]
    pub cluster: bool,
    /// The application's configuration (TOML, or JSON by a .json name): the prefix, queue and
    /// shards to use, unless given below.
    #[arg(long, global = true, env = "REDEFER_CONFIG")]
    pub config: Option<PathBuf>,
    /// The prefix of redefer's keys [default: the config's, or redefer].
    #[arg(long, global = true)]
    pub prefix: Option<String>,
    /// The queue [default: the config's, or deferred].
    #[arg(long, global = true)]
    pub queue: Option<String>,
    /// How many shards the queue has [default: the config's, or 1].
    #[arg(long, global = true)]
    pub shards: Option<usize>,
    /// Print JSON instead of tables (errors too, on stderr).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Count the queue's jobs: waiting, due now, in flight, dead, done (kept); paused or not.
    Stats,
    /// List one of the queue's sets (waiting, in_flight, dead, done), oldest first.
    List {
        /// The set: waiting, in_flight, dead or done.
        set: JobSet,
        /// How many entries at most: one page (up to 1000; --after goes on).
        #[arg(long, default_value_t = 20, value_parser = page_size())]
        limit: usize,
        /// Start after this entry: `<time>/<id>`, as the last row of the previous page.
        #[arg(long)]
        after: Option<String>,
    },
    /// Count the due jobs waiting for their turn per group (fair shares across tenants), the
    /// largest groups first.
    Groups {
        /// How many groups at most (up to 1000).
        #[arg(long, default_value_t = 20, value_parser = page_size())]
        limit: usize,
    },
    /// Show one job in full.
    Show {
        /// The job's id, as `list` shows it.
        id: String,
    },
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
    Cancel {
        /// The job's id.
        id: String,
    },
    /// Make a waiting job due now.
    RunNow {
        /// The job's id.
        id: String,
    },
    /// Pause the queue: its claims hand out nothing, in every process, until `resume`.
    Pause,
    /// Resume a paused queue.
    Resume,
    /// Delete every job of one set, for good.
    Purge {
        /// The set: waiting, in_flight, dead or done.
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
        /// How many keys at most (at least 1).
        #[arg(long, default_value_t = 100, value_parser = at_least_one::<usize>)]
        limit: usize,
    },
    /// Reopen a throttled key its handler closed (an upstream's "429, retry after"), now: it
    /// admits again as soon as its rate allows, as if its closing had ended now. Slots booked
    /// while it was closed keep their times.
    Reopen {
        /// The throttled key, as the application names it.
        key: String,
    },
    /// Count the keys under the prefix by kind, and those without an expiry: what Redis keeps
    /// for redefer (a bounded SCAN, safe on a large production Redis; with --cluster: every
    /// master).
    Footprint {
        /// Stop after looking at this many keys (at least 1).
        #[arg(long, default_value_t = 1_000_000, value_parser = at_least_one::<u64>)]
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

/// A count of at least 1: a 0 listed nothing and said "(none)", or looked at a page anyway.
fn at_least_one<T: std::str::FromStr<Err: std::fmt::Display> + Default + PartialEq>(
    text: &str,
) -> Result<T, String> {
    match text.parse::<T>() {
        Ok(zero) if zero == T::default() => Err("must be at least 1".to_string()),
        Ok(count) => Ok(count),
        Err(error) => Err(error.to_string()),
    }
}

/// A page's size as the queue's listings take it: at least 1, at most
/// [`MAX_PAGE`](redefer::queue::MAX_PAGE). A 0 listed nothing and said "(none)", and a larger
/// number was cut to a page without a word.
fn page_size() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..=redefer::queue::MAX_PAGE as u64)
}
