#!lua flags=allow-oom
-- Model: PermitModel::acquire (src/semaphore/model.rs), a free key; tests/permit_model.rs checks the two agree.
-- Takes a permit of a key nobody waits for, in the fewest calls: the common case when the
-- plain commands (src/semaphore/redis_store.rs) found the first permit taken. Only the keys it
-- touches and no permit prelude (fence.lua is before this): a script's call costs Redis per
-- key, argument and `redis.call`, and the full acquire (permit_acquire.lua) makes about twenty
-- calls over eight keys. Whatever only contention needs (pruning permits that ran out, the
-- line, reservations, a re-sent acquire's reply) is left to the full script: this one answers
-- -1 and the full one decides.
-- KEYS[1] the permits, KEYS[2] their fencing tokens, KEYS[3] the fencing counter, KEYS[4] the
-- line, KEYS[5] the limit, KEYS[6] the first permit (as named in permit_prelude.lua).
-- ARGV[1] the holder (a writer's marked '!'), ARGV[2] the TTL in ms, ARGV[3] the limit.
-- Returns the fencing token once taken; -1 when someone waits in line, the key is full (its
-- permits may have run out: the full script prunes them), a writer stands in the way, or the
-- permit is the caller's already.
local PERMITS, FENCES, FENCE, WAITERS, LIMIT, FIRST = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local holder, ttl, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('EXISTS', WAITERS) == 1 then
  return -1
end
local first = redis.call('GET', FIRST)
first = first and string.match(first, '^[^|]*')
local entries = redis.call('ZCARD', PERMITS)
if not first and entries == 0 then
  -- Free after all (its first permit was given back since): the first permit, one key.
  if not redis.call('SET', FIRST, holder .. '|' .. ARGV[3], 'NX', 'PX', ttl) then
    return -1
  end
  return next_fences(FENCE, 1)
end
-- A writer holds alone and takes only a free key; nobody joins a writer's first permit.
if first == holder or string.sub(holder, 1, 1) == '!' or (first and string.sub(first, 1, 1) == '!') then
  return -1
end
if entries + (first and 1 or 0) >= limit then
  return -1
end
-- Beside one entry: it may be a writer's (or a reservation the full script knows).
if entries == 1 then
  local only = string.sub(redis.call('ZRANGE', PERMITS, 0, 0)[1], 1, 1)
  if only == '!' or only == '@' then
    return -1
  end
end
local now = math.floor(now_us() / 1000)
if redis.call('ZADD', PERMITS, 'NX', now + ttl, holder) == 0 then
  -- Ours already: a re-sent acquire whose first reply was lost. The full script answers with
  -- the permit's fence and deadline, as when the key is full.
  return -1
end
local fence = next_fences(FENCE, 1)
redis.call('HSET', FENCES, holder, fence)
redis.call('SET', LIMIT, limit, 'PX', ttl)
-- The keys live as long as their last deadline: ours alone in the set, else the longest.
for _, key in ipairs({PERMITS, FENCES}) do
  if entries == 0 or redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
return fence
