//! What the command works on: the prefix and the queue, from the flags, the application's
//! config file and the queue registry.

use redefer::Config;
use redefer::queue::{DelayQueue, QueueOperator, QueueStats, QueueStore};
use serde_json::Value;

use crate::Failure;
use crate::args::Cli;

/// What the command works on: the flags, over the config file, over the defaults.
pub struct Target {
    pub prefix: String,
    pub queue: String,
    /// The shard count given (flag, or config file), and by what; `None`: as registered.
    pub shards: Option<(usize, &'static str)>,
}

impl Target {
    pub fn of(cli: &Cli) -> Result<Target, Failure> {
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
pub async fn known_queue<St: QueueStore>(
    store: &St,
    target: &Target,
) -> Result<QueueOperator<Value, St>, Failure> {
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
    let queue = QueueOperator::new(
        DelayQueue::<Value, _>::new(store.clone(), target.queue.as_str())?.shards(shards)?,
    );
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
