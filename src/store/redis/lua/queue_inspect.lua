#!lua flags=no-writes
-- Reads one job: where it is, when, and its bytes.
-- ARGV[2] job id.
-- Returns {state, time ms, envelope, reason}: state 'delayed' (time = due), 'inflight'
-- (time = lease deadline), 'dead' (time = buried), 'done' (time = finished, kept by the
-- retention) or 'missing'; envelope and reason may be nil.
local id = ARGV[2]
local envelope = redis.call('HGET', JOBS, id)
local at = waits().waiting_due(id)
if at then return {'delayed', at, envelope, false} end
local holder = redis.call('HGET', LEASES, id)
if holder then
  at = redis.call('ZSCORE', INFLIGHT, lease_entry(id, holder))
  if at then return {'inflight', tonumber(at), envelope, false} end
end
at = redis.call('ZSCORE', DEAD, id)
if at then return {'dead', tonumber(at), envelope, redis.call('HGET', ERRORS, id)} end
at = redis.call('ZSCORE', DONE, id)
if at and not envelope then return {'done', tonumber(at), redis.call('HGET', FINISHED, id), false} end
return {'missing', 0, envelope, false}
