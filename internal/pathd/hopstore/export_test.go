package hopstore

import "github.com/redis/go-redis/v9"

// redisZ scores a raw row above every version tests use.
func redisZ(f string) redis.Z { return redis.Z{Score: 1 << 40, Member: f} }
