#!lua flags=allow-oom
-- Model: LockModel::release (src/lock/model/mod.rs); tests/lock_model.rs checks the two agree.
-- Releases a lock nobody waits for, in the fewest calls: the common case. Takes only the keys
-- it touches (the fewer keys and arguments, the cheaper the call), not the lock prelude.
-- KEYS[1] the lock, ARGV[1] the holder's token; with a hold to report (one release in a few),
-- also KEYS[2] the key's last hold and ARGV[2] how long it held the lock in whole ms. Without
-- one, it is called with the first key and argument only: each key and argument costs the
-- call about a tenth of a microsecond, and most releases have no hold to report.
-- Returns 1 when released, 0 when the lock is gone or another holder's, 2 when someone is in
-- line (the value carries the line mark of lock_prelude.lua): lock_release.lua hands it over.
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] then
  if current == ARGV[1] .. '|w' then
    return 2
  end
  return 0
end
redis.call('DEL', KEYS[1])
if KEYS[2] then
  -- IDLE_MS of fence.lua, which this script does not include (a test checks they agree).
  redis.call('SET', KEYS[2], ARGV[2], 'PX', 60000)
end
return 1
