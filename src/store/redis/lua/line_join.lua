-- Model: Waiters::room_for, Waiters::join (src/lock/model/waiters.rs); tests/lock_model.rs checks the two agree.
-- Joining a key's line, for the join scripts (lock_join.lua, permit_join.lua), after their
-- family's prelude and line.lua: the place a waiter takes, and the line's cap. ARGV[5] of the
-- lock's join (ARGV[6] of the permit's) is the most waiters ('-1': no cap), the next one what
-- a full line does ('refuse' or 'drop').

-- The most line entries one join looks at for jobs to drop: bounded work per call.
local MAX_EVICTION_SCAN = 1000

-- Finds room in the line for `waiter` within `max` waiters (`replacing` leaves as it joins),
-- changing nothing: with 'drop', the oldest jobs ('j|' waiters) that `reserved` does not
-- protect (the key is being handed to them) are to leave the line to make room; callers who
-- wait in place never do. Returns whether the waiter is refused, the waiters to evict, and
-- how many wait. A set's join (set_join.lua) looks at every key's line before it changes any.
local function room_for(waiter, replacing, max, overflow, reserved)
  if max < 0 or redis.call('ZSCORE', WAITERS, waiter) then
    return false, {}, 0
  end
  local waiting = redis.call('ZCARD', WAITERS)
  if replacing ~= '' and redis.call('ZSCORE', WAITERS, replacing) then
    waiting = waiting - 1
  end
  local excess = waiting - max + 1
  if excess <= 0 then
    return false, {}, waiting
  end
  if overflow ~= 'drop' or excess > MAX_EVICTION_SCAN then
    return true, {}, waiting
  end
  local evicted = {}
  for _, candidate in ipairs(redis.call('ZRANGE', WAITERS, 0, MAX_EVICTION_SCAN - 1)) do
    if #evicted == excess then
      break
    end
    if string.sub(candidate, 1, 2) == 'j|' and candidate ~= replacing and not reserved(candidate) then
      evicted[#evicted + 1] = candidate
    end
  end
  if #evicted < excess then
    return true, {}, waiting
  end
  return false, evicted, waiting
end

-- Makes room in the line for `waiter`, as room_for finds it: the waiters to evict leave.
local function make_room(waiter, replacing, max, overflow, reserved)
  local refused, evicted, waiting = room_for(waiter, replacing, max, overflow, reserved)
  for _, gone in ipairs(evicted) do
    redis.call('ZREM', WAITERS, gone)
  end
  return refused, evicted, waiting
end

-- Puts `waiter` in line: in the place of `replacing` (a caller that retried, then deferred),
-- else at the end; already in line, it keeps its place. The line lives IDLE_MS past its last
-- join.
local function take_place(waiter, replacing)
  local place = nil
  if replacing ~= '' then
    place = redis.call('ZSCORE', WAITERS, replacing)
    redis.call('ZREM', WAITERS, replacing)
  end
  if not place then
    local last = redis.call('ZRANGE', WAITERS, -1, -1, 'WITHSCORES')[2]
    place = (tonumber(last) or 0) + 1
  end
  redis.call('ZADD', WAITERS, 'NX', place, waiter)
  redis.call('PEXPIRE', WAITERS, IDLE_MS)
end

-- The join script itself follows.
