package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/renew"
	"os"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is what every primitive of this package runs on: it holds the Redis
// client, renews the leases of every lock acquired through it with one
// goroutine, and receives release notifications on one shared pub/sub
// connection.
//
// Create a Client with New and share it: it is safe for concurrent use, and
// primitives made from it are cheap. Close it when done; Close releases the
// locks it still holds and stops its goroutines. The zero Client is not usable.
type Client struct {
	e         *engine
	cfg       config
	events    *dispatcher // runs the hooks called from background work
	closeOnce sync.Once
}

// New returns a Client working on rdb, which may be a *redis.Client or a
// *redis.FailoverClient (Sentinel). The options set the defaults of every
// primitive made from this Client; the Client-only ones (WithPrefix,
// WithLogger, WithHooks, WithAutoPipeline, WithWaitReplicas) configure the
// Client itself. New does not contact Redis. A nil rdb is an error, and so
// is a nil pointer (a *redis.Client variable never set) or a zero go-redis
// client.
//
// A Lock returns when its context ends even if Redis has stalled. Unless rdb
// gives up requests at their deadline by itself (made with
// ContextTimeoutEnabled, and WithAutoPipeline not given), the Client waits for
// each acquire on another goroutine to make that so, which costs a goroutine
// hand-off per acquire; a Redis client made with ContextTimeoutEnabled avoids
// it.
//
// The acquires and releases of goroutines that lock at once share round
// trips, unless rdb was made with ContextTimeoutEnabled: while a few requests
// (4 per GOMAXPROCS) are in flight, those made meanwhile wait and go together
// in one pipeline when one of them is answered. A lone caller's request goes
// at once, as without batching. Redis then reads and answers many requests
// at a time, which is most of what a short script costs it; with 64
// goroutines on distinct locks the bench module's runs made about twice the
// operations per second of sending each request alone. go-redis hooks see
// those requests as pipelines (ProcessPipelineHook), and a pipeline that
// fails on the network is retried whole, which every script allows.
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
	n, err := protocol.NewNode(rdb, cfg.autoPipeline, cfg.scripts)
	if err != nil {
		return nil, errs.Op(nil, err, "New: WithAutoPipeline")
	}
	b, err := protocol.WithWait(n, cfg.wait)
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
		name:    cfg.clientName,
		nameKey: clientKey(cfg.prefix, hexID),

		recordEvery: cfg.recordEvery,
	}
	if e.name == "" {
		e.name = defaultClientName()
	}
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

// Name returns the Client's name: WithClientName's, or "host:pid". Inspect,
// Locks and the dlock command show it beside the owner ids of its holds and
// waits.
func (c *Client) Name() string {
	if c == nil || c.e == nil {
		return ""
	}
	return c.e.name
}

// ID returns the Client's id: random, made by New, and the first part of the
// owner id of every lease taken through it (Lease.Owner). The Client logs it
// at Info on its first use (WithLogger), so that the people on call can tell
// which process holds a lock that `dlock ls` or Inspect shows.
func (c *Client) ID() string {
	if c == nil || c.e == nil {
		return ""
	}
	return c.e.id
}

// Close releases every lock still held through c (best effort, bounded by a
// few seconds), ends their leases with an error matching ErrClosed, wakes every
// waiting Lock (which returns ErrClosed once it has left the lock's queue in
// Redis), and stops c's goroutines, waiting for them and for every hook call
// in flight. It does not close the Redis client. Calling Close again does
// nothing.
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
			if _, rerr := e.backend.Release(ctx, *t.K, t.Owner, t.FenceArg(), protocol.ReleaseLast, e.ren.TTLOf(t), 0); rerr != nil {
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

// Check asks Redis whether it can keep this package's promises, and returns
// an error that says why not: Redis cannot be reached, or refuses the Redis
// client's requests (no password or a wrong one: NOAUTH, WRONGPASS), its
// maxmemory-policy is not noeviction (see Eviction in the package
// documentation), or, with WithWaitReplicas(n), a primary has fewer than n
// replicas connected. A policy Redis will not tell while it serves the client
// (CONFIG GET refused to an ACL user, or renamed, as some managed services
// do) is not an error. So Check is fit for a readiness probe.
//
// New does not contact Redis; the Client runs Check once, in the background,
// when it is first used, and logs a warning if it fails.
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
func (c *Client) acquirer(k *protocol.Kind, name string, opts []Option) acquirer {
	if c == nil || c.e == nil {
		return acquirer{k: protocol.Keys{Kind: k, Name: name}, err: errs.Op(nil, nil, "%s of a nil or zero Client", k.Name)}
	}
	if err := nameErr(k.Name, name); err != nil {
		// Made before the keys: a name too long is never copied into them.
		return acquirer{k: protocol.Keys{Kind: k, Name: name}, err: err}
	}
	unsupported := false
	if rk := c.e.backend.KindFor(k); rk != nil {
		k = rk
	} else {
		unsupported = true
	}
	a := acquirer{e: c.e, k: protocol.NewKeys(c.cfg.prefix, k, name)}
	cfg, err := c.cfg, error(nil)
	if len(opts) > 0 { // with makes a copy of the config escape
		cfg, err = c.cfg.with(opts, false)
	}
	switch {
	case unsupported:
		a.err = errs.Op(errors.ErrUnsupported, nil, "%s %q on a RedLock Client: only Mutex and MultiLock are", k.Name, name)
	case err != nil:
		a.err = errs.Op(nil, err, "%s %q", k.Name, name)
	}
	a.ttl, a.renew = cfg.ttl, cfg.renew
	return a
}

// nameErr is the error of a name no call may use: empty, or longer than
// MaxNameLen. what says whose name it is. The error does not quote a name too
// long: it may be huge.
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
