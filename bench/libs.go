package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockrueidis"
	"github.com/dlock-go/dlock/dlockvalkey"
	"github.com/go-redsync/redsync/v4"
	goredispool "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
	"github.com/valkey-io/valkey-go"
)

// locker is one library instance with its own Redis client (one "process").
// lock blocks until key is held or ctx ends, and returns the release func.
type locker interface {
	lock(ctx context.Context, key string) (release func(context.Context) error, err error)
	close()
}

// variant names one library configuration.
type variant struct {
	lib, name string // name: default | aggressive
	// retryOnly: the aggressive setting only changes waiting, so the
	// variant is skipped where nothing waits (uncontended, parallel).
	retryOnly bool
	// open makes one instance on addr; every client it opens is counted by rc.
	open func(addr string, rc *reqCounter) (locker, error)
	// serverCPU, if set, reads the CPU time (s) of the server the variant
	// runs on, when that is not the redis-server of cfg.admin (etcd).
	serverCPU func() float64
}

func (v variant) label() string { return v.lib + "/" + v.name }

func allVariants() []variant {
	return []variant{
		{lib: "dlock", name: "default", open: openDlock()},
		{lib: "dlock", name: "aggressive", open: openDlock(dlock.WithAutoPipeline())},
		{lib: "raw", name: "default", open: openRaw},
		{lib: "redsync", name: "default", open: openRedsync()},
		{lib: "redsync", name: "aggressive", retryOnly: true,
			open: openRedsync(redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(math.MaxInt32))},
		{lib: "redislock", name: "default", open: openRedislock(100 * time.Millisecond)},
		{lib: "redislock", name: "aggressive", retryOnly: true, open: openRedislock(time.Millisecond)},
		{lib: "dlock-rueidis", name: "default", open: openDlockRueidis},
		{lib: "dlock-valkey", name: "default", open: openDlockValkey},
		{lib: "rueidislock", name: "default", open: openRueidis(rueidislock.LockerOption{})},
		{lib: "rueidislock", name: "aggressive", open: openRueidis(rueidislock.LockerOption{KeyMajority: 1, NoLoopTracking: true})},
	}
}

// scriptFree returns dlock's Mutex on a Client made WithoutScripts, as a
// variant of its own, where the server at addr runs what that needs (SET …
// IFEQ and DELIFEQ: Valkey 9.0 or later); elsewhere an error saying why.
func scriptFree(addr string) (variant, error) {
	v := variant{lib: "dlock", name: "noscripts", open: openDlock(dlock.WithoutScripts())}
	lk, err := v.open(addr, nil)
	if err != nil {
		return v, err
	}
	defer lk.close()
	return v, lk.(*dlockLocker).c.Check(context.Background())
}

// ---- dlock ----

type dlockLocker struct {
	rdb redis.UniversalClient
	c   *dlock.Client
}

func openDlock(opts ...dlock.Option) func(string, *reqCounter) (locker, error) {
	return func(addr string, rc *reqCounter) (locker, error) {
		rdb := newRedis(addr, rc)
		var hooks []dlock.Option
		if rc != nil {
			// Counts renewals and the extends that lengthen a grant, which
			// are off the path that gates the next holder.
			hooks = append(hooks, dlock.WithHooks(dlock.Hooks{Extended: func(context.Context, dlock.LockInfo, int64) { rc.extends.Add(1) }}))
		}
		c, err := dlock.New(rdb, append(hooks, opts...)...)
		if err != nil {
			return nil, err
		}
		return &dlockLocker{rdb: rdb, c: c}, nil
	}
}

func (d *dlockLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := d.c.Mutex(key).Lock(ctx)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (d *dlockLocker) close() { _ = d.c.Close(); _ = d.rdb.Close() }

// ---- dlock on rueidis and on valkey-go (their client modules) ----

type dlockOnLocker struct {
	c    *dlock.Client
	stop func() // closes the Redis client
}

func (d *dlockOnLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := d.c.Mutex(key).Lock(ctx)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (d *dlockOnLocker) close() { _ = d.c.Close(); d.stop() }

// extendHooks counts renewals, as openDlock does.
func extendHooks(rc *reqCounter) []dlock.Option {
	if rc == nil {
		return nil
	}
	return []dlock.Option{dlock.WithHooks(dlock.Hooks{Extended: func(context.Context, dlock.LockInfo, int64) { rc.extends.Add(1) }})}
}

func openDlockRueidis(addr string, rc *reqCounter) (locker, error) {
	o := rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true}
	var (
		rdb rueidis.Client
		err error
	)
	if rc != nil {
		rdb, err = rueidisBuilder(rc)(o)
	} else {
		rdb, err = rueidis.NewClient(o)
	}
	if err != nil {
		return nil, err
	}
	c, err := dlockrueidis.New(rdb, extendHooks(rc)...)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &dlockOnLocker{c: c, stop: rdb.Close}, nil
}

// openDlockValkey: valkey-go's requests are not counted in the client (no
// counting wrapper of its own here); the server's counts still are.
func openDlockValkey(addr string, rc *reqCounter) (locker, error) {
	rdb, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	if rc != nil {
		rc.unknown.Store(true)
	}
	c, err := dlockvalkey.New(rdb, extendHooks(rc)...)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &dlockOnLocker{c: c, stop: rdb.Close}, nil
}

// ---- raw: SET NX PX + EVALSHA compare-and-delete, polling every 1 ms ----

var rawRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

var rawSeq atomic.Uint64

type rawLocker struct{ rdb *redis.Client }

func openRaw(addr string, rc *reqCounter) (locker, error) {
	return &rawLocker{rdb: newRedis(addr, rc)}, nil
}

func (r *rawLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	token := strconv.FormatUint(rawSeq.Add(1), 36)
	for {
		err := r.rdb.Do(ctx, "set", key, token, "nx", "px", 30000).Err()
		if err == nil {
			break
		}
		if !errors.Is(err, redis.Nil) {
			return nil, err
		}
		t := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	return func(ctx context.Context) error {
		n, err := rawRelease.Run(ctx, r.rdb, []string{key}, token).Int64()
		if err == nil && n != 1 {
			err = fmt.Errorf("raw: %s no longer held", key)
		}
		return err
	}, nil
}

func (r *rawLocker) close() { _ = r.rdb.Close() }

// ---- redsync ----

type redsyncLocker struct {
	rdb  *redis.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

func openRedsync(opts ...redsync.Option) func(string, *reqCounter) (locker, error) {
	return func(addr string, rc *reqCounter) (locker, error) {
		rdb := newRedis(addr, rc)
		return &redsyncLocker{rdb: rdb, rs: redsync.New(goredispool.NewPool(rdb)), opts: opts}, nil
	}
}

func (r *redsyncLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := r.rs.NewMutex(key, r.opts...)
	for {
		err := m.LockContext(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// redsync gives up after its tries (ErrFailed); the caller still
		// wants the lock, so it asks again: the wait continues.
		var taken redsync.ErrTaken
		var takenP *redsync.ErrTaken
		if !errors.Is(err, redsync.ErrFailed) && !errors.As(err, &taken) && !errors.As(err, &takenP) {
			return nil, err
		}
	}
	return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
}

func (r *redsyncLocker) close() { _ = r.rdb.Close() }

// ---- redislock ----

type redislockLocker struct {
	rdb   *redis.Client
	c     *redislock.Client
	retry time.Duration
}

func openRedislock(retry time.Duration) func(string, *reqCounter) (locker, error) {
	return func(addr string, rc *reqCounter) (locker, error) {
		rdb := newRedis(addr, rc)
		return &redislockLocker{rdb: rdb, c: redislock.New(rdb), retry: retry}, nil
	}
}

func (r *redislockLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	for {
		l, err := r.c.Obtain(ctx, key, 30*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(r.retry)})
		if err == nil {
			return l.Release, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, redislock.ErrNotObtained) {
			return nil, err
		}
	}
}

func (r *redislockLocker) close() { _ = r.rdb.Close() }

// ---- rueidislock ----

type rueidisLocker struct{ l rueidislock.Locker }

func openRueidis(opt rueidislock.LockerOption) func(string, *reqCounter) (locker, error) {
	return func(addr string, rc *reqCounter) (locker, error) {
		o := opt
		o.ClientOption = rueidis.ClientOption{InitAddress: []string{addr}}
		if rc != nil {
			o.ClientBuilder = rueidisBuilder(rc)
		}
		l, err := rueidislock.NewLocker(o)
		if err != nil {
			return nil, err
		}
		return &rueidisLocker{l: l}, nil
	}
}

func (r *rueidisLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	_, cancel, err := r.l.WithContext(ctx, key)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { cancel(); return nil }, nil
}

func (r *rueidisLocker) close() { r.l.Close() }
