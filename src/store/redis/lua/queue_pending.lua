#!lua
-- Model: QueueModel::push_pending (src/queue/model/pending.rs); tests/queue_model.rs checks the two agree.
-- Stores a job as its key's pending job on this shard, or joins the one that waits there.
-- KEYS[19] PENDING hash: a lock key (its encoded hash tag) -> its waiting job's record,
--          '<revision> <first> <arrived> <job id>': how many requests the job has carried, when
--          its first request was stored, when the request whose payload it carries arrived
--          (ms, server clock), and the job.
-- KEYS[20] PENDING_JOBS hash: job id -> its lock key's field in PENDING. Whatever ends a job's
--          wait (a claim, a cancel, a burial, a purge) forgets its record by it: a record lives
--          while its job waits, and no longer (forget_pending in queue_prelude.lua).
-- ARGV[2] job id, ARGV[3] envelope, ARGV[4] 'in' (ARGV[5] = delay ms) or 'at' (ARGV[5] =
-- epoch ms), ARGV[6] which request the job keeps ('latest' or 'first'), ARGV[7] the lock key's
-- field in PENDING. ARGV[8] a debounce period in ms ('' none) and ARGV[9] its longest wait in
-- ms: a payload replaced makes the job due a period from now, but no later than the longest
-- wait after its first request. ARGV[10] '1' to count the activity (a request that joins is
-- 'coalesced'), ARGV[11] how long ago the request arrived, in ms (a caller that waited in place
-- before deferring), ARGV[12] the job's group as GROUPS stores it ('' for none; a job joined
-- keeps its own).
-- Returns {status, job id, revision, due ms}: 0 the id asked for is no longer pending or is
-- taken (nothing written), 1 joined (replaced with 'latest', dropped with 'first'), 2 encode
-- the envelope for the returned job and push again (nothing written), 3 stored, 4 the job
-- carries a request that arrived later than this one (with 'latest': nothing written).
local PENDING, PENDING_JOBS = KEYS[19], KEYS[20]
local id, envelope, keep, field = ARGV[2], ARGV[3], ARGV[6], ARGV[7]
local now = now_ms()
local ago = tonumber(ARGV[11]) or 0
local arrived = now - ago

local function write_record(revision, first, job)
  redis.call('HSET', PENDING, field, string.format('%d %d %d %s', revision, first, arrived, job))
end

local found = redis.call('HGET', PENDING, field)
local revision, first, last_arrived, pending = 0, nil, nil, nil
if found then
  local r, f, a, job = string.match(found, '^(%d+) (%d+) (%d+) (.*)$')
  revision, first, last_arrived, pending = tonumber(r) or 0, tonumber(f), tonumber(a), job
end
if pending then
  local due = waits().waiting_due(pending)
  if due then
    if keep == 'first' then
      record(ARGV[10], now, {'coalesced', 1})
      return {1, pending, revision, due}
    end
    -- A request at its first conflict is ordered by its push, not by the clock, which may step
    -- back between two pushes (a host's time set back): it is the latest.
    if ago == 0 and last_arrived and last_arrived > arrived then
      arrived = last_arrived
    end
    if arrived < (last_arrived or arrived) then
      return {4, pending, revision, due}
    end
    if pending ~= id then
      return {2, pending, revision, due}
    end
    redis.call('HSET', JOBS, id, envelope)
    revision = revision + 1
    first = first or now
    write_record(revision, first, id)
    record(ARGV[10], now, {'coalesced', 1})
    if ARGV[8] ~= '' then
      due = math.min(now + tonumber(ARGV[8]), first + tonumber(ARGV[9]))
      schedule(id, due)
    end
    return {1, id, revision, due}
  end
  if pending == id then
    return {0, id, revision, 0}
  end
  -- A record whose job stopped waiting by a way that did not forget it: replaced below.
  redis.call('HDEL', PENDING_JOBS, pending)
end
if redis.call('HEXISTS', JOBS, id) == 1 then
  return {0, id, 0, 0}
end
local due = tonumber(ARGV[5])
if ARGV[4] == 'in' then
  due = now + due
end
redis.call('HSET', JOBS, id, envelope)
if ARGV[12] == '' or not waits().join_group({id}, ARGV[12], due, now) then
  schedule(id, due)
end
write_record(1, now, id)
redis.call('HSET', PENDING_JOBS, id, field)
return {3, id, 1, due}
