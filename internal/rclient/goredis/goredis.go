// Package goredis is dlock's rclient.Client on a go-redis v9 client: a
// plain or Sentinel *redis.Client, a *redis.ClusterClient or a *redis.Ring.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/rclient"

	"github.com/redis/go-redis/v9"
)

// Client is an rclient.Client on a go-redis client.
type Client struct {
	rdb redis.UniversalClient
	// cmd sends Do's commands: rdb itself, or its autopipeliner
	// (WithAutoPipeline); once sends Once's: the autopipeliner, or rdb
	// through a batcher, or, if rdb gives up a request at its context's
	// end, rdb itself.
	cmd  processor
	once processor
	// batch, if not nil, is the batcher once sends through.
	batch    *batcher
	settings rclient.Settings
}

type processor interface {
	Process(context.Context, redis.Cmder) error
}

var _ rclient.Client = (*Client)(nil)

// New returns the rclient.Client of rdb. With autoPipeline, commands go
// through go-redis's autopipeliner. Unless rdb gives up a request at its
// context's end by itself (ContextTimeoutEnabled, no autopipeliner), the
// script calls of concurrent callers share round trips (batcher).
func New(rdb redis.UniversalClient, autoPipeline bool) (*Client, error) {
	c := &Client{rdb: rdb, cmd: rdb, once: rdb}
	s := &c.settings
	s.Retry = rclient.Retry{Max: 3, MinBackoff: 8 * time.Millisecond, MaxBackoff: 512 * time.Millisecond}
	switch r := rdb.(type) {
	case *redis.Client:
		o := r.Options()
		s.CtxAware, s.ReadTimeout, s.Addr = o.ContextTimeoutEnabled, o.ReadTimeout, o.Addr
		s.Retry = rclient.Retry{Max: o.MaxRetries, MinBackoff: o.MinRetryBackoff, MaxBackoff: o.MaxRetryBackoff}
	case *redis.ClusterClient:
		o := r.Options()
		s.Topology, s.CtxAware, s.ReadTimeout = rclient.Cluster, o.ContextTimeoutEnabled, o.ReadTimeout
		// A Cluster client sends a request again on a network failure up
		// to MaxRedirects times, its MaxRetries off by default.
		s.Retry = rclient.Retry{Max: max(o.MaxRetries, o.MaxRedirects), MinBackoff: o.MinRetryBackoff, MaxBackoff: o.MaxRetryBackoff}
	case *redis.Ring:
		o := r.Options()
		s.Topology, s.CtxAware, s.ReadTimeout = rclient.Sharded, o.ContextTimeoutEnabled, o.ReadTimeout
		s.Retry = rclient.Retry{Max: o.MaxRetries, MinBackoff: o.MinRetryBackoff, MaxBackoff: o.MaxRetryBackoff}
	}
	// go-redis has given its options their defaults by now; -1 means none.
	s.Retry.Max = max(s.Retry.Max, 0)
	s.Retry.MinBackoff, s.Retry.MaxBackoff = max(s.Retry.MinBackoff, 0), max(s.Retry.MaxBackoff, 0)
	switch {
	case autoPipeline:
		ap, err := rdb.AutoPipeline()
		if err != nil {
			return nil, err
		}
		c.cmd, c.once, s.CtxAware = ap, ap, false
	case !s.CtxAware:
		// Its requests do not give up at their context's end anyway, so
		// that a request waits for a batch changes nothing for the caller.
		c.batch = newBatcher(rdb)
		c.once = c.batch
	}
	return c, nil
}

// Settings are what New read of rdb.
func (c *Client) Settings() rclient.Settings { return c.settings }

// Settle waits for the pipelines of the batcher, which outlive the calls
// they carry.
func (c *Client) Settle() {
	if c.batch != nil {
		c.batch.Settle()
	}
}

// Do sends one command through go-redis, with its retries.
func (c *Client) Do(ctx context.Context, args ...any) (any, error) {
	cmd := redis.NewCmd(ctx, args...)
	_ = c.cmd.Process(ctx, cmd)
	return result(cmd)
}

// onceCmd is a script call that go-redis sends once, whatever happens to it.
// It holds its redis.Cmd, so that the two are one allocation.
type onceCmd struct{ redis.Cmd }

// NoRetry tells go-redis never to send the call again by itself.
func (*onceCmd) NoRetry() bool { return true }

// newOnce returns the command a, sent once; its keys start at a[3].
func newOnce(ctx context.Context, a []any) *onceCmd {
	c := &onceCmd{Cmd: *redis.NewCmd(ctx, a...)}
	c.SetFirstKeyPos(3)
	return c
}

// Once sends the script call a once. go-redis, and its hooks, are done with
// the command when Process returns, so a may be reused then.
func (c *Client) Once(ctx context.Context, a []any) (any, error) {
	cmd := newOnce(ctx, a)
	_ = c.once.Process(ctx, cmd)
	return result(&cmd.Cmd)
}

// Pipe sends cmds in a go-redis pipeline: one round trip per server.
func (c *Client) Pipe(ctx context.Context, cmds []rclient.Cmd) error {
	return pipe(ctx, c.rdb.Pipeline(), false, cmds, false)
}

// PipeAt sends cmds, each once, in a pipeline on the server at addr.
func (c *Client) PipeAt(ctx context.Context, addr string, asking bool, cmds []rclient.Cmd) error {
	srv, err := c.serverAt(ctx, addr)
	if err != nil {
		return err
	}
	return pipe(ctx, srv.Pipeline(), asking, cmds, true)
}

func pipe(ctx context.Context, p redis.Pipeliner, asking bool, cmds []rclient.Cmd, once bool) error {
	if asking {
		p.Do(ctx, "asking")
	}
	rc := make([]*redis.Cmd, len(cmds))
	for i := range cmds {
		if once {
			oc := newOnce(ctx, cmds[i].Args)
			rc[i] = &oc.Cmd
			_ = p.Process(ctx, oc)
		} else {
			rc[i] = redis.NewCmd(ctx, cmds[i].Args...)
			_ = p.Process(ctx, rc[i])
		}
	}
	_, _ = p.Exec(ctx) // each command carries its own error
	for i, r := range rc {
		cmds[i].Reply, cmds[i].Err = result(r)
	}
	return nil
}

// DoAt sends one command, with go-redis's retries, to the server at addr.
func (c *Client) DoAt(ctx context.Context, addr string, args ...any) (any, error) {
	srv, err := c.serverAt(ctx, addr)
	if err != nil {
		return nil, err
	}
	cmd := redis.NewCmd(ctx, args...)
	_ = srv.Process(ctx, cmd)
	return result(cmd)
}

// serverAt returns the client of the server at addr: a Cluster's or a
// Ring's shard, or the one server of any other client.
func (c *Client) serverAt(ctx context.Context, addr string) (*redis.Client, error) {
	var each func(context.Context, func(context.Context, *redis.Client) error) error
	switch r := c.rdb.(type) {
	case *redis.Client:
		return r, nil
	case *redis.ClusterClient:
		each = r.ForEachShard
	case *redis.Ring:
		each = r.ForEachShard
	default:
		return nil, fmt.Errorf("a %T names no server", c.rdb)
	}
	var (
		mu    sync.Mutex
		found *redis.Client
	)
	err := each(ctx, func(_ context.Context, s *redis.Client) error {
		if s.Options().Addr == addr {
			mu.Lock()
			found = s
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("no server at %s", addr)
	}
	return found, nil
}

// ServerOf returns the address of the primary that serves key on a Cluster,
// and of the one server elsewhere.
func (c *Client) ServerOf(ctx context.Context, key string) (string, error) {
	switch r := c.rdb.(type) {
	case *redis.ClusterClient:
		s, err := r.MasterForKey(ctx, key)
		if err != nil {
			return "", mark(err)
		}
		return s.Options().Addr, nil
	case *redis.Client:
		return r.Options().Addr, nil
	}
	return "", fmt.Errorf("a %T names no server for a key", c.rdb)
}

// Primaries returns the address of every primary of a Cluster, of every
// shard of a Ring, or of the one server.
func (c *Client) Primaries(ctx context.Context) ([]string, error) {
	var (
		mu  sync.Mutex
		out []string
	)
	add := func(_ context.Context, s *redis.Client) error {
		mu.Lock()
		out = append(out, s.Options().Addr)
		mu.Unlock()
		return nil
	}
	var err error
	switch r := c.rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, add)
	case *redis.Ring:
		err = r.ForEachShard(ctx, add)
	case *redis.Client:
		out = append(out, r.Options().Addr)
	}
	return out, mark(err)
}

// Reload makes go-redis load a Cluster's slot map again, in the background.
func (c *Client) Reload() {
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// Scan runs SCAN with match on every primary.
func (c *Client) Scan(ctx context.Context, match string, each func(key string) bool) error {
	var servers []redis.Cmdable
	var mu sync.Mutex
	add := func(_ context.Context, s *redis.Client) error {
		mu.Lock()
		servers = append(servers, s)
		mu.Unlock()
		return nil
	}
	switch r := c.rdb.(type) {
	case *redis.ClusterClient:
		if err := r.ForEachMaster(ctx, add); err != nil {
			return mark(err)
		}
	case *redis.Ring:
		if err := r.ForEachShard(ctx, add); err != nil {
			return mark(err)
		}
	default:
		servers = append(servers, c.rdb)
	}
	for _, srv := range servers {
		it := srv.Scan(ctx, 0, match, 1000).Iterator()
		for it.Next(ctx) {
			if !each(it.Val()) {
				return nil
			}
		}
		if err := it.Err(); err != nil {
			return mark(err)
		}
	}
	return nil
}

// result returns cmd's reply, a nil reply as nil with no error.
func result(cmd *redis.Cmd) (any, error) {
	v, err := cmd.Result()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return nil, mark(err)
	}
	return v, nil
}

// mark makes go-redis's closed client and pool timeout match rclient's.
func mark(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redis.ErrClosed):
		return &marked{err, rclient.ErrClosed}
	case errors.Is(err, redis.ErrPoolTimeout):
		return &marked{err, rclient.ErrPoolTimeout}
	}
	return err
}

// marked is go-redis's error, matching rclient's mark too.
type marked struct{ err, mark error }

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.mark} }

// Subscribe returns a pub/sub connection subscribed to channels: go-redis
// finds their server by the first of them.
func (c *Client) Subscribe(ctx context.Context, _ string, channels ...string) rclient.Subscriber {
	return &subscriber{ps: c.rdb.SSubscribe(ctx, channels...)}
}

// subscriber is a go-redis PubSub, which connects and subscribes again by
// itself on the next receive after its connection broke.
type subscriber struct{ ps *redis.PubSub }

func (s *subscriber) Subscribe(ctx context.Context, channels ...string) error {
	return s.ps.SSubscribe(ctx, channels...)
}

func (s *subscriber) Unsubscribe(ctx context.Context, channels ...string) error {
	return s.ps.SUnsubscribe(ctx, channels...)
}

func (s *subscriber) Ping(ctx context.Context) error { return s.ps.Ping(ctx) }

func (s *subscriber) Close() error { return s.ps.Close() }

func (s *subscriber) Receive(ctx context.Context, timeout time.Duration) (rclient.Message, error) {
	msg, err := s.ps.ReceiveTimeout(ctx, timeout)
	if err != nil {
		return rclient.Message{}, err
	}
	switch m := msg.(type) {
	case *redis.Message:
		return rclient.Message{Kind: "smessage", Channel: m.Channel, Payload: m.Payload}, nil
	case *redis.Subscription:
		return rclient.Message{Kind: m.Kind, Channel: m.Channel}, nil
	case *redis.Pong:
		return rclient.Message{Kind: "pong", Payload: m.Payload}, nil
	}
	return rclient.Message{Kind: fmt.Sprintf("%T", msg)}, nil
}
