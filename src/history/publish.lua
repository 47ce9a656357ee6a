-- shardsub: publish with history. KEYS[1] meta hash, KEYS[2] stream.
-- ARGV: 1 server channel, 2 payload, 3 max_len, 4 max_age (s), 5 PUBLISH|SPUBLISH
local epoch = redis.call('HGET', KEYS[1], 'e')
if not epoch then
  local t = redis.call('TIME')
  epoch = t[1] .. string.sub('00000' .. t[2], -6)
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'e', epoch)
end
local off = string.format('%d', redis.call('HINCRBY', KEYS[1], 'o', 1))
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], off .. '-0', 'd', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return redis.call(ARGV[5], ARGV[1], '\0SH1' .. epoch .. '.' .. off .. '\n' .. ARGV[2])
