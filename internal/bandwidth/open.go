package bandwidth

import (
	"fmt"
	"strings"

	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/secretfile"
)

// OpenStore opens a measurement store by URL (docs/bandwidth.md,
// "Managers"; shared by the agents, edges and managers):
//
//   - "" or "mem:": a fresh in-process store (bwstore.NewMem). It is only
//     shared inside one process (tests, the simulator), so two processes
//     given "mem:" do not see each other.
//   - "unix:///path/redis.sock", "redis://host:port" or
//     "rediss://host:port" (TLS): a Redis store (bwstore.NewRedis), one
//     redis-server per zone.
//
// The password never comes in the URL (a command line is visible to every
// local user in ps): a URL holding one is refused. passwordFile, when not
// empty, holds it on its first line; the file must be a regular file with
// no permission for group or others (0600 or stricter), else it is
// refused, naming the file and its mode. The Redis connection is lazy:
// the first call dials.
func OpenStore(url, passwordFile string) (bwstore.Store, error) {
	if url == "" || url == "mem:" {
		if passwordFile != "" {
			return nil, fmt.Errorf("bandwidth store %q: a password file (%s) is for a Redis store only", url, passwordFile)
		}
		return bwstore.NewMem(nil), nil
	}
	scheme, _, ok := strings.Cut(url, "://")
	if !ok || (scheme != "unix" && scheme != "redis" && scheme != "rediss") {
		return nil, fmt.Errorf("bandwidth store %q: want mem:, unix:///path/redis.sock, redis://host:port or rediss://host:port", url)
	}
	cfg, err := bwstore.RedisConfigFromURL(url)
	if err != nil {
		return nil, fmt.Errorf("bandwidth store %q: %w", url, err)
	}
	if cfg.Password != "" {
		return nil, fmt.Errorf("bandwidth store: the URL holds a password: give it in a password file instead (a command line is visible in ps)")
	}
	if passwordFile != "" {
		pw, err := secretfile.Read(passwordFile, "bandwidth store password file")
		if err != nil {
			return nil, err
		}
		cfg.Password = pw
	}
	r, err := bwstore.NewRedis(cfg)
	if err != nil {
		return nil, fmt.Errorf("bandwidth store %q: %w", url, err)
	}
	return r, nil
}
