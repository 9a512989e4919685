-- Claims up to ARGV[1] due jobs for one claimer, atomically, by the server's clock.
-- KEYS[1] delayed, KEYS[2] inflight (zset id -> lease deadline ms), KEYS[3] jobs,
-- KEYS[4] leases (hash id -> lease token), KEYS[5] dead, KEYS[6] errors.
-- ARGV[1] most jobs to claim, ARGV[2] lease ms, ARGV[3] the claimer's lease token,
-- ARGV[4] largest envelope in bytes.
-- First makes jobs whose lease ran out (their claimer died) due again, then claims due jobs
-- in due order: each moves to inflight with this claimer's token, so no other claimer can
-- receive it until the lease runs out. Every range has a LIMIT: work per call is bounded.
-- A due entry that cannot be a job of ours (an id we never write, bytes missing or over the
-- limit, written by another client) goes to the dead-letter set with the reason instead.
-- Returns {ms until the next job is due or lease runs out (-1: none), {{id, due ms, envelope}, ...}}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max = tonumber(ARGV[1])
local max_bytes = tonumber(ARGV[4])

-- Strictly past the deadline: `now` is rounded down to the ms, so a deadline equal to it may
-- still be up to 1 ms ahead, and a lease must never end early.
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. now, 'WITHSCORES', 'LIMIT', 0, max)
for i = 1, #expired, 2 do
  redis.call('ZADD', KEYS[1], expired[i + 1], expired[i])
  redis.call('ZREM', KEYS[2], expired[i])
  redis.call('HDEL', KEYS[4], expired[i])
end

local function bury(id, reason)
  redis.call('ZADD', KEYS[5], now, id)
  redis.call('HSET', KEYS[6], id, reason)
end

local claimed = {}
local deadline = now + tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, max)
for i = 1, #due, 2 do
  local id = due[i]
  redis.call('ZREM', KEYS[1], id)
  local size = redis.call('HSTRLEN', KEYS[3], id)
  if #id > 128 or string.find(id, '[^%w_%.%-]') then
    bury(id, 'not a job id: up to 128 of A-Z a-z 0-9 _ . -')
  elseif size == 0 then
    bury(id, 'the job has no envelope (deleted or never written by redefer)')
  elseif size > max_bytes then
    bury(id, 'the envelope is ' .. size .. ' bytes, over the limit of ' .. max_bytes)
  else
    redis.call('ZADD', KEYS[2], deadline, id)
    redis.call('HSET', KEYS[4], id, ARGV[3])
    claimed[#claimed + 1] = {id, math.floor(tonumber(due[i + 1])), redis.call('HGET', KEYS[3], id)}
  end
end

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
