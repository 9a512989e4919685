-- Moves dead jobs back to wait, due now by the server's clock, their bury reasons and lease
-- expiry counts dropped.
-- KEYS[1] dead, KEYS[2] errors, KEYS[3] delayed, KEYS[4] expiries.
-- ARGV[1] wake channel, ARGV[2..] job ids (bounded by the caller).
-- Returns how many were in the dead-letter set and moved.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local moved = 0
for i = 2, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    redis.call('HDEL', KEYS[2], ARGV[i])
    redis.call('HDEL', KEYS[4], ARGV[i])
    redis.call('ZADD', KEYS[3], now, ARGV[i])
    moved = moved + 1
  end
end
if moved > 0 then
  redis.call('PUBLISH', ARGV[1], now)
end
return moved
