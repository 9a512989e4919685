#!lua flags=allow-oom
-- Model: QueueModel::requeue (src/queue/model/operator.rs); tests/queue_model.rs checks the two agree.
-- Moves dead jobs back to wait, due now by the server's clock, their bury reasons and lease
-- expiry counts dropped.
-- ARGV[2..] job ids (at most MAX_PAGE).
-- Returns how many were in the dead-letter set and moved.
local now = now_ms()
local moved = 0
for i = 2, math.min(#ARGV, 1 + MAX_PAGE) do
  local id = ARGV[i]
  if redis.call('ZREM', DEAD, id) == 1 then
    redis.call('HDEL', ERRORS, id)
    redis.call('HDEL', EXPIRIES, id)
    redis.call('ZADD', DELAYED, now, id)
    moved = moved + 1
  end
end
if moved > 0 then
  redis.call('PUBLISH', WAKE, now)
end
return moved
