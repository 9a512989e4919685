//! A held key's line, as the lock's store keeps it: what a [`Line`] of a conflict does.

use std::sync::Arc;

use super::LockStore;
use crate::guard::{Line, LineActions, LineCap, LineFuture, LineJoin, Waiter};
use crate::key::LockKey;

struct StoreLine<St> {
    store: St,
    key: LockKey,
    /// The caller's place, when it waited in line before deferring: its job takes it.
    replacing: Option<Waiter>,
    /// The caller, as it waits in line (or would).
    caller: Waiter,
}

impl<St: LockStore> LineActions for StoreLine<St> {
    fn join(&self, waiter: Waiter, cap: LineCap) -> LineFuture<LineJoin> {
        let (store, key, replacing) = (self.store.clone(), self.key.clone(), self.replacing.clone());
        Box::pin(async move {
            store
                .join_line(&key, &waiter, replacing.as_ref(), store.holders(&key), Some(cap))
                .await
        })
    }

    fn ask_holders_to_stop(&self) -> LineFuture<()> {
        let (store, key, caller) = (self.store.clone(), self.key.clone(), self.caller.clone());
        Box::pin(async move { store.request_stop(&key, &caller).await })
    }
}

/// The line of `key` in `store`, met by `caller`; a waiter that joins takes the place of
/// `replacing`, if in line.
pub(crate) fn line_of<St: LockStore>(
    store: St,
    key: LockKey,
    replacing: Option<Waiter>,
    caller: Waiter,
) -> Line {
    Line::new(Arc::new(StoreLine {
        store,
        key,
        replacing,
        caller,
    }))
}
