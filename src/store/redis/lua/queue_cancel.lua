-- Deletes a job that is waiting or dead. A job being handled cannot be cancelled.
-- KEYS[1] delayed, KEYS[2] inflight, KEYS[3] jobs, KEYS[4] dead, KEYS[5] errors, KEYS[6] expiries.
-- ARGV[1] job id.
-- Returns 1 when deleted, 0 when there is no such job, -1 when it is being handled.
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return -1
end
local removed = redis.call('ZREM', KEYS[1], ARGV[1]) + redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
return redis.call('HDEL', KEYS[3], ARGV[1]) + removed > 0 and 1 or 0
