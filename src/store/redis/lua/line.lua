-- Model: Waiters (src/lock/model/waiters.rs); tests/lock_model.rs checks the two agree.
-- A key's line (WAITERS: waiter -> arrival order), the same for the lock and the permits: it
-- follows its family's prelude in each of their scripts (src/store/redis/scripts.rs), which
-- names WAITERS.

-- How many are in line before `waiter` (all of them, when it is not in line).
local function ahead_of(waiter)
  local rank = waiter ~= '' and redis.call('ZRANK', WAITERS, waiter)
  if rank then return rank end
  return redis.call('ZCARD', WAITERS)
end

-- The script itself follows.
