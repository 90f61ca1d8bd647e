package main

// The RedLock section: dlock's NewRedLock beside redsync's Redlock, both over
// the same five independent redis-servers on this machine.

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	goredispool "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redLockNodes is how many servers the section runs on.
const redLockNodes = 5

// redLockVariants open their lockers on the comma-joined addresses of the
// five servers.
func redLockVariants() []variant {
	return []variant{
		{lib: "dlock", name: "redlock", open: openDlockRedLock},
		{lib: "redsync", name: "redlock", open: openRedsyncRedLock()},
		{lib: "redsync", name: "redlock-aggressive", retryOnly: true,
			open: openRedsyncRedLock(redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(math.MaxInt32))},
	}
}

type dlockRedLock struct {
	rdbs []*redis.Client
	c    *dlock.Client
}

func openDlockRedLock(addrs string, rc *reqCounter) (locker, error) {
	var nodes []redis.UniversalClient
	d := &dlockRedLock{}
	for a := range strings.SplitSeq(addrs, ",") {
		rdb := newRedis(a, rc)
		d.rdbs = append(d.rdbs, rdb)
		nodes = append(nodes, rdb)
	}
	c, err := dlock.NewRedLock(nodes)
	if err != nil {
		d.close()
		return nil, err
	}
	d.c = c
	return d, nil
}

func (d *dlockRedLock) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := d.c.Mutex(key).Lock(ctx)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (d *dlockRedLock) close() {
	if d.c != nil {
		_ = d.c.Close()
	}
	for _, r := range d.rdbs {
		_ = r.Close()
	}
}

// redsyncRedLock is redsync over one pool per server: its Redlock.
type redsyncRedLock struct {
	redsyncLocker
	rdbs []*redis.Client
}

func openRedsyncRedLock(opts ...redsync.Option) func(string, *reqCounter) (locker, error) {
	return func(addrs string, rc *reqCounter) (locker, error) {
		r := &redsyncRedLock{}
		var pools []redsyncredis.Pool
		for a := range strings.SplitSeq(addrs, ",") {
			rdb := newRedis(a, rc)
			r.rdbs = append(r.rdbs, rdb)
			pools = append(pools, goredispool.NewPool(rdb))
		}
		r.redsyncLocker = redsyncLocker{rs: redsync.New(pools...), opts: opts}
		return r, nil
	}
}

func (r *redsyncRedLock) close() {
	for _, rdb := range r.rdbs {
		_ = rdb.Close()
	}
}

// runRedLock starts five servers and runs the uncontended and contended
// scenarios on them with redLockVariants; the results' scenarios are
// "redlock-uncontended" and "redlock-contended".
func runRedLock(cfg config, stops *stopper) ([]result, error) {
	dir, err := os.MkdirTemp("", "dlock-bench-redlock-")
	if err != nil {
		return nil, err
	}
	stop := stops.add(func() { _ = os.RemoveAll(dir) })
	defer stop()
	var addrs []string
	for i := range redLockNodes {
		sub := fmt.Sprintf("%s/%d", dir, i)
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return nil, err
		}
		srv, err := redistest.Launch(sub)
		if err != nil {
			return nil, err
		}
		defer stops.add(func() { _ = srv.Close() })()
		addrs = append(addrs, srv.Addr)
	}
	c := cfg
	c.addr, c.noFloors = strings.Join(addrs, ","), true
	c.admin = redis.NewClient(&redis.Options{Addr: addrs[0], PoolSize: 1})
	defer c.admin.Close()
	vs := redLockVariants()
	var res []result
	un, _, err := runUncontended(c, vs)
	if err != nil {
		return nil, err
	}
	co, err := runContended(c, vs, 16, false)
	if err != nil {
		return nil, err
	}
	for _, r := range un {
		r.Scenario = "redlock-uncontended"
		res = append(res, r)
	}
	for _, r := range co {
		r.Scenario = "redlock-contended"
		res = append(res, r)
	}
	return res, nil
}
