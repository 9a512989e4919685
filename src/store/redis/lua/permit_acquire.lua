#!lua flags=allow-oom
-- Model: PermitModel::acquire (src/semaphore/model.rs); tests/permit_model.rs checks the two agree.
-- Takes one of the key's permits (a writer: the key alone), unless it does not fit beside
-- those held and reserved, or waiters without a reservation are ahead of the caller; hands
-- out the next fencing token.
-- ARGV[3] the holder (its token; a writer's marked, see the prelude), ARGV[4] the TTL in ms,
-- ARGV[5] the limit, ARGV[6] the caller's place in line ('' when it is not in line).
-- Returns {status, a, b, c, reserved, handed, dropped}: status 1 (a permit is ours) with the
-- fencing token and the ms the reservation waited for us (-1: none); status 0 (held) with the
-- ms until the first deadline (-1: none), the waiters ahead, the typical hold ms (-1:
-- unknown), and 1 when only reservations stand in the way. Then the waiters permits were just
-- reserved for, and those dropped for a reservation that ran out.
local token, ttl, limit, waiter = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local writer = string.sub(token, 1, 1) == WRITER_MARK
local now = now_ms()
local dropped = prune(now)

local fence = redis.call('HGET', FENCES, token)
if fence then
  -- A re-sent acquire whose first reply was lost: the permit is already ours.
  redis.call('ZADD', PERMITS, now + ttl, token)
  keep_alive(ttl)
  return {1, tonumber(fence), -1, 0, 0, {}, dropped}
end
local first = first_holder()
if first == token then
  -- The first permit is ours (the plain commands that took it did not count a fence, or
  -- their reply was lost): a new token, counted while we hold it, above every earlier one.
  redis.call('PEXPIRE', FIRST, ttl)
  return {1, next_fences(FENCE, 1), -1, 0, 0, {}, dropped}
end

-- Whether the caller may take a free permit without a reservation: it fits, and no waiter
-- without a reservation is ahead of it (reserved waiters stand at the front of the line,
-- each counted in PERMITS).
local function may_take()
  local ahead = ahead_of(waiter)
  if ahead > 0 and ahead > redis.call('ZCARD', PERMITS) - redis.call('HLEN', FENCES) then
    return false
  end
  return fits(writer, limit)
end

-- The permit reserved for the caller, if one is (its deadline). A writer's reservation is the
-- key alone (it was reserved for a writer); should the line have lost that it writes, it is
-- not taken beside others.
local function reservation()
  local deadline = waiter ~= '' and redis.call('ZSCORE', PERMITS, '@' .. waiter)
  if deadline and writer and taken_now() > 1 then
    return false
  end
  return deadline
end

local handed = {}
local reserved = reservation()
if not reserved and not may_take() then
  -- The line first: the permits that are free go to it; then the caller may still find one.
  handed = hand_to_line(now, limit)
  reserved = reservation()
  if reserved then
    -- Handed to the caller itself, here: nobody is to be woken for it.
    for i, other in ipairs(handed) do
      if other == waiter then
        table.remove(handed, i)
        break
      end
    end
  elseif not may_take() then
    local head = redis.call('ZRANGE', PERMITS, 0, 0, 'WITHSCORES')
    local remaining = head[2] and (tonumber(head[2]) - now) or -1
    local writing = head[1] and string.sub(head[1], 1, 1) == WRITER_MARK
    local holders = redis.call('HLEN', FENCES)
    if first then
      -- The first permit runs out with its key: its TTL, if it is the sooner deadline.
      local left = redis.call('PTTL', FIRST)
      if left >= 0 and (remaining < 0 or left < remaining) then
        remaining = left
      end
      writing = writing or string.sub(first, 1, 1) == WRITER_MARK
      holders = holders + 1
    end
    local hold = tonumber(redis.call('GET', HOLDS)) or -1
    -- Only reservations stand in the way: no holder that the caller could not join.
    local only_reserved = 0
    if holders == 0 or not (writer or holders >= limit or writing) then
      only_reserved = 1
    end
    return {0, remaining, ahead_of(waiter), hold, only_reserved, handed, dropped}
  end
end

local waited = -1
if reserved then
  waited = RESERVATION_MS - (tonumber(reserved) - now)
  redis.call('ZREM', PERMITS, '@' .. waiter)
end
if waiter ~= '' then
  redis.call('ZREM', WAITERS, waiter)
  redis.call('SREM', WRITERS, waiter)
end
fence = next_fences(FENCE, 1)
redis.call('ZADD', PERMITS, now + ttl, token)
redis.call('HSET', FENCES, token, fence)
redis.call('SET', LIMIT, limit, 'PX', ttl)
keep_alive(ttl)
-- Permits still free with waiters behind us (a holder's TTL ran out): theirs now.
if redis.call('EXISTS', WAITERS) == 1 then
  for _, next_one in ipairs(hand_to_line(now, limit)) do
    handed[#handed + 1] = next_one
  end
end
return {1, fence, waited, 0, 0, handed, dropped}
