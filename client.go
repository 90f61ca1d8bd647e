package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/clienthook"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/rclient/goredis"
	"github.com/dlock-go/dlock/internal/renew"
	"os"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client runs this package's primitives on one Redis deployment and renews
// the leases acquired through them. Make one with New or NewRedLock, share it
// (it is safe for concurrent use), and Close it when done.
type Client struct {
	e         *engine
	cfg       config
	events    *dispatcher // runs the hooks called from background work
	closeOnce sync.Once
}

// New returns a Client on rdb: a *redis.Client (plain, or Sentinel's from
// redis.NewFailoverClient) or a *redis.ClusterClient. It does not contact
// Redis; a nil or zero rdb is an error. The options set the defaults of every
// primitive made from the Client, and the Client-only ones configure it.
//
// A Lock returns when its ctx ends, even if Redis stalls. Concurrent acquires
// and releases may share a pipeline, which go-redis hooks see as one
// (ProcessPipelineHook), unless rdb was made with ContextTimeoutEnabled.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if why := unusable(rdb); why != "" {
		return nil, errs.Op(nil, nil, "New: the Redis client is %s", why)
	}
	cfg, err := defaultConfig().with(opts, true)
	if err != nil {
		return nil, err
	}
	if cfg.nodeTimeout > 0 {
		return nil, errors.New("dlock: New: WithNodeTimeout applies to NewRedLock only")
	}
	// Unless rdb gives up a request at its context's end by itself
	// (ContextTimeoutEnabled, no autopipeliner), the script calls of
	// concurrent callers share round trips (goredis's batcher), and each
	// acquire waits for its request on another goroutine so that it can
	// return at its context's end (within).
	if _, ring := rdb.(*redis.Ring); ring && cfg.wait.N > 0 {
		return nil, errs.Op(nil, nil, "New: WithWaitReplicas(%d, %v): WAIT needs a *redis.Client, a FailoverClient or a *redis.ClusterClient, not a %T", cfg.wait.N, cfg.wait.Timeout, rdb)
	}
	rc, err := goredis.New(rdb, cfg.autoPipeline)
	if err != nil {
		return nil, errs.Op(nil, err, "New: WithAutoPipeline")
	}
	return newOn(rc, cfg)
}

// newOn returns a Client on the Redis client rc, configured by cfg.
func newOn(rc rclient.Client, cfg config) (*Client, error) {
	if cfg.noScripts {
		if cfg.wait.N > 0 {
			return nil, errs.Op(errors.ErrUnsupported, nil, "New: WithWaitReplicas with WithoutScripts")
		}
		b, err := protocol.NewPlain(protocol.NewNode(rc, cfg.scripts))
		if err != nil {
			return nil, errs.Op(nil, err, "New: WithoutScripts")
		}
		return newClient(b, cfg, "New", make(chan struct{}))
	}
	b, err := protocol.WithWait(protocol.NewNode(rc, cfg.scripts), cfg.wait)
	if err != nil {
		return nil, errs.Op(nil, err, "New: WithWaitReplicas(%d, %v)", cfg.wait.N, cfg.wait.Timeout)
	}
	return newClient(b, cfg, "New", make(chan struct{}))
}

// newClient returns a Client on b; closing is to be closed when its Close
// starts.
func newClient(b protocol.Backend, cfg config, op string, closing chan struct{}) (*Client, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, errs.Op(nil, err, "%s: make client id", op)
	}
	hexID := hex.EncodeToString(id[:])
	events := &dispatcher{}
	bg := &background{}
	e := &engine{
		backend: b, traits: b.Traits(), bg: bg, hooks: cfg.hooks, log: cfg.logger, prefix: cfg.prefix, closing: closing,
		note:    notify.New(b, bg.doSoon, cfg.logger, closing, cfg.notify),
		id:      hexID,
		own:     ":" + hexID,
		listen:  ":" + hexID,
		name:    cfg.clientName,
		nameKey: clientKey(cfg.prefix, hexID),

		recordEvery: cfg.recordEvery,
	}
	if e.traits.WakeAll {
		e.listen = ""
	}
	if e.name == "" {
		e.name = defaultClientName()
	}
	e.admin, _ = b.(protocol.Admin)
	e.sems, _ = b.(protocol.Semaphores)
	e.latches, _ = b.(protocol.Latches)
	e.elections, _ = b.(protocol.Elections)
	e.ren = renew.New(b, cfg.logger, leaseEvents{cfg.hooks, events, e})
	return &Client{e: e, cfg: cfg, events: events}, nil
}

// clientKey is where Redis keeps the record of the Client whose id is id.
func clientKey(prefix, id string) string { return prefix + "client:" + id }

// defaultClientName is the host name and the process id, "host:pid".
func defaultClientName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// Name returns the Client's name (WithClientName, default "host:pid"), which
// Inspect, Locks and the dlock command show beside its owner ids.
func (c *Client) Name() string {
	if c == nil || c.e == nil {
		return ""
	}
	return c.e.name
}

// ID returns the Client's random id, which starts the owner id of every lease
// taken through it (Lease.Owner). The Client logs it at Info on first use.
func (c *Client) ID() string {
	if c == nil || c.e == nil {
		return ""
	}
	return c.e.id
}

// Close releases the locks still held through c (best effort, for a few
// seconds), ends their leases with ErrClosed, makes waiting calls return
// ErrClosed, and stops c's goroutines, waiting for them and for hook calls in
// flight. It returns the releases' errors, and does not close the Redis
// client. Calling Close again does nothing.
func (c *Client) Close() error {
	if c == nil || c.e == nil {
		return errors.New("dlock: Close of a nil or zero Client")
	}
	var err error
	c.closeOnce.Do(func() {
		e := c.e
		close(e.closing)
		live := e.ren.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var failed []error
		for _, t := range live {
			if _, rerr := e.backend.Release(ctx, *t.K, protocol.ReleaseArgs{Owner: t.Owner, Fence: t.FenceArg(), Mode: protocol.ReleaseLast, TTL: e.ren.TTLOf(t), Void: t.Doubt}); rerr != nil {
				failed = append(failed, rerr)
			}
			cause := errs.Op(ErrClosed, nil, "lock %q ended by Close", t.K.Name)
			if e.ren.End(t, cause, nil) {
				e.leadershipEnded(context.Background(), t, cause)
			}
		}
		e.bg.close() // a write of the record in flight lands first
		if e.announced.Load() != 0 {
			// Best effort: otherwise the record expires by itself.
			_ = e.backend.Announce(ctx, e.nameKey, "", 0)
		}
		c.events.close()
		e.note.Close()
		e.backend.Settle()
		err = errors.Join(failed...)
	})
	return err
}

// Check returns an error if Redis cannot keep this package's promises: it
// cannot be reached or refuses the client, its maxmemory-policy is not
// noeviction, or, with WithWaitReplicas(n), a primary has fewer than n
// replicas connected. A policy Redis does not disclose is not an error, so
// Check suits a readiness probe. Like the Client's first use, it also reads
// what Redis says of its data (INFO: its run id, replication id, counts of
// evictions and flushes), by which an Unlock sent again after a lost reply
// tells its own release from a hold Redis lost. Like any answer from Redis,
// a successful Check shows the Client's address leads to it: a waiting call
// rides out a later outage (see the package's Outages).
func (c *Client) Check(ctx context.Context) error {
	switch {
	case c == nil || c.e == nil:
		return errors.New("dlock: Check of a nil or zero Client")
	case ctx == nil:
		return errors.New("dlock: check: nil context")
	}
	return c.e.check(ctx)
}

// acquirer describes, for a primitive, the lock of kind k called name with
// opts over the Client's defaults. An empty or too long name, an invalid
// option or a nil Client are errors the acquirer returns from every call.
func (c *Client) acquirer(k *protocol.Layout, name string, opts []Option) acquirer {
	if c == nil || c.e == nil {
		return acquirer{k: protocol.Keys{Kind: k, Name: name}, err: errs.Op(nil, nil, "%s of a nil or zero Client", k.Name)}
	}
	if err := nameErr(k.Name, name); err != nil {
		// Made before the keys: a name too long is never copied into them.
		return acquirer{k: protocol.Keys{Kind: k, Name: name}, err: err}
	}
	cfg, err := c.cfg, error(nil)
	if len(opts) > 0 { // with makes a copy of the config escape
		cfg, err = c.cfg.with(opts, false)
	}
	return c.acquirerWith(k, name, cfg, err)
}

// acquirerWith is acquirer for a name known to be valid, with the
// configuration cfg, or the error of its options.
func (c *Client) acquirerWith(k *protocol.Layout, name string, cfg config, err error) acquirer {
	unsupported := false
	if rk := protocol.KindOn(c.e.backend, k); rk != nil {
		k = rk
	} else {
		unsupported = true
	}
	a := acquirer{e: c.e, k: protocol.NewKeys(c.cfg.prefix, k, name)}
	switch {
	case unsupported:
		a.err = c.e.unsupported(k.Name, name)
	case err != nil:
		a.err = errs.Op(nil, err, "%s %q", k.Name, name)
	}
	a.ttl, a.renew = cfg.ttl, cfg.renew
	return a
}

// nameErr is the error of a name no call may use: empty, or longer than
// MaxNameLen. what says whose name it is. The error does not quote a name too
// long: it may be huge. The bound exists because every key holds the prefix
// and the name: an unbounded one would let a single call make Redis hold as
// much memory as it was given.
func nameErr(what, name string) error {
	switch {
	case name == "":
		return errs.Op(nil, nil, "%s: empty name", what)
	case len(name) > MaxNameLen:
		return errs.Op(nil, nil, "%s: a name of %d bytes: at most MaxNameLen (%d) are allowed", what, len(name), MaxNameLen)
	}
	return nil
}

// unusable says why New or NewRedLock cannot work on rdb: it is nil, a nil
// pointer (a *redis.Client variable never set, say), or a zero go-redis
// client, not made by its constructor. It returns "" if rdb can be used.
func unusable(rdb redis.UniversalClient) string {
	if rdb == nil {
		return "nil"
	}
	v := reflect.ValueOf(rdb)
	if v.Kind() == reflect.Pointer && v.IsNil() {
		return fmt.Sprintf("a nil %T", rdb)
	}
	switch rdb.(type) {
	case *redis.Client, *redis.ClusterClient, *redis.Ring:
		if v.Elem().IsZero() {
			return fmt.Sprintf("a zero %T, not made by go-redis's constructor (redis.NewClient, say)", rdb)
		}
	}
	return ""
}

// Client modules build their Clients through clienthook.
func init() {
	clienthook.New = func(rc rclient.Client, opts ...any) (any, error) {
		cfg, err := hookConfig("New", opts)
		if err != nil {
			return nil, err
		}
		if rc == nil {
			return nil, errs.Op(nil, nil, "New: nil Redis client")
		}
		return newOn(rc, cfg)
	}
	clienthook.NewRedLock = func(nodes []rclient.Client, opts ...any) (any, error) {
		cfg, err := hookConfig("NewRedLock", opts)
		if err != nil {
			return nil, err
		}
		switch {
		case len(nodes) < 3 || len(nodes)%2 == 0:
			return nil, fmt.Errorf("dlock: NewRedLock: %d nodes: want an odd number, at least 3", len(nodes))
		case slices.Contains(nodes, nil):
			return nil, errs.Op(nil, nil, "NewRedLock: a nil node")
		}
		return newRedLockOn(nodes, cfg)
	}
}

// hookConfig is the configuration of a client module's Client: opts must
// be Options.
func hookConfig(op string, opts []any) (config, error) {
	options := make([]Option, len(opts))
	for i, o := range opts {
		var ok bool
		if options[i], ok = o.(Option); !ok {
			return config{}, errs.Op(nil, nil, "%s: option %d is a %T, not a dlock.Option", op, i, o)
		}
	}
	cfg, err := defaultConfig().with(options, true)
	if err != nil {
		return config{}, err
	}
	if op == "New" && cfg.nodeTimeout > 0 {
		return config{}, errors.New("dlock: New: WithNodeTimeout applies to NewRedLock only")
	}
	return cfg, nil
}
