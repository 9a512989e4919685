#!lua flags=allow-oom
-- Model: PermitModel::extend (src/semaphore/model.rs); tests/permit_model.rs checks the two agree.
-- Resets the deadline of the caller's permit, if it still has one.
-- ARGV[3] the holder (its token; a writer's marked), ARGV[4] the TTL in ms.
-- Returns 1 when extended, 0 when the permit ran out (or was never taken).
local token, ttl = ARGV[3], tonumber(ARGV[4])
if first_holder() == token then
  -- The first permit: its key's TTL is its deadline (a key that ran out is gone).
  redis.call('PEXPIRE', FIRST, ttl)
  return 1
end
local now = now_ms()
local deadline = redis.call('ZSCORE', PERMITS, token)
if not deadline or tonumber(deadline) <= now then
  return 0
end
redis.call('ZADD', PERMITS, 'XX', now + ttl, token)
keep_alive(ttl)
return 1
