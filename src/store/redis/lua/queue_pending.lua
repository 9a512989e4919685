#!lua
-- Stores a job as its key's pending job on this shard, or joins the one that waits there.
-- KEYS[15] PENDING hash, under the shard's hash tag (its name ends with the lock key):
--          'job' -> the key's pending job id, 'revision' -> how many requests it has carried,
--          'first' -> when its first request was stored, 'arrived' -> when the request whose
--          payload it carries arrived (ms, server clock).
-- ARGV[2] job id, ARGV[3] envelope, ARGV[4] 'in' (ARGV[5] = delay ms) or 'at' (ARGV[5] =
-- epoch ms), ARGV[6] which request the job keeps ('latest' or 'first'), ARGV[7] how long the
-- record lives after this push, in ms (the longest the job may wait), ARGV[8] a debounce
-- period in ms ('' none) and ARGV[9] its longest wait in ms: a payload replaced makes the job
-- due a period from now, but no later than the longest wait after its first request.
-- ARGV[10] '1' to count the activity (a request that joins is 'coalesced'), ARGV[11] how long
-- ago the request arrived, in ms (a caller that waited in place before deferring).
-- Returns {status, job id, revision, due ms}: 0 the id asked for is no longer pending or is
-- taken (nothing written), 1 joined (replaced with 'latest', dropped with 'first'), 2 encode
-- the envelope for the returned job and push again (nothing written), 3 stored, 4 the job
-- carries a request that arrived later than this one (with 'latest': nothing written).
local PENDING = KEYS[15]
local id, envelope, keep, hold = ARGV[2], ARGV[3], ARGV[6], ARGV[7]
local now = now_ms()
local arrived = now - (tonumber(ARGV[11]) or 0)
local found = redis.call('HMGET', PENDING, 'job', 'revision', 'first', 'arrived')
local pending, revision = found[1], tonumber(found[2]) or 0
if pending then
  -- Pending while it waits: a claim ends that (it runs; a request now is a new job).
  local due = redis.call('ZSCORE', DELAYED, pending)
  if due then
    due = tonumber(due)
    if keep == 'first' then
      record(ARGV[10], now, {'coalesced', 1})
      return {1, pending, revision, due}
    end
    if arrived < (tonumber(found[4]) or arrived) then
      return {4, pending, revision, due}
    end
    if pending ~= id then
      return {2, pending, revision, due}
    end
    redis.call('HSET', JOBS, id, envelope)
    revision = revision + 1
    redis.call('HSET', PENDING, 'revision', revision, 'arrived', arrived)
    redis.call('PEXPIRE', PENDING, hold)
    record(ARGV[10], now, {'coalesced', 1})
    if ARGV[8] ~= '' then
      local first = tonumber(found[3]) or now
      due = math.min(now + tonumber(ARGV[8]), first + tonumber(ARGV[9]))
      schedule(id, due)
    end
    return {1, id, revision, due}
  end
  if pending == id then
    return {0, id, revision, 0}
  end
end
if redis.call('HEXISTS', JOBS, id) == 1 then
  return {0, id, 0, 0}
end
local due = tonumber(ARGV[5])
if ARGV[4] == 'in' then
  due = now + due
end
redis.call('HSET', JOBS, id, envelope)
schedule(id, due)
redis.call('HSET', PENDING, 'job', id, 'revision', 1, 'first', now, 'arrived', arrived)
redis.call('PEXPIRE', PENDING, hold)
return {3, id, 1, due}
