#!lua flags=allow-oom
-- Model: RequestModel (src/idempotency/model.rs); tests/queue_model.rs checks the two agree.
-- A request id's record, beside the queue's jobs (the idempotency guard).
-- KEYS[19] REQUEST string: 'running <request token>' or 'finished' (0.4 wrote 'running'
-- alone), with its TTL; under the shard's hash tag.
-- ARGV[2] the id, ARGV[3] 'begin', 'extend' or 'end', ARGV[4] ms: how long a begun request is
-- held ('begin', and again from now: 'extend'), how long a finished one is kept ('end'; '0'
-- forgets it), ARGV[5] the request's token: a running record is its request's, renewed and
-- forgotten by it alone (a request whose hold lapsed finds another's record when it comes
-- back, and leaves it be).
-- Returns, for 'begin': '' when the id is new (now recorded running), else where it is:
-- 'waiting', 'in_flight', 'dead', 'done' (a job of that id), 'running', 'finished'; for
-- 'extend': 'running' when extended, '' when the record is no longer the request's running one.
local REQUEST = KEYS[19]
local id, mode, ms = ARGV[2], ARGV[3], tonumber(ARGV[4])
local mine = 'running ' .. ARGV[5]
if mode == 'end' then
  -- Finished is recorded whoever's record was there (the id ran to its end); forgotten only
  -- when the record is ours (or gone).
  if ms > 0 then
    redis.call('SET', REQUEST, 'finished', 'PX', ms)
  elseif redis.call('GET', REQUEST) == mine then
    redis.call('DEL', REQUEST)
  end
  return ''
end
if mode == 'extend' then
  if redis.call('GET', REQUEST) == mine then
    redis.call('PEXPIRE', REQUEST, math.max(1, ms))
    return 'running'
  end
  return ''
end
if in_flight(id) then
  return 'in_flight'
end
if waits().waiting_due(id) then
  return 'waiting'
end
-- Dead before done, as the model's `locate`: an id kept as done, pushed again and buried is in
-- both, and the dead job is its latest. (A table's `pairs` has no order: it answered 'done'.)
if redis.call('ZSCORE', DEAD, id) then
  return 'dead'
end
if redis.call('ZSCORE', DONE, id) then
  return 'done'
end
local recorded = redis.call('GET', REQUEST)
if recorded then
  -- What it is, without whose.
  return string.match(recorded, '^%S+')
end
redis.call('SET', REQUEST, mine, 'PX', math.max(1, ms))
return ''
