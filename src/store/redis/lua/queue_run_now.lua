#!lua flags=allow-oom
-- Model: QueueModel::run_now (src/queue/model/operator.rs); tests/queue_model.rs checks the two agree.
-- Makes a waiting job due now by the server's clock (an operator's "run now").
-- ARGV[2] job id.
-- Returns 1 when the job was waiting and is due now, 0 when it is not waiting.
local id = ARGV[2]
local due = waits().waiting_due(id)
if not due then
  return 0
end
local now = now_ms()
if due > now then
  schedule(id, now)
end
return 1
