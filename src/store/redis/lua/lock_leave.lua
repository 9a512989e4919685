#!lua flags=allow-oom
-- Model: LockModel::leave (src/lock/model/mod.rs); tests/lock_model.rs checks the two agree.
-- Takes a waiter out of the key's line (it gave up, or its job is gone); if the key was
-- reserved for it, hands it to the next in line.
-- ARGV[3] the waiter.
-- Returns the waiter the key was handed to ('' none).
local waiter = ARGV[3]
redis.call('ZREM', WAITERS, waiter)
if redis.call('GET', LOCK) == '@' .. waiter then
  local reserved = hand_to_head(false)
  return reserved
end
return ''
