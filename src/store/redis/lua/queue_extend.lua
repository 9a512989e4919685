-- Moves a claimed job's lease deadline to ARGV[3] ms from now, if the lease is still ours.
-- KEYS[1] inflight, KEYS[2] leases. ARGV[1] job id, ARGV[2] lease token, ARGV[3] lease ms.
-- Returns 1 when extended, 0 when the lease is not ours.
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[3]), ARGV[1])
return 1
