//! The pages of the queues: every queue, one queue's jobs, one job (the locks have a page of
//! their own, `locks_page.rs`).

use std::fmt::Write;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use serde_json::Value;

use super::Dashboard;
use super::access::Visitor;
use super::html::{encode, escape, page, time};
use super::plot::{bars, per_minute};
use super::problem::Problem;
use crate::queue::{
    Counters, JobId, JobSet, JobStatus, ListCursor, ListedEntry, QueueOperator, QueueStats, QueueStore,
    attempts_in,
};
use crate::store::ListLocks;

pub(super) type Shared<St> = State<Arc<Dashboard<St>>>;

/// A page that could not be made: the status and why, as a page.
pub(super) fn failure(status: StatusCode, message: &str) -> Response {
    Problem::new(status, message).into()
}

/// The CSRF field of `visitor`'s action forms, when it may act through them.
fn acting<'v, St>(d: &Dashboard<St>, visitor: &'v Visitor) -> Option<&'v str> {
    visitor.csrf().filter(|_| !d.access.read_only())
}

/// `Ok(html)`, or the failure's page.
fn respond(result: Result<String, Response>) -> Response {
    match result {
        Ok(html) => Html(html).into_response(),
        Err(response) => response,
    }
}

impl<St: QueueStore + ListLocks + Sync> Dashboard<St> {
    /// The queue `name`, if the registry knows it or it holds jobs; a 404 otherwise.
    pub(super) async fn known_queue(
        &self,
        name: &str,
    ) -> Result<(QueueOperator<Value, St>, QueueStats), Problem> {
        let known = self.store.registered().await.map_err(Problem::store)?;
        let registered = known.iter().find(|known| known.name == name);
        let queue = self
            .queue(name, registered.map(|known| known.shards))
            .map_err(|error| Problem::new(StatusCode::BAD_REQUEST, error.to_string()))?;
        let stats = queue.stats().await.map_err(Problem::store)?;
        if registered.is_none() && stats == QueueStats::default() {
            return Err(Problem::new(
                StatusCode::NOT_FOUND,
                format!("no queue {name:?} under this prefix"),
            ));
        }
        Ok((queue, stats))
    }

    pub(super) fn store_failed(&self, error: impl std::fmt::Display) -> Response {
        Problem::store(error).into()
    }
}

/// Every queue: counts, and the last hour's throughput, lag and failures.
pub(super) async fn queues<St: QueueStore + ListLocks + Sync>(
    State(dashboard): Shared<St>,
    Extension(visitor): Extension<Visitor>,
) -> Response {
    respond(queues_page(&dashboard, &visitor).await)
}

async fn queues_page<St: QueueStore + ListLocks + Sync>(
    d: &Dashboard<St>,
    visitor: &Visitor,
) -> Result<String, Response> {
    let names = d
        .store
        .registered()
        .await
        .map_err(|error| d.store_failed(error))?;
    let now = SystemTime::now();
    let mut body = String::from(
        "<table id=queues><tr><th>Queue</th><th class=num>waiting</th><th class=num>due</th>\
         <th class=num>in_flight</th><th class=num>dead</th><th class=num>done</th><th>Last hour</th></tr>",
    );
    for registered in &names {
        let name = &registered.name;
        // A member no queue of ours can have (another tool's, or damaged) is listed as such:
        // the other queues are still shown.
        let queue = match d.queue(name, Some(registered.shards)) {
            Ok(queue) => queue,
            Err(error) => {
                let _ = write!(
                    body,
                    "<tr><td>{name}</td><td colspan=6 class=bad>not a queue name redefer writes: {why}</td></tr>",
                    name = escape(name),
                    why = escape(&error.to_string()),
                );
                continue;
            }
        };
        let stats = queue.stats().await.map_err(|error| d.store_failed(error))?;
        // The plots are for people: a broken activity hash costs them, not the page.
        let plots = if registered.counters == Counters::Off {
            "<span class=off>activity counters are off for this queue</span>".to_string()
        } else {
            match queue.activity().await {
                Ok(activity) => {
                    let throughput = per_minute(&activity, now, |m| m.done as f64);
                    let lag = per_minute(&activity, now, |m| {
                        m.lag_mean().map_or(0.0, |lag| lag.as_secs_f64() * 1000.0)
                    });
                    let failures = per_minute(&activity, now, |m| (m.failed + m.dead) as f64);
                    let joined = per_minute(&activity, now, |m| (m.coalesced + m.superseded) as f64);
                    format!(
                        "{}{}{}{}",
                        bars("done", "/min", &throughput),
                        bars("lag (mean)", "ms", &lag),
                        bars("failed + buried", "/min", &failures),
                        bars("coalesced + superseded", "/min", &joined)
                    )
                }
                Err(error) => format!(
                    "<span class=bad>activity unreadable: {}</span>",
                    escape(&error.to_string())
                ),
            }
        };
        let _ = write!(
            body,
            "<tr><td><a href='{link}'>{name}</a>{paused}</td><td class=num>{}</td><td class=num>{}</td>\
             <td class=num>{}</td><td class=num>{}</td><td class=num>{}</td><td><div class=plots>{plots}</div></td></tr>",
            stats.waiting,
            stats.due,
            stats.in_flight,
            stats.dead,
            stats.done,
            link = d.link(&format!("/queues/{}", encode(name))),
            name = escape(name),
            paused = if stats.paused { " <b>(paused)</b>" } else { "" },
        );
    }
    body.push_str("</table>");
    if names.is_empty() {
        body.push_str("<p>No queue has registered under this prefix yet: a queue registers on its first push, or when a scheduler starts on it.</p>");
    }
    Ok(page(&d.base(), "Queues", Some(visitor), &body))
}

#[derive(serde::Deserialize)]
pub(super) struct QueueQuery {
    set: Option<String>,
    /// `<ms since the epoch>/<id>`: the last entry of the previous page.
    after: Option<String>,
    notice: Option<String>,
}

/// How many groups a queue's page shows (the largest).
const GROUPS_SHOWN: usize = 10;

/// A queue: its counts, actions, and one set's jobs, a page at a time by score.
pub(super) async fn queue<St: QueueStore + ListLocks + Sync>(
    State(dashboard): Shared<St>,
    Path(name): Path<String>,
    Query(query): Query<QueueQuery>,
    Extension(visitor): Extension<Visitor>,
) -> Response {
    respond(queue_page(&dashboard, &name, query, &visitor).await)
}

async fn queue_page<St: QueueStore + ListLocks + Sync>(
    d: &Dashboard<St>,
    name: &str,
    query: QueueQuery,
    visitor: &Visitor,
) -> Result<String, Response> {
    let (queue, stats) = d.known_queue(name).await?;
    let set: JobSet = match query.set.as_deref() {
        None => JobSet::Waiting,
        Some(set) => set
            .parse()
            .map_err(|error: String| failure(StatusCode::BAD_REQUEST, &error))?,
    };
    let after = match query.after.as_deref() {
        None => None,
        Some(cursor) => {
            Some(parse_cursor(cursor).ok_or_else(|| failure(StatusCode::BAD_REQUEST, "after: <ms>/<id>"))?)
        }
    };
    let entries = queue
        .list_after(set, after.as_ref(), d.options.page_size)
        .await
        .map_err(|error| d.store_failed(error))?;
    let csrf = acting(d, visitor);
    let here = d.link(&format!("/queues/{}", encode(name)));

    let mut body = String::new();
    if let Some(notice) = &query.notice {
        let _ = write!(body, "<p class=notice id=notice>{}</p>", escape(notice));
    }
    if stats.paused {
        body.push_str(
            "<p class=paused id=paused>Paused: claims hand out nothing until the queue is resumed.</p>",
        );
    }
    let _ = write!(
        body,
        "<table id=stats><tr><th class=num>waiting</th><th class=num>due</th><th class=num>in_flight</th>\
         <th class=num>dead</th><th class=num>done</th></tr><tr><td class=num>{}</td><td class=num>{}</td>\
         <td class=num>{}</td><td class=num>{}</td><td class=num>{}</td></tr></table>",
        stats.waiting, stats.due, stats.in_flight, stats.dead, stats.done
    );
    // The backlog per group (fair shares), when groups have due jobs: the largest first.
    if let Ok(groups) = queue.groups(GROUPS_SHOWN).await
        && groups.groups > 0
    {
        let _ = write!(
            body,
            "<h2>Due per group</h2><p id=group-count>{} groups have due jobs waiting for their turn{}.</p>\
             <table id=groups><tr><th>group</th><th class=num>waiting</th></tr>",
            groups.groups,
            if groups.groups > groups.largest.len() as u64 {
                "; the largest"
            } else {
                ""
            }
        );
        for group in &groups.largest {
            let _ = write!(
                body,
                "<tr><td>{}</td><td class=num>{}</td></tr>",
                escape(&group.group),
                group.waiting
            );
        }
        body.push_str("</table>");
    }
    // What the policies for waiting did in the last hour; a broken activity hash costs only this.
    if let Ok(activity) = queue.activity().await {
        let (coalesced, superseded) = activity
            .iter()
            .fold((0, 0), |(c, s), m| (c + m.coalesced, s + m.superseded));
        let _ = write!(
            body,
            "<p id=policies>Last hour: <span id=coalesced>{coalesced}</span> requests joined a waiting job              (coalesced), <span id=superseded>{superseded}</span> waiting jobs dropped for newer requests              (superseded).</p>"
        );
    }
    if let Some(csrf) = csrf {
        let (action, label) = if stats.paused {
            ("resume", "Resume")
        } else {
            ("pause", "Pause")
        };
        body.push_str(&action_form(csrf, &here, action, &[], label));
        // Purging asks first, on a page of its own: no script needed.
        let _ = write!(
            body,
            "<form class=inline method=get action='{here}/confirm/purge-dead'><button type=submit id=purge>Purge dead jobs…</button></form>"
        );
    }
    body.push_str("<p class=tabs>");
    for tab in JobSet::ALL {
        let count = match tab {
            JobSet::Waiting => stats.waiting,
            JobSet::InFlight => stats.in_flight,
            JobSet::Dead => stats.dead,
            JobSet::Done => stats.done,
        };
        let _ = write!(
            body,
            "<a href='{here}?set={tab}' class='{on}'>{tab} ({count})</a>",
            tab = tab.as_str(),
            on = if tab == set { "on" } else { "" },
        );
    }
    body.push_str("</p>");
    let _ = write!(
        body,
        "<table id=jobs><tr><th>id</th><th>{}</th><th class=num>attempts</th><th>payload</th>{}{}</tr>",
        set.time_label(),
        if set == JobSet::Dead {
            "<th>reason</th>"
        } else {
            ""
        },
        if csrf.is_some() { "<th></th>" } else { "" },
    );
    for entry in &entries {
        body.push_str(&job_row(&here, set, entry, csrf));
    }
    body.push_str("</table>");
    if entries.is_empty() {
        body.push_str("<p>(none)</p>");
    }
    if let Some(last) = entries.last().filter(|_| entries.len() == d.options.page_size) {
        let cursor = last.cursor();
        let _ = write!(
            body,
            "<p><a id=next href='{here}?set={}&after={}'>Next page</a></p>",
            set.as_str(),
            encode(&format!("{}/{}", epoch_ms(cursor.at), cursor.id))
        );
    }
    Ok(page(&d.base(), &format!("Queue {name}"), Some(visitor), &body))
}

/// One job of a listing: its link, time, attempts (as its status counts them), payload (or why it does not decode) and,
/// when the viewer may act (with the forms' `csrf` field), the actions its set allows.
fn job_row(here: &str, set: JobSet, entry: &ListedEntry<Value>, csrf: Option<&str>) -> String {
    let (attempt, payload) = match &entry.envelope {
        Some(Ok(envelope)) => (
            attempts_in(set, envelope.attempt).to_string(),
            format!("<code>{}</code>", escape(&summary(&envelope.payload))),
        ),
        Some(Err(error)) => (
            "-".to_string(),
            format!("<span class=bad>undecodable: {}</span>", escape(error)),
        ),
        None => (
            "-".to_string(),
            "<span class=bad>undecodable: no bytes</span>".to_string(),
        ),
    };
    let mut row = format!(
        "<tr data-id='{id}'><td><a href='{here}/jobs/{link}'><code>{id}</code></a></td><td>{}</td><td class=num>{attempt}</td><td>{payload}</td>",
        time(entry.at),
        id = escape(&entry.id),
        link = encode(&entry.id),
    );
    if set == JobSet::Dead {
        let _ = write!(row, "<td>{}</td>", escape(entry.reason.as_deref().unwrap_or("")));
    }
    if let Some(csrf) = csrf {
        row.push_str("<td>");
        for (action, label) in row_actions(set) {
            row.push_str(&action_form(csrf, here, action, &[("id", &entry.id)], label));
        }
        row.push_str("</td>");
    }
    row.push_str("</tr>");
    row
}

/// What can be done to a job of `set`.
fn row_actions(set: JobSet) -> &'static [(&'static str, &'static str)] {
    match set {
        JobSet::Waiting => &[("run-now", "Run now"), ("cancel", "Cancel")],
        JobSet::Dead => &[("requeue", "Requeue"), ("cancel", "Cancel")],
        JobSet::InFlight | JobSet::Done => &[],
    }
}

/// A POST form for `action` on the queue at `here`, with the `csrf` field and `fields` (the
/// job's id, a confirmation).
fn action_form(csrf: &str, here: &str, action: &str, fields: &[(&str, &str)], label: &str) -> String {
    let mut form = format!(
        "<form class=inline method=post action='{here}/{action}'><input type=hidden name=csrf value='{}'>",
        escape(csrf),
    );
    for (name, value) in fields {
        let _ = write!(form, "<input type=hidden name={name} value='{}'>", escape(value));
    }
    let _ = write!(
        form,
        "<button type=submit name=do value='{action}'>{}</button></form> ",
        escape(label)
    );
    form
}

/// Asks before the dead-letter set is purged: how many would go, yes or back.
pub(super) async fn confirm_purge<St: QueueStore + ListLocks + Sync>(
    State(dashboard): Shared<St>,
    Path(name): Path<String>,
    Extension(visitor): Extension<Visitor>,
) -> Response {
    respond(confirm_purge_page(&dashboard, &name, &visitor).await)
}

async fn confirm_purge_page<St: QueueStore + ListLocks + Sync>(
    d: &Dashboard<St>,
    name: &str,
    visitor: &Visitor,
) -> Result<String, Response> {
    let Some(csrf) = acting(d, visitor) else {
        return Err(failure(
            StatusCode::FORBIDDEN,
            "sign in first (or the dashboard is read-only)",
        ));
    };
    let (_, stats) = d.known_queue(name).await?;
    let here = d.link(&format!("/queues/{}", encode(name)));
    let body = format!(
        "<p>Delete the {} dead jobs of queue {}, for good?</p>{}<a id=back href='{here}?set=dead'>No, back</a>",
        stats.dead,
        escape(name),
        action_form(
            csrf,
            &here,
            "purge-dead",
            &[("confirm", "yes")],
            "Yes, purge them"
        ),
    );
    Ok(page(&d.base(), "Purge dead jobs", Some(visitor), &body))
}

/// One job in full: status, envelope, actions.
pub(super) async fn job<St: QueueStore + ListLocks + Sync>(
    State(dashboard): Shared<St>,
    Path((name, id)): Path<(String, String)>,
    Extension(visitor): Extension<Visitor>,
) -> Response {
    respond(job_page(&dashboard, &name, &id, &visitor).await)
}

async fn job_page<St: QueueStore + ListLocks + Sync>(
    d: &Dashboard<St>,
    name: &str,
    id: &str,
    visitor: &Visitor,
) -> Result<String, Response> {
    let (queue, _) = d.known_queue(name).await?;
    let job_id = JobId::new(id).map_err(|error| failure(StatusCode::BAD_REQUEST, &error.to_string()))?;
    let info = queue.job(&job_id).await.map_err(|error| d.store_failed(error))?;
    let status = JobStatus::of(info.as_ref());
    if status == JobStatus::Unknown {
        return Err(Problem::new(StatusCode::NOT_FOUND, format!("no job {id} in queue {name}")).into());
    }
    let here = d.link(&format!("/queues/{}", encode(name)));
    let mut body = format!(
        "<p><a href='{here}'>← queue {}</a></p><table id=status>",
        escape(name)
    );
    let mut field = |label: &str, value: String| {
        let _ = write!(body, "<tr><th>{label}</th><td>{value}</td></tr>");
    };
    field("id", format!("<code>{}</code>", escape(id)));
    // Where the job is, when (in that set's terms), and its runs.
    let found = match &status {
        JobStatus::Waiting { due, attempts } => Some((JobSet::Waiting, *due, *attempts, None)),
        JobStatus::InFlight {
            lease_until,
            attempts,
        } => Some((JobSet::InFlight, *lease_until, *attempts, None)),
        JobStatus::Done {
            finished_at,
            attempts,
        } => Some((JobSet::Done, *finished_at, *attempts, None)),
        JobStatus::Dead {
            buried_at,
            reason,
            attempts,
        } => Some((JobSet::Dead, *buried_at, *attempts, reason.as_deref())),
        JobStatus::Unknown => None,
    };
    let set = match found {
        Some((set, at, attempts, reason)) => {
            field("status", set.as_str().into());
            field(set.time_label(), time(at));
            if set == JobSet::Dead {
                field("reason", escape(reason.unwrap_or("")));
            }
            field("attempts", attempts.map_or("-".into(), |n| n.to_string()));
            Some(set)
        }
        None => {
            field(
                "status",
                "unknown (never pushed, deleted, or finished and not kept)".into(),
            );
            None
        }
    };
    match info.and_then(|info| info.envelope) {
        Some(Ok(envelope)) => {
            if let Some(error) = &envelope.last_error {
                field("last error", escape(error));
            }
            let pretty = serde_json::to_string_pretty(&envelope).unwrap_or_default();
            let _ = write!(
                body,
                "</table><h2>Envelope</h2><pre id=envelope>{}</pre>",
                escape(&pretty)
            );
        }
        Some(Err(error)) => {
            let _ = write!(
                body,
                "</table><p class=bad id=envelope>undecodable: {}</p>",
                escape(&error)
            );
        }
        None => body.push_str("</table>"),
    }
    if let Some(csrf) = acting(d, visitor) {
        for (action, label) in set.map_or(&[][..], row_actions) {
            body.push_str(&action_form(csrf, &here, action, &[("id", id)], label));
        }
    }
    Ok(page(&d.base(), &format!("Job {id}"), Some(visitor), &body))
}

/// The payload as compact JSON, cut to 80 characters.
fn summary(payload: &Value) -> String {
    let text = payload.to_string();
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

fn epoch_ms(at: SystemTime) -> u128 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis()
}

/// `<ms>/<id>` as a cursor.
pub(super) fn parse_cursor(text: &str) -> Option<ListCursor> {
    let (ms, id) = text.split_once('/')?;
    Some(ListCursor {
        at: SystemTime::UNIX_EPOCH + Duration::from_millis(ms.parse().ok()?),
        id: id.to_string(),
    })
}
