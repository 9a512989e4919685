#!lua flags=allow-oom
-- Model: LockModel::acquire (src/lock/model/mod.rs); tests/lock_model.rs checks the two agree.
-- The fenced acquire of a key the store has not seen with a raised fencing counter (its first
-- acquire in this process, most likely a new counter), in one call: SET NX PX unless the key's
-- line is not empty, and the next fencing token in the same step, raising a new counter to the
-- clock (fence.lua is before this). Only the three keys it touches and no lock prelude: the
-- fewer keys, arguments and definitions, the cheaper the call (about a fifth less than
-- lock_acquire.lua on a new key). A key whose line is not empty is not free for a newcomer,
-- even once a holder's TTL ran out: the first in line has it (lock_acquire.lua decides then).
-- KEYS[1] the lock, KEYS[2] its fencing counter, KEYS[3] its line; ARGV[1] the caller's token,
-- ARGV[2] the TTL in ms.
-- Returns the fencing token once taken, -1 when the key is held or others wait in line.
if redis.call('EXISTS', KEYS[3]) == 1 then
  return -1
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return -1
end
return next_fences(KEYS[2], 1)
