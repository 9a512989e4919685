#!lua flags=allow-oom
-- Takes one of the key's permits, unless `limit` are held or reserved, or waiters without a
-- reservation are ahead of the caller; hands out the next fencing token.
-- ARGV[3] the holder's token, ARGV[4] the TTL in ms, ARGV[5] the limit, ARGV[6] the caller's
-- place in line ('' when it is not in line).
-- Returns {status, a, b, c, reserved, handed, dropped}: status 1 (a permit is ours) with the
-- fencing token and the ms the reservation waited for us (-1: none); status 0 (held) with the
-- ms until the first deadline (-1: none), the waiters ahead, the typical hold ms (-1:
-- unknown), and 1 when only reservations stand in the way. Then the waiters permits were just
-- reserved for, and those dropped for a reservation that ran out.
local token, ttl, limit, waiter = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local now = now_ms()
local dropped = prune(now)

local fence = redis.call('HGET', FENCES, token)
if fence then
  -- A re-sent acquire whose first reply was lost: the permit is already ours.
  redis.call('ZADD', PERMITS, now + ttl, token)
  keep_alive(ttl)
  return {1, tonumber(fence), -1, 0, 0, {}, dropped}
end

local waited = -1
local reservation = waiter ~= '' and redis.call('ZSCORE', PERMITS, '@' .. waiter)
if reservation then
  waited = RESERVATION_MS - (tonumber(reservation) - now)
  redis.call('ZREM', PERMITS, '@' .. waiter)
else
  -- A free permit is the caller's when fewer waiters without a reservation are ahead of it
  -- than permits are free.
  local free = limit - redis.call('ZCARD', PERMITS)
  local mine = free > 0
  if mine then
    local unreserved = 0
    for _, ahead in ipairs(redis.call('ZRANGE', WAITERS, 0, limit - 1)) do
      if ahead == waiter then
        break
      end
      if not redis.call('ZSCORE', PERMITS, '@' .. ahead) then
        unreserved = unreserved + 1
        if unreserved >= free then
          mine = false
          break
        end
      end
    end
  end
  if not mine then
    local handed = hand_to_line(now, limit)
    local first = redis.call('ZRANGE', PERMITS, 0, 0, 'WITHSCORES')[2]
    local remaining = first and (tonumber(first) - now) or -1
    local hold = tonumber(redis.call('GET', HOLDS)) or -1
    local only_reserved = redis.call('HLEN', FENCES) < limit and 1 or 0
    return {0, remaining, ahead_of(waiter), hold, only_reserved, handed, dropped}
  end
end

if waiter ~= '' then
  redis.call('ZREM', WAITERS, waiter)
end
fence = next_fences(FENCE, 1)
redis.call('ZADD', PERMITS, now + ttl, token)
redis.call('HSET', FENCES, token, fence)
redis.call('SET', LIMIT, limit, 'PX', ttl)
keep_alive(ttl)
-- Permits still free with waiters behind us (a holder's TTL ran out): theirs now.
local handed = {}
if redis.call('EXISTS', WAITERS) == 1 then
  handed = hand_to_line(now, limit)
end
return {1, fence, waited, 0, 0, handed, dropped}
