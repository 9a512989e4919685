#!lua flags=no-writes
-- Model: QueueModel::inspect (src/queue/model/operator.rs); tests/queue_model.rs checks the two agree.
-- Reads one job: where it is, when, and its bytes.
-- ARGV[2] job id.
-- Returns {state, time ms, envelope, reason}: state 'delayed' (time = due), 'inflight'
-- (time = lease deadline), 'dead' (time = buried), 'done' (time = finished, kept by the
-- retention) or 'missing'; envelope and reason may be nil.
local id = ARGV[2]

-- The deadline of the lease that holds in-flight job `id`, or nil: its holder's entry when a
-- 0.3 scheduler claimed it, else the claim lease whose record lists and holds it, looked for
-- in deadline order in at most 16 pages of MAX_PAGE leases (no job has an entry of its own).
local function lease_deadline()
  local holder = redis.call('HGET', LEASES, id)
  if holder then
    local entry = string.find(holder, ':', 1, true) and holder or id
    return tonumber(redis.call('ZSCORE', INFLIGHT, entry))
  end
  for page = 0, 15 do
    local part = redis.call('ZRANGE', INFLIGHT, page * MAX_PAGE, (page + 1) * MAX_PAGE - 1, 'WITHSCORES')
    for i = 1, #part, 2 do
      -- A search of the packed list's bytes first: unpacking every claim's list costs more.
      local packed = redis.call('HGET', CLAIMS, part[i])
      if packed and string.find(packed, id, 1, true) then
        local held = held_jobs(part[i], false)
        for _, job in ipairs(held) do
          if job == id then
            return tonumber(part[i + 1])
          end
        end
      end
    end
    if #part < 2 * MAX_PAGE then
      return nil
    end
  end
  return nil
end

local envelope = redis.call('HGET', JOBS, id)
local at = waits().waiting_due(id)
if at then return {'delayed', at, envelope, false} end
if in_flight(id) then
  at = lease_deadline()
  if at then return {'inflight', at, envelope, false} end
end
at = redis.call('ZSCORE', DEAD, id)
if at then return {'dead', tonumber(at), envelope, redis.call('HGET', ERRORS, id)} end
at = redis.call('ZSCORE', DONE, id)
if at and not envelope then return {'done', tonumber(at), redis.call('HGET', FINISHED, id), false} end
return {'missing', 0, envelope, false}
