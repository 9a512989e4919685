-- Stores a new job and schedules it, by the server's clock.
-- KEYS[1] delayed (zset id -> due ms), KEYS[2] jobs (hash id -> envelope).
-- ARGV[1] job id, ARGV[2] envelope, ARGV[3] 'in' (ARGV[4] = delay ms) or 'at' (ARGV[4] = epoch ms),
-- ARGV[5] wake channel.
-- Returns {1, due ms} when stored, {0, 0} when the id is taken (nothing written).
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return {0, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = tonumber(ARGV[4])
if ARGV[3] == 'in' then
  due = now + due
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[1], due, ARGV[1])
-- Wake sleeping schedulers only when this job is now the first due: they sleep until the
-- previous first, which this one comes before.
if redis.call('ZRANGE', KEYS[1], 0, 0)[1] == ARGV[1] then
  redis.call('PUBLISH', ARGV[5], due)
end
return {1, due}
