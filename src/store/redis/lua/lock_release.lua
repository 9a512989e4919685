#!lua flags=allow-oom
-- Model: LockModel::release (src/lock/model/mod.rs); tests/lock_model.rs checks the two agree.
-- Releases a lock if the caller still holds it, handing the key to the first in line.
-- ARGV[3] the holder's token, ARGV[4] how long it held the lock in whole ms ('' unknown).
-- Returns {1, waiter the key was handed to ('' none), the next in line after it ('' none)}
-- when released, {0, '', ''} when the lock is gone or another holder's.
-- (Without a line, src/store/redis/lock.rs releases by lock_release_alone.lua or DELIFEQ.)
if not held_by(ARGV[3]) then
  return {0, '', ''}
end
if ARGV[4] ~= '' then
  -- The key's last hold, for the Retry-After of callers that meet the lock: one write, no read.
  redis.call('SET', HOLDS, ARGV[4], 'PX', IDLE_MS)
end
local reserved = hand_to_head(false)
if reserved == '' then
  return {1, '', ''}
end
return {1, reserved, redis.call('ZRANGE', WAITERS, 1, 1)[1] or ''}
