-- Puts a claimed job back to wait, due ARGV[4] ms from now by the server's clock, if the
-- claimer's lease is still the job's. Also used at shutdown with a delay of 0.
-- KEYS[1] delayed, KEYS[2] inflight, KEYS[3] jobs, KEYS[4] leases.
-- ARGV[1] job id, ARGV[2] lease token, ARGV[3] new envelope ('' keeps the stored one),
-- ARGV[4] delay ms, ARGV[5] wake channel.
-- Returns the due time in ms, or -1 when the lease is not ours.
if redis.call('HGET', KEYS[4], ARGV[1]) ~= ARGV[2] then
  return -1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = now + tonumber(ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
end
redis.call('ZADD', KEYS[1], due, ARGV[1])
if redis.call('ZRANGE', KEYS[1], 0, 0)[1] == ARGV[1] then
  redis.call('PUBLISH', ARGV[5], due)
end
return due
