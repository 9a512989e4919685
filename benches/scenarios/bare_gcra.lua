-- The bare GCRA the throttle is measured against: one key, the server's clock, refuse or admit
-- and move the key's theoretical arrival time (the textbook algorithm, as redis-cell runs it).
-- KEYS[1] the arrival time (us); ARGV[1] interval (us), ARGV[2] tolerance (us).
local interval, tolerance = tonumber(ARGV[1]), tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0') or 0, now)
if tat - tolerance > now then
  return tat - tolerance - now
end
local new = tat + interval
redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', string.format('%.0f', math.floor((new - now) / 1000) + 1))
return 0
