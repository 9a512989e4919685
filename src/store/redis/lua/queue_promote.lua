#!lua flags=allow-oom
-- Model: QueueModel::promote (src/queue/model/mod.rs); tests/queue_model.rs checks the two agree.
-- Makes a waiting job due now, waking schedulers (the lock it waits for was handed to it), or
-- in ARGV[3] ms if that is sooner than its due time (the runner-up: should the first in line
-- never come, it takes over when that reservation runs out). A job due now goes ahead of
-- every group's turn (a handed key is held for it).
-- ARGV[2] job id, ARGV[3] ms from now.
-- Returns 1 when it was waiting (now due), 2 when it is in flight (its run is under way),
-- 0 when there is no such job waiting or running (cancelled, dead or done).
local id = ARGV[2]
local due = waits().waiting_due(id)
if due then
  local now = now_ms()
  local at = now + tonumber(ARGV[3])
  if at <= now and grouped() then
    waits().hand_now(id, now)
  elseif due > at then
    schedule(id, at)
  end
  return 1
end
if in_flight(id) then
  -- Its run may be on its way back to wait (it met the lock just before the handoff): mark
  -- it, so that it comes back due at once rather than at its fallback.
  redis.call('HSET', HANDED, id, 1)
  return 2
end
return 0
