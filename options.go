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
	// MinTTL is the smallest TTL accepted: below it a renewal period leaves too
	// little room for a round trip and the clock allowance.
	MinTTL = 100 * time.Millisecond
	// DefaultNodeTimeout bounds each request to one node of a RedLock
	// (NewRedLock) when WithNodeTimeout is not given.
	DefaultNodeTimeout = 100 * time.Millisecond
	// DefaultPrefix starts every key and channel name unless WithPrefix says otherwise.
	DefaultPrefix = "dlock:"
	// MaxNameLen is the longest name of a primitive, and the longest prefix, in
	// bytes. A longer name is an error of every call, before anything is sent.
	MaxNameLen = 1024
	// MaxValueLen is the longest value, in bytes, kept in Redis for a caller (a
	// Client's name, an Election candidate's value); a longer one is an error.
	MaxValueLen = 4096
)

// Option configures a Client, given to New, or one primitive, given to the
// Client method that makes it, over the Client's default. A Client-only
// option given to a primitive is an error.
type Option struct {
	name       string
	clientOnly bool
	groupOnly  bool
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
	// noScripts: WithoutScripts. Default: false, scripts.
	noScripts bool
	// A Group's: WithResultTTL (default 0) and WithMaxResultLen (default
	// DefaultMaxResultLen).
	resultTTL    time.Duration
	maxResultLen int

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

		maxResultLen: DefaultMaxResultLen,

		scripts:     &protocol.DefaultScripts,
		notify:      notify.DefaultConfig,
		recordEvery: recordEvery,
	}
}

// with returns a copy of cfg with opts applied. forClient tells whether the
// options configure a Client or a single primitive.
func (cfg config) with(opts []Option, forClient bool) (config, error) {
	return cfg.apply(opts, forClient, false)
}

// apply is with, for a Group too: forGroup allows the options of a Group's
// own.
func (cfg config) apply(opts []Option, forClient, forGroup bool) (config, error) {
	for _, o := range opts {
		if o.apply == nil {
			return cfg, errors.New("dlock: zero Option value; build options with the With… functions")
		}
		if o.clientOnly && !forClient {
			return cfg, fmt.Errorf("dlock: %s applies to a Client only: pass it to dlock.New", o.name)
		}
		if o.groupOnly && !forGroup {
			return cfg, fmt.Errorf("dlock: %s applies to a Group only: pass it to Client.Group", o.name)
		}
		if err := o.apply(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// WithTTL sets the lease TTL, how long a lock outlives a holder that stopped
// renewing it. It must be at least MinTTL. Default: DefaultTTL (30s).
func WithTTL(ttl time.Duration) Option {
	return Option{name: "WithTTL", apply: func(c *config) error {
		if ttl < MinTTL {
			return fmt.Errorf("dlock: WithTTL(%v): the TTL must be at least %v", ttl, MinTTL)
		}
		c.ttl = ttl
		return nil
	}}
}

// WithResultTTL sets how long a Group keeps serving a result after its
// function returned: a caller of the key that arrives within d of that gets
// the result without running the function. Group only. Default: 0, a result
// goes only to the callers that were waiting for it.
func WithResultTTL(d time.Duration) Option {
	return Option{name: "WithResultTTL", groupOnly: true, apply: func(c *config) error {
		if d < 0 {
			return fmt.Errorf("dlock: WithResultTTL(%v): a negative TTL", d)
		}
		c.resultTTL = d
		return nil
	}}
}

// WithMaxResultLen sets the longest value, in bytes, a Group shares, at
// least 1: a longer one is an error for the callers of the process that
// made it, and is not kept in Redis. Group only. Default:
// DefaultMaxResultLen (1 MiB).
func WithMaxResultLen(n int) Option {
	return Option{name: "WithMaxResultLen", groupOnly: true, apply: func(c *config) error {
		if n < 1 {
			return fmt.Errorf("dlock: WithMaxResultLen(%d): the length must be at least 1 byte (leave the option out for the default, DefaultMaxResultLen)", n)
		}
		c.maxResultLen = n
		return nil
	}}
}

// WithoutRenewal makes leases fixed: each expires its TTL after it was
// acquired or last extended (Lease.Extend), and then counts as lost. Default:
// leases are renewed while held.
func WithoutRenewal() Option {
	return Option{name: "WithoutRenewal", apply: func(c *config) error {
		c.renew = false
		return nil
	}}
}

// WithPrefix sets the start of every Redis key and channel name the Client
// uses, so that applications can share a Redis: no '{' or '}', at most
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

// WithClientName names the Client for the people on call: Inspect, Locks and
// the dlock command show the name beside its owner ids. It must be non-empty
// and at most MaxValueLen bytes. Client only. Default: "host:pid".
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

// WithAutoPipeline sends the Client's lock requests through go-redis's
// autopipeliner (experimental, shared with the Redis client's other users and
// set by its Options.AutoPipelineOptions), for an rdb made with
// ContextTimeoutEnabled, whose requests the Client does not batch itself.
// Client only. Default: the Client's own batching.
func WithAutoPipeline() Option {
	return Option{name: "WithAutoPipeline", clientOnly: true, apply: func(c *config) error {
		c.autoPipeline = true
		return nil
	}}
}

// WithWaitReplicas makes every write that grants or lengthens a hold wait, in
// the same round trip, until n replicas acknowledged it or timeout passed. An
// acquire they do not acknowledge is undone and fails, Lock's too, with an
// error matching ErrNotAcquired and ErrNotReplicated; a lease whose renewals
// go unacknowledged until its local deadline is lost, and Lease.Extend's error
// matches ErrNotReplicated. It narrows, and does not close, the window in which
// a failover grants a lock twice (see docs/failure-model.md). n must not be
// negative (0: no WAIT); timeout must be positive and at most half the Redis
// client's ReadTimeout. Client only. Default: no WAIT.
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

// WithNodeTimeout bounds each request to one node of a RedLock: a node that
// has not answered within d counts as not having done it. Keep d well below
// the TTL. NewRedLock only. Default: DefaultNodeTimeout (100ms).
func WithNodeTimeout(d time.Duration) Option {
	return Option{name: "WithNodeTimeout", clientOnly: true, apply: func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("dlock: WithNodeTimeout(%v): the timeout must be positive", d)
		}
		c.nodeTimeout = d
		return nil
	}}
}

// WithoutScripts makes a Client that sends no command of Redis's @scripting
// category (EVAL, EVALSHA and their _RO forms, SCRIPT, FUNCTION, FCALL), for
// servers and ACL users that forbid scripts. Its Mutex keeps, on plain
// commands and MULTI/EXEC: the lease and its TTL, renewal and release by
// its owner alone, a fence per acquisition that rises across holders,
// expiry and a restart, the lost-lease signal, re-entry through the
// context, and waiting woken by the release. It gives up, against a Client
// with scripts: order among waiters, hand-off and the rule against barging
// (a release wakes every waiter, and they race; a newcomer may win); and
// refusing an acquire that reaches Redis late, after its owner gave up:
// such a copy may hold the name, never renewed, until at most min(TTL, 2s)
// after it was sent, by the server's clock as the Client reads it
// (docs/choosing.md has the table of what each mode keeps). Every other
// kind (FairMutex, RWMutex, Semaphore, CountDownLatch, Election), Inspect,
// Locks, ForceRelease, NewRedLock and WithWaitReplicas return an error
// matching errors.ErrUnsupported. A name is used in one mode: a request of
// either mode on a lock the other holds fails, naming the option.
//
// It needs SET … IFEQ and DELIFEQ (Valkey 9.0 or later): on a server
// without them, the Client's first use and Check fail, naming what is
// missing. Client only. Default: scripts.
func WithoutScripts() Option {
	return Option{name: "WithoutScripts", clientOnly: true, apply: func(c *config) error {
		c.noScripts = true
		return nil
	}}
}
