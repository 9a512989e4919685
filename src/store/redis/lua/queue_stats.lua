#!lua flags=no-writes
-- Counts a queue's jobs by the server's clock.
-- Returns {waiting, due now, in flight, dead, finished and kept, 1 when paused else 0}.
return {
  redis.call('ZCARD', DELAYED),
  redis.call('ZCOUNT', DELAYED, '-inf', now_ms()),
  redis.call('HLEN', LEASES),
  redis.call('ZCARD', DEAD),
  redis.call('ZCARD', DONE),
  redis.call('EXISTS', PAUSED),
}
