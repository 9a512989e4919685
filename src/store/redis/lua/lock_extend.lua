#!lua flags=allow-oom
-- Model: LockModel::extend (src/lock/model/mod.rs); tests/lock_model.rs checks the two agree.
-- Resets a lock's TTL if the caller still holds it.
-- ARGV[3] the holder's token, ARGV[4] the TTL in ms.
-- Returns 1 when extended, 0 when the lock is gone or another holder's.
if held_by(ARGV[3]) then
  return redis.call('PEXPIRE', LOCK, ARGV[4])
end
return 0
