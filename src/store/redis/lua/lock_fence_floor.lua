#!lua flags=allow-oom
-- Raises a key's fencing counter to the server's clock for the holder that has just taken the
-- key by `SET NX` and got a token from a counter never raised (fence.lua): new, or lost with
-- the data. ARGV[3] the holder's token.
-- Returns the holder's fencing token; false when the token no longer holds the key.
if not held_by(ARGV[3]) then
  return false
end
local fence = tonumber(redis.call('GET', FENCE)) or 0
if fence < FENCE_FLOOR then
  fence = math.max(fence, now_us())
  redis.call('SET', FENCE, string.format('%d', fence))
end
return fence
