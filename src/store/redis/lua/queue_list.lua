-- Reads a page of one of a queue's sets, oldest first, with the jobs' bytes and bury reasons.
-- KEYS[1] the set (delayed, inflight or dead), KEYS[2] jobs, KEYS[3] errors.
-- ARGV[1] offset, ARGV[2] most entries (bounded by the caller).
-- Returns {{id, time ms, envelope or nil, reason or nil}, ...}.
local first = tonumber(ARGV[1])
local entries = redis.call('ZRANGE', KEYS[1], first, first + tonumber(ARGV[2]) - 1, 'WITHSCORES')
if #entries == 0 then
  return {}
end
local ids = {}
for i = 1, #entries, 2 do
  ids[#ids + 1] = entries[i]
end
local envelopes = redis.call('HMGET', KEYS[2], unpack(ids))
local reasons = redis.call('HMGET', KEYS[3], unpack(ids))
local page = {}
for i, id in ipairs(ids) do
  page[i] = {id, math.floor(tonumber(entries[2 * i])), envelopes[i], reasons[i]}
end
return page
