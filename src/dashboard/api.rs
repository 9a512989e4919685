//! The JSON API beside the pages: the same reads and actions, for scripts. Every call needs the
//! bearer token (or, for reads, a dashboard anyone may read); a signed-in browser's cookie is
//! not enough to act (it carries no CSRF field here), so a page of another site cannot act
//! through a visitor's session.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{Value, json};

use super::Dashboard;
use super::actions::run_action;
use super::attempts::{ClientAddress, bearer_guess};
use super::locks_page::LOCKS_SHOWN;
use super::pages::{Shared, parse_cursor};
use super::problem::{Problem, json as json_response};
use crate::queue::{JobId, JobSet, JobStatus, QueueStore, attempts_in};
use crate::store::ListLocks;

/// Lets a read through to those who may read; others get 401 in JSON.
pub(super) async fn readers_only<St: QueueStore + ListLocks + Sync>(
    State(d): State<Arc<Dashboard<St>>>,
    client: ClientAddress,
    request: Request,
    next: Next,
) -> Response {
    if let Some(limited) = bearer_guess(&d, request.headers(), &client) {
        return limited;
    }
    if !d.access.may_read(&d.access.visitor(request.headers())) {
        let refusal = if d.access.offers_bearer(request.headers()) {
            "the bearer token is wrong"
        } else {
            "the bearer token is needed (Authorization: Bearer <token>)"
        };
        return Problem::new(StatusCode::UNAUTHORIZED, refusal).json();
    }
    next.run(request).await
}

/// `GET /api/queues`: every registered queue with its counts; a registry member that is no
/// queue's name, with `unreadable` (why) in place of its counts.
pub(super) async fn queues<St: QueueStore + ListLocks + Sync>(State(d): Shared<St>) -> Response {
    let answer = async {
        let mut queues = Vec::new();
        for registered in d.store.registered().await.map_err(Problem::store)? {
            let (name, shards) = (&registered.name, registered.shards);
            // A member no queue of ours can have is listed as unreadable, beside the others.
            match d.queue(name, Some(shards)) {
                Ok(queue) => {
                    let stats = queue.stats().await.map_err(Problem::store)?;
                    queues.push(json!({ "name": name, "shards": shards, "stats": stats }));
                }
                Err(error) => {
                    let why = format!("not a queue name redefer writes: {error}");
                    queues.push(json!({ "name": name, "shards": shards, "unreadable": why }));
                }
            }
        }
        Ok::<_, Problem>(json!(queues))
    };
    respond(answer.await)
}

/// `GET /api/queues/{queue}`: its counts.
pub(super) async fn queue<St: QueueStore + ListLocks + Sync>(
    State(d): Shared<St>,
    Path(name): Path<String>,
) -> Response {
    respond(d.known_queue(&name).await.map(|(_, stats)| json!(stats)))
}

/// `GET /api/queues/{queue}/groups`: how many due jobs wait for their turn per group, the largest groups first
/// (a page of them), and how many groups wait.
pub(super) async fn groups<St: QueueStore + ListLocks + Sync>(
    State(d): Shared<St>,
    Path(name): Path<String>,
) -> Response {
    let answer = async {
        let (queue, _) = d.known_queue(&name).await?;
        let groups = queue.groups(d.options.page_size).await.map_err(Problem::store)?;
        let largest: Vec<Value> = groups
            .largest
            .iter()
            .map(|group| json!({ "group": group.group, "waiting": group.waiting }))
            .collect();
        Ok::<_, Problem>(json!({ "groups": groups.groups, "largest": largest }))
    };
    respond(answer.await)
}

#[derive(serde::Deserialize)]
pub(super) struct JobsQuery {
    set: Option<String>,
    /// `<ms since the epoch>/<id>`: the last entry of the previous page.
    after: Option<String>,
}

/// `GET /api/queues/{queue}/jobs?set=&after=`: a page of one set, oldest first.
pub(super) async fn jobs<St: QueueStore + ListLocks + Sync>(
    State(d): Shared<St>,
    Path(name): Path<String>,
    Query(query): Query<JobsQuery>,
) -> Response {
    let answer = async {
        let (queue, _) = d.known_queue(&name).await?;
        let set: JobSet = match query.set.as_deref() {
            None => JobSet::Waiting,
            Some(set) => set
                .parse()
                .map_err(|error: String| Problem::new(StatusCode::BAD_REQUEST, error))?,
        };
        let after = match query.after.as_deref() {
            None => None,
            Some(cursor) => Some(
                parse_cursor(cursor)
                    .ok_or_else(|| Problem::new(StatusCode::BAD_REQUEST, "after: <ms>/<id>"))?,
            ),
        };
        let entries = queue
            .list_after(set, after.as_ref(), d.options.page_size)
            .await
            .map_err(Problem::store)?;
        let jobs: Vec<Value> = entries
            .iter()
            .map(|entry| {
                let at = entry.at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                let mut job = json!({ "id": entry.id, set.time_label(): humantime::format_rfc3339_millis(entry.at).to_string(), "cursor": format!("{}/{}", at.as_millis(), entry.id) });
                match &entry.envelope {
                    Some(Ok(envelope)) => {
                        job["attempts"] = json!(attempts_in(set, envelope.attempt));
                        job["payload"] = envelope.payload.clone();
                    }
                    Some(Err(error)) => job["undecodable"] = json!(error),
                    None => job["undecodable"] = json!("no bytes"),
                }
                if let Some(reason) = &entry.reason {
                    job["reason"] = json!(reason);
                }
                job
            })
            .collect();
        Ok::<_, Problem>(json!(jobs))
    };
    respond(answer.await)
}

/// `GET /api/queues/{queue}/jobs/{id}`: one job, its status and envelope; 404 when unknown.
pub(super) async fn job<St: QueueStore + ListLocks + Sync>(
    State(d): Shared<St>,
    Path((name, id)): Path<(String, String)>,
) -> Response {
    let answer = async {
        let (queue, _) = d.known_queue(&name).await?;
        let id = JobId::new(id).map_err(|error| Problem::new(StatusCode::BAD_REQUEST, error.to_string()))?;
        let info = queue.job(&id).await.map_err(Problem::store)?;
        let status = JobStatus::of(info.as_ref());
        let Some(info) = info.filter(|_| status != JobStatus::Unknown) else {
            return Err(Problem::new(
                StatusCode::NOT_FOUND,
                format!("no job {id} in queue {name}"),
            ));
        };
        let envelope = match info.envelope {
            Some(Ok(envelope)) => json!(envelope),
            Some(Err(error)) => json!({ "undecodable": error }),
            None => Value::Null,
        };
        Ok::<_, Problem>(json!({ "id": id, "status": status, "envelope": envelope }))
    };
    respond(answer.await)
}

#[derive(serde::Deserialize)]
pub(super) struct LocksQuery {
    limit: Option<String>,
}

/// The header of a `GET /api/locks` answer that holds as many keys as its limit: there may be
/// more (the body stays the array it was).
const TRUNCATED: &str = "redefer-truncated";

/// `GET /api/locks?limit=N`: the guarded keys, up to `limit` (1 to 1,000, the default, as the
/// locks page); an answer cut by its limit says so in its `Redefer-Truncated: true` header.
pub(super) async fn locks<St: QueueStore + ListLocks + Sync>(
    State(d): Shared<St>,
    Query(query): Query<LocksQuery>,
) -> Response {
    let limit = match query.limit.as_deref().map(str::parse) {
        None => LOCKS_SHOWN,
        Some(Ok(limit @ 1..=LOCKS_SHOWN)) => limit,
        Some(_) => {
            let why = format!("limit: a number of keys from 1 to {LOCKS_SHOWN}");
            return Problem::new(StatusCode::BAD_REQUEST, why).json();
        }
    };
    let locks = match d.store.list_locks(limit).await {
        Ok(locks) => locks,
        Err(error) => return Problem::store(error).json(),
    };
    let mut response = json_response(StatusCode::OK, &json!(locks));
    if locks.len() >= limit {
        response
            .headers_mut()
            .insert(TRUNCATED, HeaderValue::from_static("true"));
    }
    response
}

#[derive(serde::Deserialize, Default)]
#[serde(expecting = "an object such as {\"id\": \"...\"} or {\"confirm\": \"yes\"}")]
struct ActionBody {
    id: Option<String>,
    confirm: Option<String>,
}

/// `POST /api/queues/{queue}/{action}` with `{ "id": ..., "confirm": "yes" }` (or no body):
/// the bearer token only; `{ "notice": ... }`.
pub(super) async fn act<St: QueueStore + ListLocks + Sync>(
    State(d): Shared<St>,
    Path((name, action)): Path<(String, String)>,
    client: ClientAddress,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(limited) = bearer_guess(&d, &headers, &client) {
        return limited;
    }
    // No CSRF field here: a session cookie alone is refused, the bearer token acts.
    if let Err(refusal) = d.access.may_act(&headers, None) {
        return Problem::new(StatusCode::FORBIDDEN, refusal).json();
    }
    let body: ActionBody = if body.is_empty() {
        ActionBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(body) => body,
            Err(error) => return Problem::new(StatusCode::BAD_REQUEST, format!("the body: {error}")).json(),
        }
    };
    let done = run_action(&d, &name, &action, body.id.as_deref(), body.confirm.as_deref()).await;
    respond(done.map(|(_, notice)| json!({ "notice": notice })))
}

fn respond(answer: Result<Value, Problem>) -> Response {
    match answer {
        Ok(answer) => json_response(StatusCode::OK, &answer),
        Err(problem) => problem.json(),
    }
}
