//! The lines of a set's keys, as a conflict strategy sees them: one [`Line`] that the set's
//! waiter joins and leaves as one.

use std::sync::Arc;

use super::LockSetStore;
use crate::guard::{Line, LineActions, LineCap, LineFuture, LineJoin, Waiter};
use crate::key::LockKey;

struct SetLine<St> {
    store: St,
    keys: Vec<LockKey>,
    /// The caller's place, when it waited in line before deferring: its job takes it.
    replacing: Option<Waiter>,
    /// The caller, as it waits in line (or would).
    caller: Waiter,
}

impl<St: LockSetStore> LineActions for SetLine<St> {
    fn join(&self, waiter: Waiter, cap: LineCap) -> LineFuture<LineJoin> {
        let (store, keys, replacing) = (self.store.clone(), self.keys.clone(), self.replacing.clone());
        Box::pin(async move {
            store
                .join_set_line(&keys, &waiter, replacing.as_ref(), Some(cap))
                .await
        })
    }

    fn ask_holders_to_stop(&self) -> LineFuture<()> {
        let (store, keys, caller) = (self.store.clone(), self.keys.clone(), self.caller.clone());
        Box::pin(async move {
            for key in &keys {
                store.request_stop(key, &caller).await?;
            }
            Ok(())
        })
    }
}

/// The lines of `keys` (a group of a set) in `store`, met by `caller`; a waiter that joins
/// takes the place of `replacing`, if in line.
pub(super) fn set_line_of<St: LockSetStore>(
    store: St,
    keys: Vec<LockKey>,
    replacing: Option<Waiter>,
    caller: Waiter,
) -> Line {
    Line::new(Arc::new(SetLine {
        store,
        keys,
        replacing,
        caller,
    }))
}
