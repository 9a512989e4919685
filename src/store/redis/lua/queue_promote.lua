#!lua flags=allow-oom
-- Makes a waiting job due now, waking schedulers: the lock it waits for was handed to it.
-- ARGV[2] job id.
-- Returns 1 when it was waiting (now due), 2 when it is in flight (its run is under way),
-- 0 when there is no such job waiting or running (cancelled, dead or done).
local id = ARGV[2]
local due = redis.call('ZSCORE', DELAYED, id)
if due then
  local now = now_ms()
  if tonumber(due) > now then
    schedule(id, now)
  end
  return 1
end
if redis.call('ZSCORE', INFLIGHT, id) then
  return 2
end
return 0
