#!lua flags=allow-oom
-- Releases a lock if the caller still holds it, handing the key to the first in line.
-- ARGV[3] the holder's token, ARGV[4] how long it held the lock in ms ('' unknown).
-- Returns {1, waiter the key was handed to ('' none), the next in line after it ('' none)}
-- when released, {0, '', ''} when the lock is gone or another holder's.
if redis.call('GET', LOCK) ~= ARGV[3] then
  return {0, '', ''}
end
local held = tonumber(ARGV[4])
if held then
  -- The typical hold, for the Retry-After of callers that meet the lock.
  local typical = tonumber(redis.call('GET', HOLDS))
  if typical then held = typical * 0.8 + held * 0.2 end
  redis.call('SET', HOLDS, math.floor(held), 'PX', 3600000)
end
local reserved = hand_to_head(false)
if reserved == '' then
  return {1, '', ''}
end
return {1, reserved, redis.call('ZRANGE', WAITERS, 1, 1)[1] or ''}
