//! What a job stores: its payload with the facts the scheduler keeps about it.

use serde::{Deserialize, Serialize};

use super::JobId;
use crate::trace_context::TraceContext;

/// A job as stored: the payload plus what the scheduler tracks across attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Envelope<T> {
    /// The job's id, also its key in the queue.
    pub id: JobId,
    /// How many attempts failed before (0 on the first delivery).
    pub attempt: u32,
    /// When the job was first pushed, in ms since the Unix epoch (the pushing host's clock;
    /// for information only: due times come from the store's clock).
    pub enqueued_at_ms: u64,
    /// Why the previous attempt failed, if one did. Absent when none did: serde reads a missing
    /// `Option` as `None` (0.4's readers too), and a first attempt's envelope is 18 bytes
    /// shorter to store and to read (a drained job's decoding cost 9% less).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// How many times the job came back to find its key held (or its slot not open) and went
    /// back to wait (see [`RetryPolicy::max_lock_waits`](super::RetryPolicy::max_lock_waits)).
    /// Absent (0) until the job first waits: envelopes keep their size, and readers of
    /// envelopes stored before it was counted read 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lock_waits: u32,
    /// The trace context of the request that stored the job, which its runs continue (see
    /// [`trace_context`](crate::trace_context)). Absent when the push was not traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
    /// The job's payload: for a deferred request, the request.
    pub payload: T,
}

impl<T> Envelope<T> {
    /// A first-attempt envelope for `payload`.
    pub fn new(id: JobId, payload: T) -> Self {
        let enqueued_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX));
        Envelope {
            id,
            attempt: 0,
            enqueued_at_ms,
            last_error: None,
            lock_waits: 0,
            trace: None,
            payload,
        }
    }
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_attempt_is_stored_without_a_last_error_and_read_either_way() {
        let envelope = Envelope::new(JobId::new("job-1").unwrap(), 7_u64);
        let stored = serde_json::to_string(&envelope).unwrap();
        assert!(!stored.contains("last_error"), "{stored}");
        assert_eq!(serde_json::from_str::<Envelope<u64>>(&stored).unwrap(), envelope);
        // As 0.4 wrote it, and as a failed attempt's envelope still is.
        let as_before = r#"{"id":"job-1","attempt":0,"enqueued_at_ms":5,"last_error":null,"payload":7}"#;
        assert_eq!(
            serde_json::from_str::<Envelope<u64>>(as_before)
                .unwrap()
                .last_error,
            None
        );
        let failed = Envelope {
            last_error: Some("timed out".to_string()),
            ..envelope
        };
        let stored = serde_json::to_string(&failed).unwrap();
        assert_eq!(serde_json::from_str::<Envelope<u64>>(&stored).unwrap(), failed);
    }
}
