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
//! job whose bytes do not decode is shown as such. The sets are named as in the guide:
//! waiting, in_flight, dead, done.

mod args;
mod operate;
mod output;
mod target;

use std::process::ExitCode;

use clap::Parser;
use redefer::RedisStore;
use redefer::store::without_password;
use serde_json::json;

use crate::args::{Cli, Command};
use crate::operate::operate;

use crate::target::Target;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        // The reader stopped reading (`redefer locks | head`): what it read is all it wanted.
        Err(error) if is_closed_pipe(&*error) => ExitCode::SUCCESS,
        Err(error) => {
            // With --json, a script reads the error as it reads the output.
            if json {
                eprintln!("{}", json!({ "error": error.to_string() }));
            } else {
                eprintln!("redefer: {}", shown_on_a_terminal(&error.to_string()));
            }
            ExitCode::FAILURE
        }
    }
}

/// An error as a terminal shows it: what it quotes from outside (a key, a URL, an id) may hold
/// escape sequences and other control characters, written escaped (`\u{1B}`) as the tables
/// write them; its own line breaks (a configuration file's error points at the line) stay.
fn shown_on_a_terminal(error: &str) -> String {
    error
        .split('\n')
        .map(|line| redefer::dashboard::escape_for_terminal(line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a command that failed says, on stderr.
type Failure = Box<dyn std::error::Error>;

/// Whether `error` is the output's reader having closed the pipe.
fn is_closed_pipe(error: &(dyn std::error::Error + 'static)) -> bool {
    error
        .downcast_ref::<std::io::Error>()
        .is_some_and(|error| error.kind() == std::io::ErrorKind::BrokenPipe)
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
        if let redefer::StoreError::InvalidUrl { .. } = &error {
            return format!("--url (or REDIS_URL): {error}").into();
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
