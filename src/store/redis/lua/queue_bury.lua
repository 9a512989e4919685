-- Moves a claimed job to the dead-letter set with its reason, if the claimer's lease is still
-- the job's. The job's bytes stay, so it can be inspected and requeued.
-- KEYS[1] inflight, KEYS[2] jobs, KEYS[3] leases, KEYS[4] dead (zset id -> buried ms),
-- KEYS[5] errors (hash id -> reason), KEYS[6] expiries.
-- ARGV[1] job id, ARGV[2] lease token, ARGV[3] reason, ARGV[4] new envelope ('' keeps it).
-- Returns 1 when buried, 0 when the lease is not ours.
if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
end
redis.call('ZADD', KEYS[4], now, ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[3])
redis.call('HDEL', KEYS[6], ARGV[1])
return 1
