-- Counts a queue's jobs by the server's clock.
-- KEYS[1] delayed, KEYS[2] inflight, KEYS[3] dead.
-- Returns {waiting, due now, in flight, dead}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {
  redis.call('ZCARD', KEYS[1]),
  redis.call('ZCOUNT', KEYS[1], '-inf', now),
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
}
