package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is the engine every primitive of this package runs on: it holds the
// Redis client, renews the leases of every lock acquired through it with one
// goroutine, and receives release notifications on one shared pub/sub
// connection.
//
// Create a Client with New and share it: it is safe for concurrent use, and
// primitives made from it are cheap. Close it when done; Close releases the
// locks it still holds and stops its goroutines. The zero Client is not usable.
type Client struct {
	rdb redis.UniversalClient
	// cmd runs the lock scripts: rdb itself, or its autopipeliner
	// (WithAutoPipeline).
	cmd redis.Scripter
	// ctxAware: cmd gives up a request at its context's deadline by itself
	// (rdb, made with ContextTimeoutEnabled), so within need not.
	ctxAware bool
	cfg      config
	log      *slog.Logger
	id       string        // random, unique per Client: the stem of every owner id
	seq      atomic.Uint64 // makes each acquisition's owner id unique

	ren  *renewer
	note *notifier

	closeOnce sync.Once
	closing   chan struct{} // closed when Close starts

	behindMu     sync.Mutex
	behindClosed bool // Close is waiting for behind
	// behind: requests in the background, which Close waits for: those left
	// behind by callers whose context ended, and waiters' unregistrations.
	behind sync.WaitGroup
}

// New returns a Client working on rdb, which may be a *redis.Client or a
// *redis.FailoverClient (Sentinel). The options set the defaults of every
// primitive made from this Client; the Client-only ones (WithPrefix,
// WithLogger, WithHooks, WithAutoPipeline) configure the Client itself. New
// does not contact Redis.
//
// A Lock returns when its context ends even if Redis has stalled. Unless rdb
// gives up requests at their deadline by itself (made with
// ContextTimeoutEnabled, and WithAutoPipeline not given), the Client waits for
// each acquire on another goroutine to make that so, which costs a goroutine
// hand-off per acquire; a Redis client made with ContextTimeoutEnabled avoids
// it.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, errors.New("dlock: New: nil Redis client")
	}
	cfg, err := defaultConfig().with(opts, true)
	if err != nil {
		return nil, err
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("dlock: New: make client id: %w", err)
	}
	var cmd redis.Scripter = rdb
	if cfg.autoPipeline {
		ap, err := rdb.AutoPipeline()
		if err != nil {
			return nil, fmt.Errorf("dlock: New: WithAutoPipeline: %w", err)
		}
		cmd = ap
	}
	c := &Client{
		rdb:      rdb,
		cmd:      cmd,
		ctxAware: !cfg.autoPipeline && contextTimeouts(rdb),
		cfg:      cfg,
		log:      cfg.logger,
		id:       hex.EncodeToString(id[:]),
		closing:  make(chan struct{}),
	}
	c.ren = newRenewer(c)
	c.note = newNotifier(c)
	return c, nil
}

// Close releases every lock still held through c (best effort, bounded by a
// few seconds), ends their leases with an error matching ErrClosed, wakes every
// waiting Lock (which returns ErrClosed), and stops c's goroutines, waiting for
// them. It does not close the Redis client. Calling Close again does nothing.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closing)
		holds := c.ren.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var errs []error
		for _, h := range holds {
			if _, rerr := c.release(ctx, h.k, h.owner, releaseLast, h.currentTTL()); rerr != nil {
				errs = append(errs, rerr)
			}
			h.end(fmt.Errorf("%w: lock %q ended by Close", ErrClosed, h.k.name), nil)
		}
		c.behindMu.Lock()
		c.behindClosed = true
		c.behindMu.Unlock()
		c.behind.Wait()
		c.note.close()
		err = errors.Join(errs...)
	})
	return err
}

// closed reports whether Close has started.
func (c *Client) closed() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// newOwner returns an owner id unique across Clients and acquisitions.
func (c *Client) newOwner() string {
	return c.id + ":" + strconv.FormatUint(c.seq.Add(1), 10)
}

// keys names everything in Redis that belongs to one lock. Every name carries
// the same {hash tag}, so they share a Redis Cluster slot and one script can
// touch them all.
//
// Layout, for prefix "dlock:" and a Mutex named "orders" (a FairMutex's keys
// start with "dlock:fair:{orders}", a Semaphore's with "dlock:sem:{orders}",
// where the hash holds "permits", "used" and each holder's permits, and
// ":holders" is a sorted set of holders scored by when their lease lapses; an
// RWMutex's with "dlock:rw:{orders}", where the hash holds the writer and
// ":readers" is the sorted set of read holders, each one's lease, expiring
// with the last of them):
//
//	dlock:{orders}                  hash   owner id -> hold count, PX = lease TTL
//	dlock:{orders}:fence            string the fence counter, no expiry
//	dlock:{orders}:waiters          zset   Mutex: waiting owner ids, scored by when they lapse;
//	                                       FairMutex: scored by arrival
//	dlock:{orders}:alive            hash   FairMutex only: waiting owner id -> when it lapses
//	dlock:{orders}:released:<id>    pub/sub channel of the Client with that id,
//	                                told when the lock is kept for one of its waiters
type keys struct {
	kind    *lockKind
	name    string // as the caller gave it
	lock    string
	lease   string // the key that carries each holder's lease: lock, or a sorted set of holders
	fence   string
	waiters string
	alive   string
	channel string // the stem; a Client listens on channel + ":" + its id

	acquireKeys []string // KEYS of the acquire script, made once
	releaseKeys []string // KEYS of the release script, made once
	leaseOnly   []string // KEYS of ttl.lua, made once
}

func (c *Client) keys(kind *lockKind, name string) keys {
	tag := c.tag(kind.space, name)
	k := keys{kind: kind, name: name, lock: tag, fence: tag + ":fence", waiters: tag + ":waiters", alive: tag + ":alive", channel: tag + ":released"}
	k.acquireKeys = []string{k.lock, k.fence, k.waiters}
	k.releaseKeys = []string{k.lock, k.waiters}
	if kind.fair {
		k.acquireKeys = append(k.acquireKeys, k.alive)
		k.releaseKeys = append(k.releaseKeys, k.alive)
	}
	k.lease = k.lock
	if kind.holders != "" {
		holders := tag + kind.holders
		k.acquireKeys = append(k.acquireKeys, holders)
		k.releaseKeys = append(k.releaseKeys, holders)
		if kind.zlease {
			k.lease = holders
		}
	}
	k.leaseOnly = []string{k.lease}
	return k
}

// tag returns the start of every key of the object called name in namespace
// space ("" for a Mutex, "fair:", "latch:" and so on): the prefix, the space
// and the {hash tag}.
func (c *Client) tag(space, name string) string {
	return c.cfg.prefix + space + "{" + escapeName(name) + "}"
}

// ownChannel is the channel on which c is told that k was kept for one of its
// waiters.
func (c *Client) ownChannel(k keys) string { return k.channel + ":" + c.id }

// nameEscaper makes any byte string safe inside a hash tag: '{' and '}' would
// end the tag early and change the slot. '%' is escaped too, so the mapping is
// one-to-one.
var nameEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func escapeName(name string) string { return nameEscaper.Replace(name) }

// checkCall rejects a call that cannot proceed: a nil context, a closed Client.
func (c *Client) checkCall(ctx context.Context, op, name string) error {
	if ctx == nil {
		return fmt.Errorf("dlock: %s %q: nil context", op, name)
	}
	if c.closed() {
		return fmt.Errorf("%w: %s %q", ErrClosed, op, name)
	}
	return nil
}

// acquireResult is what acquire.lua answered, decoded.
type acquireResult struct {
	fence     int64         // > 0 when the lock was taken
	reentered bool          // the owner's hold count went up
	gone      bool          // re-entry asked, but the owner holds nothing
	pttl      time.Duration // when held by another: its remaining TTL, -1ms if none
}

// acquire runs acquire.lua once: one round trip. If the lock is held and
// register is above zero, owner is registered as a waiter for that long.
func (c *Client) acquire(ctx context.Context, k keys, owner string, ttl time.Duration, reenter bool, register time.Duration, extra ...any) (acquireResult, error) {
	mode := "0"
	if reenter {
		mode = "1"
	}
	args := append([]any{owner, ttl.Milliseconds(), mode, register.Milliseconds()}, extra...)
	v, err := k.kind.acquire.Run(ctx, c.cmd, k.acquireKeys, args...).Int64()
	if err != nil {
		return acquireResult{}, fmt.Errorf("dlock: acquire %q: %w", k.name, err)
	}
	switch {
	case v > 0:
		return acquireResult{fence: v}, nil
	case v == 0:
		return acquireResult{reentered: true}, nil
	case v == -1:
		return acquireResult{gone: true}, nil
	}
	return acquireResult{pttl: time.Duration(-v-3) * time.Millisecond}, nil
}

// errLeftBehind marks the error of a call that within gave up on; the caller
// names the call.
var errLeftBehind = errors.New("left to finish in the background")

// within runs call, which makes one request to Redis, and returns its result,
// or ctx's error as soon as ctx ends, whichever comes first. go-redis does not
// give up a request in flight when its context ends, so without this a stalled
// Redis would hold a caller for the Redis client's timeouts and retries, well
// past its deadline (its autopipeliner for tens of seconds). A request left
// behind goes on in the background; late, if not nil, then gets its outcome:
// say, to release a lock that was taken after its caller had gone. Close waits
// for it.
//
// Waiting on another goroutine costs a hand-off per call (about 18µs on a
// 2-vCPU VM), so where go-redis honors deadlines itself (a Redis client made
// with ContextTimeoutEnabled, without WithAutoPipeline) call runs inline.
func within[T any](c *Client, ctx context.Context, call func() (T, error), late func(T, error)) (T, error) {
	if c.ctxAware || ctx.Done() == nil {
		return call()
	}
	type outcome struct {
		v   T
		err error
	}
	done := make(chan outcome, 1)
	var state atomic.Int32 // 0: running; 1: finished for the caller; 2: the caller left
	if !c.goBehind(func() {
		v, err := call()
		if state.CompareAndSwap(0, 1) {
			done <- outcome{v, err}
		} else if late != nil {
			late(v, err)
		}
	}) {
		return call()
	}
	select {
	case o := <-done:
		return o.v, o.err
	case <-ctx.Done():
		if !state.CompareAndSwap(0, 2) {
			o := <-done // it finished just now
			return o.v, o.err
		}
		var zero T
		return zero, fmt.Errorf("%w: %w", errLeftBehind, context.Cause(ctx))
	}
}

// contextTimeouts reports whether rdb was made with ContextTimeoutEnabled.
func contextTimeouts(rdb redis.UniversalClient) bool {
	switch r := rdb.(type) {
	case *redis.Client:
		return r.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return r.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return r.Options().ContextTimeoutEnabled
	}
	return false
}

// goBehind runs f in a goroutine that Close waits for, and reports whether it
// did: once Close has started waiting, it does not.
func (c *Client) goBehind(f func()) bool {
	c.behindMu.Lock()
	defer c.behindMu.Unlock()
	if c.behindClosed {
		return false
	}
	c.behind.Go(f)
	return true
}

// releaseMode tells release.lua what to give back.
type releaseMode string

const (
	releaseOne   releaseMode = "0" // one of several holds
	releaseLast  releaseMode = "1" // the last hold: the lock
	releaseLeave releaseMode = "2" // a waiter gives up: unregister it, pass the lock on if kept for it
)

// release runs release.lua once: one round trip. ttl is the lock's TTL, which
// sets how long a freed lock is kept for the waiter that is told.
func (c *Client) release(ctx context.Context, k keys, owner string, mode releaseMode, ttl time.Duration) (int64, error) {
	code, err := k.kind.release.Run(ctx, c.cmd, k.releaseKeys, owner, k.channel, string(mode), reserveFor(ttl).Milliseconds()).Int64()
	if err != nil {
		return 0, fmt.Errorf("dlock: release %q: %w", k.name, err)
	}
	return code, nil
}

// reserveFor is how long a freed lock is kept for the waiter chosen to have
// it: long enough for the message to reach it and its acquire to come back,
// short enough that a waiter that died costs little.
func reserveFor(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 50*time.Millisecond), time.Second)
}

// keepAlive is how often a waiter renews its registration (by trying again).
// A registration lapses after three of these, so a waiter that died is
// forgotten soon after.
func keepAlive(ttl time.Duration) time.Duration {
	return min(max(ttl/6, 50*time.Millisecond), 5*time.Second)
}

// extend runs extend.lua once over a batch of holds: one round trip.
func (c *Client) extend(ctx context.Context, batch []extendItem) ([]int64, error) {
	ks := make([]string, len(batch))
	args := make([]any, 0, 2*len(batch))
	for i, it := range batch {
		ks[i] = it.k.lease
		args = append(args, it.k.kind.leaseType(), it.owner, it.ttl.Milliseconds())
	}
	codes, err := scripts.extend.Run(ctx, c.cmd, ks, args...).Int64Slice()
	if err != nil {
		if len(batch) == 1 {
			return nil, fmt.Errorf("dlock: extend %q: %w", batch[0].k.name, err)
		}
		return nil, fmt.Errorf("dlock: extend %d leases: %w", len(batch), err)
	}
	if len(codes) != len(batch) {
		return nil, fmt.Errorf("dlock: extend %d leases: unexpected reply %v", len(batch), codes)
	}
	return codes, nil
}

// extendItem is one lease in an extend batch.
type extendItem struct {
	k     keys
	owner string
	ttl   time.Duration
}

// cleanupContext returns a context for releasing a lock after the caller's
// context may have ended: it keeps ctx's values but not its cancellation, and
// is bounded by a timeout. A context that can never be cancelled is used as it
// is; the Redis client's own timeouts bound the call.
func cleanupContext(ctx context.Context, ttl time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), min(max(ttl, time.Second), 5*time.Second))
}
