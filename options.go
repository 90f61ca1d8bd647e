package dlock

import (
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/protocol"
	"log/slog"
	"strings"
	"time"
)

// Defaults and limits.
const (
	// DefaultTTL is the lease TTL when WithTTL is not given.
	DefaultTTL = 30 * time.Second
	// MinTTL is the smallest TTL accepted. Below it a lease cannot be renewed
	// reliably: the time between renewals leaves too little room for one round
	// trip, a scheduling delay and the clock drift allowance.
	MinTTL = 100 * time.Millisecond
	// DefaultNodeTimeout bounds each request to one node of a RedLock
	// (NewRedLock) when WithNodeTimeout is not given.
	DefaultNodeTimeout = 100 * time.Millisecond
	// DefaultPrefix starts every key and channel name unless WithPrefix says otherwise.
	DefaultPrefix = "dlock:"
	// MaxNameLen is the longest name, in bytes, of a lock, a semaphore or a
	// latch, and the longest prefix WithPrefix accepts: every key holds the
	// prefix and the name, so an unbounded one would let a single call make
	// Redis hold as much memory as it was given. A longer one is an error of
	// every call, returned before anything is sent to Redis.
	MaxNameLen = 1024
	// MaxValueLen is the longest value, in bytes, that the library keeps in
	// Redis for a caller: a Client's name (WithClientName), an Election
	// candidate's value. A longer one is an error, returned before anything
	// is sent.
	MaxValueLen = 4096
)

// Option configures a Client (given to New, it sets the default for every
// primitive of that Client) or one primitive (given to Client.Mutex, it
// overrides the Client's default for that primitive). Options that make sense
// only for a Client say so; giving them to a primitive is an error.
type Option struct {
	name       string
	clientOnly bool
	apply      func(*config) error
}

// config is everything an Option can set.
type config struct {
	prefix string       // default: DefaultPrefix
	logger *slog.Logger // default: discards everything
	hooks  *Hooks       // default: none
	ttl    time.Duration
	renew  bool // default: true
	// autoPipeline: send lock requests through the Redis client's
	// autopipeliner. Default: false.
	autoPipeline bool
	// wait: WithWaitReplicas. Default: no WAIT.
	wait protocol.Replicas
	// nodeTimeout: WithNodeTimeout; 0 if not given.
	nodeTimeout time.Duration
	// clientName: WithClientName; default: host:pid.
	clientName string

	// Set by tests only (export_test.go), per Client:
	// scripts: the scripts the Client's nodes run. Default: defaultScripts.
	scripts *protocol.ScriptSet
	// notify: the notifier's tuning. Default: notify.DefaultConfig.
	notify notify.Config
	// recordEvery: how often the Client's record is written at most.
	// Default: recordEvery.
	recordEvery time.Duration
}

func defaultConfig() config {
	return config{
		prefix: DefaultPrefix,
		logger: slog.New(slog.DiscardHandler),
		ttl:    DefaultTTL,
		renew:  true,

		scripts:     &protocol.DefaultScripts,
		notify:      notify.DefaultConfig,
		recordEvery: recordEvery,
	}
}

// with returns a copy of cfg with opts applied. forClient tells whether the
// options configure a Client or a single primitive.
func (cfg config) with(opts []Option, forClient bool) (config, error) {
	for _, o := range opts {
		if o.apply == nil {
			return cfg, errors.New("dlock: zero Option value; build options with the With… functions")
		}
		if o.clientOnly && !forClient {
			return cfg, fmt.Errorf("dlock: %s applies to a Client only: pass it to dlock.New", o.name)
		}
		if err := o.apply(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// WithTTL sets the lease TTL: how long a lock outlives a holder that stopped
// renewing it (crashed, paused or cut off). While the lock is held it is
// renewed, unless WithoutRenewal is given. Default: DefaultTTL
// (30s). It must be at least MinTTL (100ms).
func WithTTL(ttl time.Duration) Option {
	return Option{name: "WithTTL", apply: func(c *config) error {
		if ttl < MinTTL {
			return fmt.Errorf("dlock: WithTTL(%v): the TTL must be at least %v", ttl, MinTTL)
		}
		c.ttl = ttl
		return nil
	}}
}

// WithoutRenewal makes every lease a fixed one: it expires TTL after it was
// acquired (or last extended with Lease.Extend), whether or not the holder is
// done. When that time passes the lease counts as lost. Default: leases are
// renewed while held.
func WithoutRenewal() Option {
	return Option{name: "WithoutRenewal", apply: func(c *config) error {
		c.renew = false
		return nil
	}}
}

// WithPrefix sets the text that starts every Redis key and channel name the
// Client uses, so that several applications can share one Redis. It must not
// contain '{' or '}', which delimit the hash tag, nor be longer than
// MaxNameLen bytes. Client only. Default: DefaultPrefix ("dlock:").
func WithPrefix(prefix string) Option {
	return Option{name: "WithPrefix", clientOnly: true, apply: func(c *config) error {
		switch {
		case len(prefix) > MaxNameLen:
			return fmt.Errorf("dlock: WithPrefix: a prefix of %d bytes: at most MaxNameLen (%d) are allowed", len(prefix), MaxNameLen)
		case strings.ContainsAny(prefix, "{}"):
			return fmt.Errorf("dlock: WithPrefix(%q): a prefix must not contain '{' or '}'", prefix)
		}
		c.prefix = prefix
		return nil
	}}
}

// WithClientName names the Client for the people on call: Redis keeps the
// name while the Client is in use, and Inspect, Locks and the dlock command
// show it beside the owner ids of its holds and waits (LockState's Holder and
// Waiter, ClientName). It must not be empty, nor longer than MaxValueLen
// bytes. Client only. Default: the host name and the process id, "host:pid".
//
// The name costs one key per Client, <prefix>client:<Client.ID>, written at
// its first acquisition and refreshed at most every 20s after: by the
// renewal rounds while it holds locks (in their pipeline, no request of its
// own, except with WithWaitReplicas, whose rounds go to the leases' server),
// and by its attempts while it waits. It expires a minute after the last
// refresh, and Close removes it. Nothing is written per acquisition.
func WithClientName(name string) Option {
	return Option{name: "WithClientName", clientOnly: true, apply: func(c *config) error {
		switch {
		case name == "":
			return errors.New("dlock: WithClientName: empty name")
		case len(name) > MaxValueLen:
			return fmt.Errorf("dlock: WithClientName: a name of %d bytes: at most MaxValueLen (%d) are allowed", len(name), MaxValueLen)
		}
		c.clientName = name
		return nil
	}}
}

// WithLogger sets the logger for state changes: a lease lost, a renewal that
// failed and is being retried, a release that failed. Acquisitions and
// releases are logged at Debug level. Client only. Default: nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return Option{name: "WithLogger", clientOnly: true, apply: func(c *config) error {
		if l == nil {
			return errors.New("dlock: WithLogger(nil): pass a logger, or omit the option to log nothing")
		}
		c.logger = l
		return nil
	}}
}

// WithHooks sets functions called on lock events, for metrics. Client only.
// Default: none.
func WithHooks(h Hooks) Option {
	return Option{name: "WithHooks", clientOnly: true, apply: func(c *config) error {
		c.hooks = &h
		return nil
	}}
}

// WithAutoPipeline sends the Client's lock requests (acquire, release,
// renewal) through go-redis's autopipeliner (redis.Client.AutoPipeline), which
// batches the requests of concurrent goroutines into pipelines. The Client
// batches its acquires and releases by itself already (see New), with fewer
// allocations, and did as well or better than the autopipeliner in the bench
// module's runs with 64 goroutines on distinct locks; this option is for
// a Redis client made with ContextTimeoutEnabled, whose requests the Client
// does not batch. The autopipeliner is shared with every
// other user of the Redis client and configured by its
// Options.AutoPipelineOptions; go-redis marks it experimental, and it does not
// give up a request at its context's deadline, so the Client waits for each
// acquire on another goroutine. New fails if that configuration is invalid.
// Client only. Default: the Client's own batching (see New).
func WithAutoPipeline() Option {
	return Option{name: "WithAutoPipeline", clientOnly: true, apply: func(c *config) error {
		c.autoPipeline = true
		return nil
	}}
}

// WithWaitReplicas makes every write that grants or lengthens a hold (an
// acquire, a re-entry, a renewal, Lease.Extend) wait until n replicas have
// acknowledged it, for at most timeout: the script and a WAIT go to the
// server that owns the lock in one pipeline on one connection (never through
// the autopipeliner), so it costs no extra round trip, only the time the
// replicas take.
//
// An acquire that fewer than n replicas acknowledged is undone, and its error
// matches ErrNotAcquired and ErrNotReplicated; Lock returns it rather than
// waiting on. A renewal that fewer than n acknowledged does not lengthen the
// lease on the client: it is retried, and if no renewal is acknowledged
// before the lease's local deadline the lease is lost (Done, Err matching
// ErrLockLost and ErrNotReplicated). Lease.Extend returns an error matching
// ErrNotReplicated.
//
// It narrows, and does not close, the window in which a failover to a
// replica grants a lock a second time: an acknowledged write can still be
// lost (a replica acknowledges what it received, not what it has made
// durable, and the failover may promote another replica), and WAIT is not
// consensus. See "Sentinel, replicas and WAIT" in the package documentation.
//
// n must not be negative (0 turns WAIT off); timeout must be positive and at
// most half the Redis client's ReadTimeout, which bounds a pipeline's reply.
// It needs a *redis.Client (plain or Sentinel's FailoverClient) or a
// *redis.ClusterClient. Client only. Default: no WAIT.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return Option{name: "WithWaitReplicas", clientOnly: true, apply: func(c *config) error {
		switch {
		case n < 0:
			return fmt.Errorf("dlock: WithWaitReplicas(%d, %v): the number of replicas must not be negative", n, timeout)
		case n > 0 && timeout <= 0:
			return fmt.Errorf("dlock: WithWaitReplicas(%d, %v): the timeout must be positive (WAIT 0 would block forever)", n, timeout)
		}
		c.wait = protocol.Replicas{N: n, Timeout: timeout}
		return nil
	}}
}

// WithNodeTimeout bounds each request to one node of a RedLock (NewRedLock):
// a node that has not answered within d counts as not having granted,
// extended or released, so a slow or dead node costs a call at most d, and
// none when a majority answers sooner. Keep d well below the TTL: an acquire
// whose majority took longer than the TTL less the drift allowance is
// undone. Client only, NewRedLock only. Default: DefaultNodeTimeout (100ms).
func WithNodeTimeout(d time.Duration) Option {
	return Option{name: "WithNodeTimeout", clientOnly: true, apply: func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("dlock: WithNodeTimeout(%v): the timeout must be positive", d)
		}
		c.nodeTimeout = d
		return nil
	}}
}
