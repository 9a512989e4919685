//! Acknowledges finished jobs in batches.
//!
//! Whatever finished while the previous batch was on its way goes into the next one: under load
//! an ack costs a share of one round trip and one script call; when jobs finish one at a time,
//! each is acknowledged at once, with no timer adding latency.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::queue::QueueStore;
use crate::queue::{Codec, DelayQueue, Lease};

/// The most acks one batch carries.
const MAX_BATCH: usize = 256;

struct Request {
    lease: Lease,
    /// Whether the job was deleted; the lease back when the batch failed, for a direct ack.
    reply: oneshot::Sender<Result<bool, Lease>>,
}

/// Sends acks to the batching task; clones share it. The task ends when every clone is gone.
#[derive(Clone)]
pub(super) struct Acker {
    requests: mpsc::UnboundedSender<Request>,
}

impl Acker {
    pub(super) fn start<T, St, Enc>(queue: DelayQueue<T, St, Enc>) -> (Acker, JoinHandle<()>)
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        St: QueueStore,
        Enc: Codec,
    {
        let (requests, mut incoming) = mpsc::unbounded_channel::<Request>();
        let task = tokio::spawn(async move {
            while let Some(first) = incoming.recv().await {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match incoming.try_recv() {
                        Ok(request) => batch.push(request),
                        Err(_) => break,
                    }
                }
                let leases: Vec<&Lease> = batch.iter().map(|request| &request.lease).collect();
                match queue.ack_many(&leases).await {
                    Ok(acked) => {
                        for (request, acked) in batch.into_iter().zip(acked) {
                            let _ = request.reply.send(Ok(acked));
                        }
                    }
                    Err(error) => {
                        tracing::debug!(%error, jobs = batch.len(), "batched ack failed; each job acks on its own");
                        for request in batch {
                            let _ = request.reply.send(Err(request.lease));
                        }
                    }
                }
            }
        });
        (Acker { requests }, task)
    }

    /// Acknowledges the job of `lease` in the next batch: whether it was deleted, or the lease
    /// back when the batch could not be sent (the caller then acks it directly).
    pub(super) async fn ack(&self, lease: Lease) -> Result<bool, Lease> {
        let (reply, answer) = oneshot::channel();
        if let Err(refused) = self.requests.send(Request { lease, reply }) {
            return Err(refused.0.lease);
        }
        // The task replies to every request it takes; it stops only once no sender is left.
        answer.await.unwrap_or(Ok(false))
    }
}
