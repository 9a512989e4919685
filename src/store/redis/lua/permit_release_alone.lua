#!lua flags=allow-oom
-- Model: PermitModel::release (src/semaphore/model.rs), nobody in line; tests/permit_model.rs checks the two agree.
-- Gives back a permit of a key nobody waits for, in the fewest calls: the common case. Only
-- the keys it touches, no permit prelude (see permit_acquire_free.lua).
-- KEYS[1] the permits, KEYS[2] their fencing tokens, KEYS[3] the line, KEYS[4] the first
-- permit (as named in permit_prelude.lua); ARGV[1] the holder (a writer's marked '!'). With a
-- hold to report, also KEYS[5] the key's last hold and ARGV[2] how long it held the permit in
-- whole ms.
-- Returns 1 when released, 0 when the permit ran out or was never taken, 2 when someone is in
-- line: permit_release.lua releases then, handing the free permits to the line.
local PERMITS, FENCES, WAITERS, FIRST = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local holder = ARGV[1]
local first = redis.call('GET', FIRST)
if first and string.match(first, '^[^|]*') == holder then
  -- The first permit is taken only while nobody waits, and marked when someone joins the line
  -- (LINE_MARK of permit_prelude.lua): unmarked, nobody waits for it.
  if string.sub(first, -2) == '|w' then
    return 2
  end
  redis.call('DEL', FIRST)
else
  if redis.call('EXISTS', WAITERS) == 1 then
    return 2
  end
  local deadline = redis.call('ZSCORE', PERMITS, holder)
  if not deadline then
    return 0
  end
  redis.call('ZREM', PERMITS, holder)
  redis.call('HDEL', FENCES, holder)
  -- A permit past its deadline was no longer ours, though nobody dropped it yet.
  local time = redis.call('TIME')
  if tonumber(deadline) <= tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) then
    return 0
  end
end
if KEYS[5] then
  -- IDLE_MS of fence.lua, which this script does not include (a test checks they agree).
  redis.call('SET', KEYS[5], ARGV[2], 'PX', 60000)
end
return 1
