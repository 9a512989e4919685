#!lua flags=allow-oom
-- Model: QueueModel::extend_lease (src/queue/model/mod.rs); tests/queue_model.rs checks the two agree.
-- Moves the deadline of a claimed job's lease to ARGV[5] ms (at most MAX_LEASE_MS) from now, if
-- that lease still holds the job. The lease is its claim's: the claim's other jobs keep it too.
-- ARGV[2] job id, ARGV[3] its claim's lease, ARGV[4] its position there, ARGV[5] lease ms.
-- Returns 1 when extended, 0 when the lease does not hold the job.
if not holds_at(redis.call('HGET', CLAIMS, ARGV[3] .. '@'), position(ARGV[4])) then
  return 0
end
redis.call('ZADD', INFLIGHT, 'XX', now_ms() + lease_ms(ARGV[5]), ARGV[3])
return 1
