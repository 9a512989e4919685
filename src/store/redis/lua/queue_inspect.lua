-- Reads one job: where it is, when, and its bytes.
-- KEYS[1] delayed, KEYS[2] inflight, KEYS[3] jobs, KEYS[4] dead, KEYS[5] errors. ARGV[1] job id.
-- Returns {state, time ms, envelope, reason}: state 'delayed' (time = due), 'inflight'
-- (time = lease deadline), 'dead' (time = buried) or 'missing'; envelope and reason may be nil.
local id = ARGV[1]
local envelope = redis.call('HGET', KEYS[3], id)
local at = redis.call('ZSCORE', KEYS[1], id)
if at then return {'delayed', tonumber(at), envelope, false} end
at = redis.call('ZSCORE', KEYS[2], id)
if at then return {'inflight', tonumber(at), envelope, false} end
at = redis.call('ZSCORE', KEYS[4], id)
if at then return {'dead', tonumber(at), envelope, redis.call('HGET', KEYS[5], id)} end
return {'missing', 0, envelope, false}
