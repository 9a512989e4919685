#!lua flags=no-writes
-- Model: QueueModel::stats (src/queue/model/operator.rs); tests/queue_model.rs checks the two agree.
-- Counts a queue's jobs by the server's clock.
-- Returns {waiting, due now, in flight, dead, finished and kept, 1 when paused else 0}.
local ready = redis.call('ZCARD', READY_DUE)
return {
  redis.call('ZCARD', DELAYED) + ready,
  redis.call('ZCOUNT', DELAYED, '-inf', now_ms()) + ready,
  (tonumber(redis.call('HGET', CLAIMS, 'held')) or 0) + redis.call('HLEN', LEASES),
  redis.call('ZCARD', DEAD),
  redis.call('ZCARD', DONE),
  redis.call('EXISTS', PAUSED),
}
