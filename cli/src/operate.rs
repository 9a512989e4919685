//! Each command, carried out on the store.

use redefer::dashboard::{Dashboard, DashboardOptions};
use redefer::queue::QueueStore;
use redefer::queue::{
    Cancelled, JobId, JobSet, ListCursor, QueueOperator, QueueRegistry, RawJobState, attempts_in,
};
use redefer::store::ListLocks;
use redefer::store::RedisConnection;
use redefer::store::footprint::ScanFootprint;
use redefer::throttle::ThrottleStore;
use redefer::{LockKey, RedisStore};
use serde_json::{Value, json};

use crate::Failure;
use crate::args::{Cli, Command};
use crate::output::{Output, entry_row, footprint_output, timestamp};
use crate::target::{Target, known_queue};

pub async fn operate<Conn>(cli: Cli, target: Target, store: RedisStore<Conn>) -> Result<(), Failure>
where
    Conn: RedisConnection,
    RedisStore<Conn>: ListLocks + ScanFootprint,
{
    // Every command but these works on one queue, which must be one the application has.
    let queue = match cli.command {
        Command::Queues
        | Command::Locks { .. }
        | Command::Reopen { .. }
        | Command::Dashboard { .. }
        | Command::Footprint { .. } => None,
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
                // Found by a scan: another tool's key names may hold escape sequences.
                let prefixes: Vec<_> = elsewhere
                    .iter()
                    .map(|prefix| redefer::dashboard::escape_for_terminal(prefix))
                    .collect();
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
        Command::Groups { limit } => {
            let groups = queue()?.groups(limit).await?;
            if !cli.json && groups.groups > groups.largest.len() as u64 {
                eprintln!("redefer: the {} largest of {} groups", groups.largest.len(), groups.groups);
            }
            Output::Table(
                groups
                    .largest
                    .iter()
                    .map(|group| json!({ "group": group.group, "waiting": group.waiting }))
                    .collect(),
            )
        }
        Command::List { set, limit, after } => {
            let queue = queue()?;
            let after = after.as_deref().map(parse_cursor).transpose()?;
            let entries = queue.list_after(set, after.as_ref(), limit).await?;
            // A full page may not be all: the next one starts after its last row.
            if let (false, true, Some(last)) = (cli.json, entries.len() == limit, entries.last()) {
                let cursor = format!("{}/{}", timestamp(last.at), last.id);
                eprintln!(
                    "redefer: {limit} shown (--limit), there may be more: --after {}",
                    redefer::dashboard::escape_for_terminal(&cursor)
                );
            }
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
            if !cli.json && locks.len() >= limit {
                eprintln!("redefer: {limit} shown (--limit), there may be more");
            }
            Output::Table(
                locks
                    .into_iter()
                    .map(|lock| {
                        // The JSON API's shape. A throttled key has no holders or fence:
                        // shown empty, as its limit is.
                        let throttled = lock.next_slot.is_some();
                        let mut row = serde_json::to_value(&lock).unwrap_or(Value::Null);
                        if let (true, Some(fields)) = (throttled, row.as_object_mut()) {
                            for field in ["fence", "holders"] {
                                fields.insert(field.to_string(), Value::Null);
                            }
                        }
                        row
                    })
                    .collect(),
            )
        }
        Command::Reopen { key } => {
            let key = LockKey::new(key)?;
            let Some(opens_in) = store.reopen(&key).await? else {
                return Err(format!("key {key} is not closed: nothing reopened").into());
            };
            Output::Record(json!({
                "reopened": key.as_str(),
                "next_slot_ms": u64::try_from(opens_in.as_millis()).unwrap_or(u64::MAX),
            }))
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
    // Buffered: a table of thousands of locks is written in a few calls, not one per line.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    Ok(output.print(cli.json, &mut out)?)
}

/// Where job `id` is, in the set names the command uses.
async fn where_is<St: QueueStore>(
    queue: &QueueOperator<Value, St>,
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
    const FORM: &str = "--after takes <time>/<id>, as the last row of the previous page";
    let (at, id) = text.split_once('/').ok_or(FORM)?;
    let at = humantime::parse_rfc3339(at)
        .map_err(|error| format!("{FORM}: {at:?} is not an RFC 3339 time ({error})"))?;
    Ok(ListCursor {
        at,
        id: id.to_string(),
    })
}
