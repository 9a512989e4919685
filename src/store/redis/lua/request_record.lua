#!lua flags=allow-oom
-- Model: RequestModel (src/idempotency/model.rs); tests/queue_model.rs checks the two agree.
-- A request id's record, beside the queue's jobs (the idempotency guard).
-- KEYS[19] REQUEST string: 'running' or 'finished', with its TTL; under the shard's hash tag.
-- ARGV[2] the id, ARGV[3] 'begin', 'extend' or 'end', ARGV[4] ms: how long a begun request is
-- held ('begin', and again from now: 'extend'), how long a finished one is kept ('end'; '0'
-- forgets it).
-- Returns, for 'begin': '' when the id is new (now recorded running), else where it is:
-- 'waiting', 'in_flight', 'dead', 'done' (a job of that id), 'running', 'finished'; for
-- 'extend': 'running' when extended, '' when the record no longer says running.
local REQUEST = KEYS[19]
local id, mode, ms = ARGV[2], ARGV[3], tonumber(ARGV[4])
if mode == 'end' then
  if ms > 0 then
    redis.call('SET', REQUEST, 'finished', 'PX', ms)
  else
    redis.call('DEL', REQUEST)
  end
  return ''
end
if mode == 'extend' then
  if redis.call('GET', REQUEST) == 'running' then
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
for set, name in pairs({dead = DEAD, done = DONE}) do
  if redis.call('ZSCORE', name, id) then
    return set
  end
end
local recorded = redis.call('GET', REQUEST)
if recorded then
  return recorded
end
redis.call('SET', REQUEST, 'running', 'PX', math.max(1, ms))
return ''
