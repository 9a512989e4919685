#!lua flags=allow-oom
-- Model: PermitModel::release (src/semaphore/model.rs); tests/permit_model.rs checks the two agree.
-- Gives the caller's permit back, reserving the free permits for the first in line.
-- ARGV[3] the holder (its token; a writer's marked), ARGV[4] how long it held the permit in
-- whole ms ('' unknown), ARGV[5] the limit.
-- Returns {1 when released (0: the permit ran out or was never taken), the waiters permits
-- were reserved for, the waiters dropped for a reservation that ran out}.
local token, held_ms, limit = ARGV[3], ARGV[4], tonumber(ARGV[5])
local now = now_ms()
local released = 0
if first_holder() == token then
  -- The first permit: alive while its key is.
  redis.call('DEL', FIRST)
  released = 1
else
  local deadline = tonumber(redis.call('ZSCORE', PERMITS, token))
  if deadline then
    redis.call('ZREM', PERMITS, token)
    redis.call('HDEL', FENCES, token)
    -- A permit past its deadline was no longer ours, though nobody dropped it yet.
    if deadline > now then
      released = 1
    end
  end
end
if released == 1 and held_ms ~= '' then
  redis.call('SET', HOLDS, held_ms, 'PX', IDLE_MS)
end
-- Nobody waits: nothing to hand over (the next acquire drops what ran out). The common case,
-- in the fewest calls.
if redis.call('EXISTS', WAITERS) == 0 then
  return {released, {}, {}}
end
local dropped = prune(now)
-- Even when ours had run out: the permit it left, or others, may be free for the line.
return {released, hand_to_line(now, limit), dropped}
