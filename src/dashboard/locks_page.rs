//! The locks page: every guarded key the store lists, as `redefer locks` shows them.

use std::fmt::Write;

use axum::Extension;
use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};

use super::access::Visitor;
use super::html::{escape, page};
use super::pages::Shared;
use crate::queue::QueueStore;
use crate::store::ListLocks;

/// How many guarded keys the locks page and `GET /api/locks` list at most; each says so when
/// it may have left some out.
pub(super) const LOCKS_SHOWN: usize = 1_000;

/// The held locks, semaphores and read-write locks: key, remaining TTL, fence, holders / limit
/// (or the writer), line (and the writers in it); and the
/// throttled keys: their next free slot and the slots booked ahead.
pub(super) async fn locks<St: QueueStore + ListLocks + Sync>(
    State(d): Shared<St>,
    Extension(visitor): Extension<Visitor>,
) -> Response {
    let locks = match d.store.list_locks(LOCKS_SHOWN).await {
        Ok(locks) => locks,
        Err(error) => return d.store_failed(error),
    };
    let mut body = String::from(
        "<table id=locks><tr><th>key</th><th class=num>remaining</th><th class=num>fence</th>\
         <th class=num>held / limit</th><th class=num>waiters / booked</th><th class=num>next slot</th>\
         <th>reserved for</th></tr>",
    );
    for lock in &locks {
        let (held, next_slot) = match (lock.next_slot, lock.closed_for) {
            // Closed by its handler (an upstream's "retry after"): `redefer reopen` opens it.
            (Some(opens_in), Some(closed)) => (
                "throttle".to_string(),
                format!(
                    "closed for {} ms, in {} ms",
                    closed.as_millis(),
                    opens_in.as_millis()
                ),
            ),
            (Some(opens_in), None) if opens_in.is_zero() => ("throttle".to_string(), "open".to_string()),
            (Some(opens_in), None) => ("throttle".to_string(), format!("in {} ms", opens_in.as_millis())),
            (None, _) if lock.writing => ("1 writer".to_string(), String::new()),
            (None, _) => match lock.limit {
                Some(limit) => (format!("{} / {limit}", lock.holders), String::new()),
                // A read-write lock without a limit of readers.
                None => (format!("{} / no limit", lock.holders), String::new()),
            },
        };
        let waiters = match lock.writers_waiting {
            0 => lock.waiters.to_string(),
            writers => format!("{} ({writers} to write)", lock.waiters),
        };
        // A key with a value no redefer process writes: listed with what could be read.
        let unreadable = lock.unreadable.as_deref().map_or(String::new(), |why| {
            format!(" <span class=bad>unreadable: {}</span>", escape(why))
        });
        let _ = write!(
            body,
            "<tr><td><code>{}</code>{unreadable}</td><td class=num>{}</td><td class=num>{}</td><td class=num>{held}</td>\
             <td class=num>{waiters}</td><td class=num>{next_slot}</td><td>{}</td></tr>",
            escape(&lock.key),
            lock.remaining
                .map_or("no TTL".into(), |left| format!("{} ms", left.as_millis())),
            lock.fence,
            escape(lock.reserved_for.as_deref().unwrap_or("")),
        );
    }
    body.push_str("</table>");
    if locks.is_empty() {
        body.push_str("<p>No lock is held.</p>");
    } else if locks.len() >= LOCKS_SHOWN {
        let _ = write!(
            body,
            "<p>The first {LOCKS_SHOWN} keys found: there may be more (<code>redefer locks --limit N</code> lists more).</p>"
        );
    }
    Html(page(&d.base(), "Locks", Some(&visitor), &body)).into_response()
}
