package nexthop

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

// WatchRouting calls changed whenever a route, neighbour or link of the
// current namespace changes, until ctx ends. It is how the data-plane
// daemons learn that cached next hops may be stale. Route and neighbour
// changes are coalesced (changed runs 20ms after the first of a burst); a
// link change calls it at once, unless it ran for a link change less than
// 20ms before (a flapping link then waits for the burst like the rest):
// a lost carrier is the edge's cue to withdraw, and every millisecond of
// it is traffic sent to a dead link (TestWatchRoutingLinkAtOnce). When
// the kernel drops the subscription (a full socket buffer: events were
// lost) it subscribes again and calls changed. The returned
// channel is closed once the watcher has ended (after ctx), so a caller
// can wait until changed is called no more.
func WatchRouting(ctx context.Context, log *slog.Logger, changed func()) (<-chan struct{}, error) {
	sub, err := subscribeRouting(ctx)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var timer <-chan time.Time
		var lastLink time.Time
		for {
			select {
			case <-ctx.Done():
				sub.close()
				return
			case <-sub.lost:
				sub.close()
				log.Warn("routing subscription lost; subscribing again")
				for {
					if sub, err = subscribeRouting(ctx); err == nil {
						break
					}
					log.Warn("cannot subscribe to routing changes", "err", err)
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Second):
					}
				}
				changed() // what happened meanwhile is unknown
				continue
			case <-sub.link:
				if time.Since(lastLink) >= debounce {
					timer, lastLink = nil, time.Now()
					changed() // covers whatever else was pending
					continue
				}
			case <-sub.event:
			case <-timer:
				timer = nil
				changed()
				continue
			}
			if timer == nil {
				timer = time.After(debounce)
			}
		}
	}()
	return done, nil
}

// debounce is how long route and neighbour changes are coalesced (a
// variable for the test only).
var debounce = 20 * time.Millisecond

type routingSub struct {
	done  chan struct{}
	event chan struct{} // a route or neighbour changed
	link  chan struct{} // a link changed
	lost  chan struct{}
	once  sync.Once
}

func (s *routingSub) close() { s.once.Do(func() { close(s.done) }) }

// subscribeRouting merges route and neighbour updates into one event
// channel and link updates into another; lost is closed when any of the
// three subscriptions ends.
func subscribeRouting(ctx context.Context) (*routingSub, error) {
	s := &routingSub{done: make(chan struct{}), event: make(chan struct{}, 1),
		link: make(chan struct{}, 1), lost: make(chan struct{})}
	routes := make(chan netlink.RouteUpdate, 256)
	neighs := make(chan netlink.NeighUpdate, 256)
	links := make(chan netlink.LinkUpdate, 256)
	// A larger receive buffer makes a lost subscription (ENOBUFS during an
	// event storm) rare; when it happens the channel closes and lost says so.
	const rcvbuf = 1 << 20
	if err := netlink.RouteSubscribeWithOptions(routes, s.done, netlink.RouteSubscribeOptions{ReceiveBufferSize: rcvbuf}); err != nil {
		s.close()
		return nil, fmt.Errorf("subscribe to routes: %w", err)
	}
	if err := netlink.NeighSubscribeWithOptions(neighs, s.done, netlink.NeighSubscribeOptions{ReceiveBufferSize: rcvbuf}); err != nil {
		s.close()
		return nil, fmt.Errorf("subscribe to neighbours: %w", err)
	}
	if err := netlink.LinkSubscribeWithOptions(links, s.done, netlink.LinkSubscribeOptions{ReceiveBufferSize: rcvbuf}); err != nil {
		s.close()
		return nil, fmt.Errorf("subscribe to links: %w", err)
	}
	var lostOnce sync.Once
	pump := func(to chan struct{}, ok bool) bool {
		if !ok {
			lostOnce.Do(func() { close(s.lost) })
			return false
		}
		select {
		case to <- struct{}{}:
		default:
		}
		return true
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-routes:
				if !pump(s.event, ok) {
					return
				}
			case _, ok := <-neighs:
				if !pump(s.event, ok) {
					return
				}
			case _, ok := <-links:
				if !pump(s.link, ok) {
					return
				}
			}
		}
	}()
	return s, nil
}
