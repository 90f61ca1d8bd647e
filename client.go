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

	ren    *renewer
	note   *notifier
	events *dispatcher // runs the hooks called from background work

	closeOnce sync.Once
	closing   chan struct{} // closed when Close starts
	checked   sync.Once     // Check has been started in the background

	behindMu     sync.Mutex
	behindClosed bool // Close is waiting for behind
	// behind: work in the background, which Close waits for: requests left
	// behind by callers whose context ended, waiters' unregistrations,
	// releases retried after a failed Unlock, and waiting Locks (track).
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
	c.events = &dispatcher{}
	return c, nil
}

// Close releases every lock still held through c (best effort, bounded by a
// few seconds), ends their leases with an error matching ErrClosed, wakes every
// waiting Lock (which returns ErrClosed once it has left the lock's queue in
// Redis), and stops c's goroutines, waiting for them and for every hook call
// in flight. It does not close the Redis client. Calling Close again does
// nothing.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closing)
		holds := c.ren.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var errs []error
		for _, h := range holds {
			if _, rerr := c.release(ctx, h.k, h.owner, releaseLast, h.currentTTL(), 0); rerr != nil {
				errs = append(errs, rerr)
			}
			h.end(fmt.Errorf("%w: lock %q ended by Close", ErrClosed, h.k.name), nil)
		}
		c.behindMu.Lock()
		c.behindClosed = true
		c.behindMu.Unlock()
		c.behind.Wait()
		c.events.close()
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
// touch them all. Which keys a kind has, and in which order its scripts take
// them, is the kind's (see lockKind); the package documentation lists them.
type keys struct {
	kind    *lockKind
	name    string // as the caller gave it
	tag     string // prefix, namespace and {hash tag}: the lock hash's name, and the stem of every other
	channel string // the stem of the wake-up channels; a Client listens on channel + ":" + its id

	acquireKeys []string // KEYS of the acquire script
	releaseKeys []string // KEYS of the release script but the last, the release marker
	leaseKeys   []string // one lease's KEYS group of extend.lua; the first is also ttl.lua's KEYS
}

func (c *Client) keys(kind *lockKind, name string) keys {
	tag := c.tag(kind.space, name)
	names := func(suffixes []string) []string {
		ks := make([]string, len(suffixes))
		for i, s := range suffixes {
			ks[i] = tag + s
		}
		return ks
	}
	return keys{kind: kind, name: name, tag: tag, channel: tag + ":wake",
		acquireKeys: names(kind.acquireKeys), releaseKeys: names(kind.releaseKeys), leaseKeys: names(kind.leaseKeys)}
}

// marker is the key of the marker of a call made by owner (an acquisition's
// owner id, or a latch call's own id): a script that must answer a retry of
// the same call (go-redis retries after a lost reply) as it answered the call
// sets it for markerTTL. A release that freed a hold sets it, so that its
// retry answers "released" again instead of "not held".
func (k keys) marker(owner string) string { return k.tag + ":done:" + owner }

// markerTTL is how long a release marker (and a latch call's marker) lives.
// A reply read later than markerTrust after its request was first sent may
// come from a retry that ran after the marker had gone, so a "not held" in it
// is reported as uncertain.
const (
	markerTTL   = 10 * time.Second
	markerTrust = markerTTL - time.Second
)

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

// checkCall rejects a call that cannot proceed: a nil context, a closed
// Client. The first call that passes starts the Client's look at Redis's
// eviction policy (see Check).
func (c *Client) checkCall(ctx context.Context, op, name string) error {
	if ctx == nil {
		return fmt.Errorf("dlock: %s %q: nil context", op, name)
	}
	if c.closed() {
		return fmt.Errorf("%w: %s %q", ErrClosed, op, name)
	}
	c.checked.Do(func() {
		c.goBehind(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := c.Check(ctx); err != nil {
				c.log.Warn("dlock: Redis may not keep the locks' promises", "err", err)
			}
		})
	})
	return nil
}

// Check asks Redis whether it can keep this package's promises, and returns
// an error that says why not: Redis cannot be reached, or its
// maxmemory-policy is not noeviction. Under any other policy Redis may evict
// keys when it runs out of memory: a lock's hash, so that a second owner gets
// a held lock, or a fence key, so that fences start again from the clock. The
// volatile-* policies evict exactly such keys, since every key a lock writes
// has an expiry. With noeviction, a Redis out of memory refuses new locks
// with an error instead. A policy Redis will not tell (CONFIG GET refused, as
// some managed services do) is not an error.
//
// New does not contact Redis; the Client runs Check once, in the background,
// when it is first used, and logs a warning if it fails.
func (c *Client) Check(ctx context.Context) error {
	if ctx == nil {
		return errors.New("dlock: check: nil context")
	}
	v, err := c.rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	var rerr redis.Error
	switch {
	case errors.As(err, &rerr):
		c.log.Info("dlock: cannot read Redis's maxmemory-policy; it must be noeviction", "err", err)
		return nil
	case err != nil:
		return fmt.Errorf("dlock: check: read maxmemory-policy: %w", err)
	}
	if p, ok := v["maxmemory-policy"]; ok && p != "noeviction" {
		return fmt.Errorf("dlock: check: Redis's maxmemory-policy is %q: it may evict locks and fence keys; set it to noeviction", p)
	}
	return nil
}

// acquireResult is what acquire.lua answered, decoded.
type acquireResult struct {
	fence     int64         // > 0 when the lock was taken
	reentered bool          // the owner's hold count went up
	gone      bool          // re-entry asked, but the owner holds nothing; for a Semaphore, more permits asked than its total
	pttl      time.Duration // when held by another: its remaining TTL, -1ms if none
}

// acquire runs the kind's acquire script once: one round trip. If the lock
// is held and register is above zero, owner is registered as a waiter for that
// long. extra are the kind's own arguments, after the four every acquire
// script takes.
func (c *Client) acquire(ctx context.Context, k keys, owner string, ttl, register time.Duration, extra ...any) (acquireResult, error) {
	args := append([]any{owner, ttl.Milliseconds(), "0", register.Milliseconds()}, extra...)
	return c.runAcquire(ctx, k, args)
}

// reenter runs the kind's acquire script to add a hold of owner, which then
// has count holds: one round trip.
func (c *Client) reenter(ctx context.Context, k keys, owner string, ttl time.Duration, count int) (acquireResult, error) {
	return c.runAcquire(ctx, k, []any{owner, ttl.Milliseconds(), "1", count})
}

func (c *Client) runAcquire(ctx context.Context, k keys, args []any) (acquireResult, error) {
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

// track counts a call in progress that Close is to wait for (a waiting Lock,
// which must leave the queue in Redis before Close returns), and reports
// whether it did: once Close has started waiting, it does not, and the call
// must not proceed. A tracked call ends with untrack.
func (c *Client) track() bool {
	c.behindMu.Lock()
	defer c.behindMu.Unlock()
	if c.behindClosed {
		return false
	}
	c.behind.Add(1)
	return true
}

func (c *Client) untrack() { c.behind.Done() }

// behindOrNow runs f in the background if it can (see goBehind), else on the
// caller's goroutine.
func (c *Client) behindOrNow(f func()) {
	if !c.goBehind(f) {
		f()
	}
}

// releaseMode tells release.lua what to give back.
type releaseMode string

const (
	releaseOne   releaseMode = "0" // one of several holds: the count that remains is given
	releaseLast  releaseMode = "1" // the last hold: the lock
	releaseLeave releaseMode = "2" // a waiter gives up: unregister it, pass the lock on if kept for it
)

// release runs the kind's release script once: one round trip. ttl is the
// lock's TTL, which sets how long a freed lock is kept for the waiter that is
// told; count, for releaseOne, the holds that remain.
func (c *Client) release(ctx context.Context, k keys, owner string, mode releaseMode, ttl time.Duration, count int) (int64, error) {
	ks := append(k.releaseKeys[:len(k.releaseKeys):len(k.releaseKeys)], k.marker(owner))
	code, err := k.kind.release.Run(ctx, c.cmd, ks, owner, k.channel, string(mode), reserveFor(ttl).Milliseconds(), count, markerTTL.Milliseconds()).Int64()
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

// extend runs extend.lua once over a batch of leases: one round trip.
func (c *Client) extend(ctx context.Context, batch []extendItem) ([]int64, error) {
	n := 0
	for _, it := range batch {
		n += len(it.k.leaseKeys)
	}
	ks := make([]string, 0, n)
	args := make([]any, 0, 5*len(batch))
	for _, it := range batch {
		how := "gt"
		if it.exact {
			how = "set"
		}
		ks = append(ks, it.k.leaseKeys...)
		args = append(args, it.k.kind.leaseType(), it.owner, it.ttl.Milliseconds(), how, len(it.k.leaseKeys))
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
	// exact: the lease lapses ttl from now even if it would have lapsed later
	// (Lease.Extend); otherwise it is only lengthened (a renewal).
	exact bool
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
