#!lua flags=allow-oom
-- Makes a waiting job due now by the server's clock (an operator's "run now").
-- ARGV[2] job id.
-- Returns 1 when the job was waiting and is due now, 0 when it is not waiting.
local id = ARGV[2]
if not redis.call('ZSCORE', DELAYED, id) then
  return 0
end
local now = now_ms()
if tonumber(redis.call('ZSCORE', DELAYED, id)) > now then
  schedule(id, now)
end
return 1
