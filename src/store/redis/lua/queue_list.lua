#!lua flags=no-writes
-- Model: QueueModel::list (src/queue/model/operator.rs); tests/queue_model.rs checks the two agree.
-- Reads a page of one of a queue's sets in time order (ties by id), with the jobs' bytes and
-- bury reasons, from just after a cursor: the time and id of the previous page's last entry.
-- ARGV[2] the set ('delayed', 'inflight', 'dead' or 'done'), ARGV[3] the cursor's time ms and
-- ARGV[4] its id ('' for the first page), ARGV[5] most entries (at most MAX_PAGE).
-- The page starts at the cursor's rank while its entry is still there; once it moved, at the
-- first entry of the cursor's time not after its id. Both cost O(log n), whatever the page.
-- Returns {{id, time ms, envelope or nil, reason or nil}, ...}.
local set = SETS[ARGV[2]]
if not set then
  return redis.error_reply('no such set: ' .. ARGV[2])
end
local after_ms, after_id = tonumber(ARGV[3]), ARGV[4]
local count = math.min(tonumber(ARGV[5]), MAX_PAGE)
if count < 1 then
  return {}
end

-- In flight: the page is made of the jobs the leases hold, in deadline order and by id, the
-- leases read in deadline order until the page is full and the next lease's deadline is later.
-- At most 16 reads of `count` leases.
local function in_flight_page()
  local min = after_id == '' and '-inf' or after_ms
  local found, offset, full_at = {}, 0, nil
  for _ = 1, 16 do
    local part = redis.call('ZRANGEBYSCORE', INFLIGHT, min, '+inf', 'WITHSCORES', 'LIMIT', offset, count)
    offset = offset + count
    for i = 1, #part, 2 do
      local at = tonumber(part[i + 1])
      if full_at and at > full_at then
        return found
      end
      local held = held_jobs(part[i], false)
      for _, id in ipairs(held) do
        if after_id == '' or at > after_ms or id > after_id then
          found[#found + 1] = {id, at}
        end
      end
      if not full_at and #found >= count then
        full_at = at
      end
    end
    if #part < 2 * count then
      break
    end
  end
  return found
end

if set == INFLIGHT then
  local found = in_flight_page()
  table.sort(found, function(a, b)
    return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1])
  end)
  local page = {}
  local ids = {}
  for i = 1, math.min(#found, count) do
    ids[i] = found[i][1]
  end
  if #ids == 0 then
    return {}
  end
  local envelopes = redis.call('HMGET', JOBS, unpack(ids))
  for i, id in ipairs(ids) do
    page[i] = {id, math.floor(found[i][2]), envelopes[i], false}
  end
  return page
end

-- The first `count` entries of sorted set `set` after the cursor: {id, time, id, time, ...}.
local function page_of(set)
  local first = 0
  local skip_ties = false
  if after_id ~= '' then
    local score = redis.call('ZSCORE', set, after_id)
    if score and tonumber(score) == after_ms then
      first = redis.call('ZRANK', set, after_id) + 1
    else
      first = redis.call('ZCOUNT', set, '-inf', '(' .. after_ms)
      skip_ties = true
    end
  end
  -- Entries at the cursor's time up to its id were on the previous page: fetch enough to pass
  -- them, in pages of `count`, a bounded number of times.
  local entries = {}
  for _ = 1, 16 do
    local part = redis.call('ZRANGE', set, first, first + count - 1, 'WITHSCORES')
    first = first + count
    for i = 1, #part, 2 do
      local at = tonumber(part[i + 1])
      if skip_ties and at == after_ms and part[i] <= after_id then
        -- on the previous page
      else
        skip_ties = false
        entries[#entries + 1] = part[i]
        entries[#entries + 1] = at
      end
    end
    if #entries >= 2 * count or #part < 2 * count then
      break
    end
  end
  return entries
end

local entries = page_of(set)
if set == DELAYED and grouped() then
  -- A waiting job is in DELAYED or, ready, in READY_DUE: both pages, merged in time order.
  local ready = page_of(READY_DUE)
  if #ready > 0 then
    local merged = {}
    for i = 1, #entries, 2 do
      merged[#merged + 1] = {entries[i], entries[i + 1]}
    end
    for i = 1, #ready, 2 do
      merged[#merged + 1] = {ready[i], ready[i + 1]}
    end
    table.sort(merged, function(a, b)
      return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1])
    end)
    entries = {}
    for i = 1, math.min(#merged, count) do
      entries[2 * i - 1], entries[2 * i] = merged[i][1], merged[i][2]
    end
  end
end
if #entries == 0 then
  return {}
end
local ids = {}
for i = 1, math.min(#entries, 2 * count), 2 do
  ids[#ids + 1] = entries[i]
end
local bytes = set == DONE and FINISHED or JOBS
local envelopes = redis.call('HMGET', bytes, unpack(ids))
local reasons = redis.call('HMGET', ERRORS, unpack(ids))
local page = {}
for i, id in ipairs(ids) do
  page[i] = {id, math.floor(entries[2 * i]), envelopes[i], set == DEAD and reasons[i] or false}
end
return page
