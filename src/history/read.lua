-- shardsub: read history. KEYS[1] meta hash, KEYS[2] stream.
-- ARGV: 1 'since' or 'last', 2 offset (since: exclusive), 3 count
local epoch = redis.call('HGET', KEYS[1], 'e')
if not epoch then
  return {'', '0', {}}
end
local top = redis.call('HGET', KEYS[1], 'o') or '0'
local got
if ARGV[1] == 'since' then
  got = redis.call('XRANGE', KEYS[2], '(' .. ARGV[2] .. '-0', '+', 'COUNT', ARGV[3])
else
  got = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', ARGV[3])
end
return {epoch, top, got}
