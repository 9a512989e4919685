-- Claims up to ARGV[1] due jobs for one claimer, atomically, by the server's clock.
-- KEYS[1] delayed, KEYS[2] inflight (zset id -> lease deadline ms), KEYS[3] jobs,
-- KEYS[4] leases (hash id -> lease token), KEYS[5] dead, KEYS[6] errors,
-- KEYS[7] expiries (hash id -> how many of its leases ran out).
-- ARGV[1] most jobs to claim, ARGV[2] lease ms, ARGV[3] the claimer's lease token,
-- ARGV[4] largest envelope in bytes, ARGV[5] lease expiries after which a job is buried (0: never).
-- First makes jobs whose lease ran out (their claimer died) due again, then claims due jobs
-- in due order: each moves to inflight with this claimer's token, so no other claimer can
-- receive it until the lease runs out. Every range has a LIMIT: work per call is bounded.
-- A due entry that cannot be a job of ours (an id we never write, bytes missing or over the
-- limit, written by another client) goes to the dead-letter set with the reason instead.
-- Writes go out as one call per batch, not per job: each redis.call has a fixed cost.
-- Returns {ms until the next job is due or lease runs out (-1: none), {{id, due ms, envelope}, ...}}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max = tonumber(ARGV[1])
local max_bytes = tonumber(ARGV[4])

-- Calls `command key ...` with `args` in chunks, within Lua's limit on unpacked values.
local function batched(command, key, args)
  for first = 1, #args, 1000 do
    redis.call(command, key, unpack(args, first, math.min(first + 999, #args)))
  end
end

-- Jobs to bury, written in one go at the end: {now, id, ...} for dead, {id, reason, ...} for errors.
local dead, errors = {}, {}
local function bury(id, reason)
  dead[#dead + 1] = now
  dead[#dead + 1] = id
  errors[#errors + 1] = id
  errors[#errors + 1] = reason
end

-- Strictly past the deadline: `now` is rounded down to the ms, so a deadline equal to it may
-- still be up to 1 ms ahead, and a lease must never end early.
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. now, 'WITHSCORES', 'LIMIT', 0, max)
local max_expiries = tonumber(ARGV[5])
if #expired > 0 then
  local back, ids = {}, {}
  for i = 1, #expired, 2 do
    local id = expired[i]
    ids[#ids + 1] = id
    -- A job whose lease keeps running out crashes or hangs its handler each time: without a
    -- count it would come back forever and never reach the dead-letter set.
    local expiries = redis.call('HINCRBY', KEYS[7], id, 1)
    if max_expiries > 0 and expiries >= max_expiries then
      bury(id, 'its lease ran out ' .. expiries .. ' times: the handler crashed or hung')
    else
      back[#back + 1] = expired[i + 1]
      back[#back + 1] = id
    end
  end
  batched('ZADD', KEYS[1], back)
  batched('ZREM', KEYS[2], ids)
  batched('HDEL', KEYS[4], ids)
end

local claimed = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, max)
if #due > 0 then
  local ids = {}
  for i = 1, #due, 2 do
    ids[#ids + 1] = due[i]
  end
  batched('ZREM', KEYS[1], ids)
  local envelopes = {}
  for first = 1, #ids, 1000 do
    local part = redis.call('HMGET', KEYS[3], unpack(ids, first, math.min(first + 999, #ids)))
    for _, envelope in ipairs(part) do envelopes[#envelopes + 1] = envelope end
  end
  local deadline = now + tonumber(ARGV[2])
  local inflight, leases = {}, {}
  for i, id in ipairs(ids) do
    local envelope = envelopes[i]
    local reason = nil
    if #id > 128 or string.find(id, '[^%w_%.%-]') then
      reason = 'not a job id: up to 128 of A-Z a-z 0-9 _ . -'
    elseif not envelope or #envelope == 0 then
      reason = 'the job has no envelope (deleted or never written by redefer)'
    elseif #envelope > max_bytes then
      reason = 'the envelope is ' .. #envelope .. ' bytes, over the limit of ' .. max_bytes
    end
    if reason then
      bury(id, reason)
    else
      inflight[#inflight + 1] = deadline
      inflight[#inflight + 1] = id
      leases[#leases + 1] = id
      leases[#leases + 1] = ARGV[3]
      claimed[#claimed + 1] = {id, math.floor(tonumber(due[2 * i])), envelope}
    end
  end
  batched('ZADD', KEYS[2], inflight)
  batched('HSET', KEYS[4], leases)
end
batched('ZADD', KEYS[5], dead)
batched('HSET', KEYS[6], errors)

local wait = -1
local next_at = nil
local first_due = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first_due[2] then next_at = tonumber(first_due[2]) end
local first_lease = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if first_lease[2] and (next_at == nil or tonumber(first_lease[2]) + 1 < next_at) then
  next_at = tonumber(first_lease[2]) + 1
end
if next_at ~= nil then
  wait = math.max(0, math.floor(next_at - now))
end
return {wait, claimed}
