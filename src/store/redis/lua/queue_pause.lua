#!lua flags=allow-oom
-- Model: QueueModel::pause (src/queue/model/operator.rs); tests/queue_model.rs checks the two agree.
-- Pauses (ARGV[2] '1') or resumes (ARGV[2] '0') a queue: a paused queue's claims hand out
-- nothing (queue_claim.lua checks PAUSED). Resuming wakes the sleeping schedulers.
-- Returns 1 when the queue was paused before the call, 0 when not.
local was = redis.call('EXISTS', PAUSED)
if ARGV[2] == '1' then
  redis.call('SET', PAUSED, '1')
else
  redis.call('DEL', PAUSED)
  if was == 1 then
    redis.call('PUBLISH', WAKE, now_ms())
  end
end
return was
