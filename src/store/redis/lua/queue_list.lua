#!lua flags=no-writes
-- Reads a page of one of a queue's sets, oldest first, with the jobs' bytes and bury reasons.
-- ARGV[2] the set ('delayed', 'inflight' or 'dead'), ARGV[3] offset, ARGV[4] most entries
-- (at most MAX_PAGE).
-- Returns {{id, time ms, envelope or nil, reason or nil}, ...}.
local set = SETS[ARGV[2]]
if not set then
  return redis.error_reply('no such set: ' .. ARGV[2])
end
local first = tonumber(ARGV[3])
local count = math.min(tonumber(ARGV[4]), MAX_PAGE)
local entries = redis.call('ZRANGE', set, first, first + count - 1, 'WITHSCORES')
if #entries == 0 then
  return {}
end
local ids = {}
for i = 1, #entries, 2 do
  ids[#ids + 1] = entries[i]
end
local envelopes = redis.call('HMGET', JOBS, unpack(ids))
local reasons = redis.call('HMGET', ERRORS, unpack(ids))
local page = {}
for i, id in ipairs(ids) do
  page[i] = {id, math.floor(tonumber(entries[2 * i])), envelopes[i], reasons[i]}
end
return page
