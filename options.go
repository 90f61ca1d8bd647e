package dlock

import (
	"errors"
	"fmt"
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
	// DefaultPrefix starts every key and channel name unless WithPrefix says otherwise.
	DefaultPrefix = "dlock:"
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
}

func defaultConfig() config {
	return config{
		prefix: DefaultPrefix,
		logger: slog.New(slog.DiscardHandler),
		ttl:    DefaultTTL,
		renew:  true,
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
// contain '{' or '}', which delimit the hash tag. Client only. Default:
// DefaultPrefix ("dlock:").
func WithPrefix(prefix string) Option {
	return Option{name: "WithPrefix", clientOnly: true, apply: func(c *config) error {
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("dlock: WithPrefix(%q): a prefix must not contain '{' or '}'", prefix)
		}
		c.prefix = prefix
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
// batches the requests of concurrent goroutines into pipelines. With 64
// goroutines on distinct locks it made 1.5–1.9× the lock operations per second
// of a Client without it in the bench module's runs; a lone caller's latency
// stayed within those runs' noise. The autopipeliner is shared with every
// other user of the Redis client and configured by its
// Options.AutoPipelineOptions; go-redis marks it experimental, and it does not
// give up a request at its context's deadline, so the Client waits for each
// acquire on another goroutine. New fails if that configuration is invalid.
// Client only. Default: requests go through the Redis client's connection
// pool, one request per connection at a time.
func WithAutoPipeline() Option {
	return Option{name: "WithAutoPipeline", clientOnly: true, apply: func(c *config) error {
		c.autoPipeline = true
		return nil
	}}
}
