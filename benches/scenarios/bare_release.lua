-- The textbook token-checked release: the bare loop's baseline, with no line to hand over to.
-- KEYS[1] the lock. ARGV[1] the holder's token. Returns 1 when deleted, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
