package hopstore

import (
	"github.com/redis/go-redis/v9"

	"github.com/azgate/azgate/internal/bwstore"
)

// redisZ scores a raw row above every version tests use.
func redisZ(f string) redis.Z { return redis.Z{Score: 1 << 40, Member: f} }

// configOf is the hop store's Config for a test redis-server (the tests
// start theirs with bwstoretest; the package itself does not import
// bwstore).
func configOf(c bwstore.RedisConfig) Config {
	return Config{Network: c.Network, Addr: c.Addr, Username: c.Username, Password: c.Password, TLS: c.TLS, PoolSize: c.PoolSize}
}
