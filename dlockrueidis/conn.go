package dlockrueidis

// conn is dlock's client seam (internal/rclient) on a rueidis client.
//
// What rueidis does after a lost reply, which dlock's promises rest on:
// rueidis sends a command again by itself only if it is marked read-only
// (and DisableRetry is off); every command built here is not, but for
// EVALSHA_RO and EVAL_RO, which change nothing. A script call whose reply
// was lost therefore fails once, and dlock decides whether to send it again,
// as it does on go-redis with its retries off (rclient.Client.Once). A
// Cluster's MOVED and ASK are followed by rueidis, which the server did not
// run. Requests give up at their context's end. rueidis pipelines
// concurrent callers' commands by itself, but writes them as they come:
// script calls go through a batcher (rclient.Batcher), whose pipelines let
// Redis read and answer many calls at once.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/redis/rueidis"
)

type conn struct {
	c        rueidis.Client
	settings rclient.Settings
	slots    atomic.Pointer[slotMap] // a Cluster's, read by CLUSTER SLOTS
	loading  atomic.Bool             // a reload of slots is under way
	loadMu   sync.Mutex              // one CLUSTER SLOTS at a time
	batch    *rclient.Batcher        // Once's
	lone     atomic.Bool             // a call is on the dedicated connection (once)
	lc       loneCall                // that call, while lone is set
	loneFn   func(rueidis.DedicatedClient) error
}

var _ rclient.Client = (*conn)(nil)

func newConn(c rueidis.Client) *conn {
	s := rclient.Settings{
		CtxAware: true,
		// dlock sends a script call whose copy failed again itself: as
		// go-redis would by default, rueidis not at all.
		Retry: rclient.Retry{Max: 3, MinBackoff: 8 * time.Millisecond, MaxBackoff: 512 * time.Millisecond},
	}
	if c.Mode() == rueidis.ClientModeCluster {
		s.Topology = rclient.Cluster
	} else {
		for addr := range c.Nodes() {
			s.Addr = addr
		}
	}
	cn := &conn{c: c, settings: s}
	cn.batch = rclient.NewBatcher(cn.once, cn.onceMany)
	cn.loneFn = cn.runLone
	return cn
}

func (c *conn) Settings() rclient.Settings { return c.settings }

// Settle waits for the batcher's pipelines, which outlive the calls they
// carry; rueidis answers every other call before it returns.
func (c *conn) Settle() { c.batch.Settle() }

func (c *conn) Do(ctx context.Context, args ...any) (any, error) {
	return result(c.c.Do(ctx, c.build(args)))
}

func (c *conn) Once(ctx context.Context, args []any) (any, error) {
	return c.batch.Do(ctx, args)
}

// once sends a script call alone; onceMany, many in one pipeline (the
// batcher's).
//
// A call that is the only one of the Client's in flight goes on a
// dedicated connection (one at a time; rueidis keeps it in its pool): a
// connection alone with its caller writes the request and reads the
// reply on the caller's goroutine, while the shared one, once concurrent
// callers have met on it, hands every request to its writer and its
// reader goroutines, which costs a lone call tens of microseconds on a
// 2-vCPU machine (a lock's TryLock and Unlock about 1.2× go-redis's,
// against 0.9× so). Concurrent calls share the pipeline.
func (c *conn) once(ctx context.Context, args []any) (any, error) {
	if c.settings.Topology != rclient.Cluster && c.lone.CompareAndSwap(false, true) {
		c.lc.ctx, c.lc.args = ctx, args
		_ = c.c.Dedicated(c.loneFn)
		v, err := c.lc.v, c.lc.err
		c.lc = loneCall{}
		c.lone.Store(false)
		return v, err
	}
	return result(c.c.Do(ctx, c.build(args)))
}

// runLone sends the lone call c.lc on d; the caller holds c.lone. (A
// func made once and the call's fields on conn: a closure per call would
// cost allocations.)
func (c *conn) runLone(d rueidis.DedicatedClient) error {
	c.lc.v, c.lc.err = result(d.Do(c.lc.ctx, c.build(c.lc.args)))
	return nil
}

// loneCall is the call on the dedicated connection, and its outcome.
type loneCall struct {
	ctx  context.Context
	args []any
	v    any
	err  error
}

func (c *conn) onceMany(ctx context.Context, cmds []rclient.Cmd) { _ = c.Pipe(ctx, cmds) }

func (c *conn) Pipe(ctx context.Context, cmds []rclient.Cmd) error {
	multi := make(rueidis.Commands, len(cmds))
	for i := range cmds {
		multi[i] = c.build(cmds[i].Args)
	}
	for i, r := range c.c.DoMulti(ctx, multi...) {
		cmds[i].Reply, cmds[i].Err = result(r)
	}
	return nil
}

// PipeAt sends cmds on one dedicated connection to the server at addr, so
// that a WAIT among them counts the writes before it.
func (c *conn) PipeAt(ctx context.Context, addr string, asking bool, cmds []rclient.Cmd) error {
	node, err := c.node(addr)
	if err != nil {
		return err
	}
	multi := make(rueidis.Commands, 0, len(cmds)+1)
	if asking {
		multi = append(multi, node.B().Arbitrary("ASKING").Build())
	}
	for i := range cmds {
		multi = append(multi, c.build(cmds[i].Args))
	}
	return node.Dedicated(func(d rueidis.DedicatedClient) error {
		rs := d.DoMulti(ctx, multi...)
		if asking {
			rs = rs[1:]
		}
		for i, r := range rs {
			cmds[i].Reply, cmds[i].Err = result(r)
		}
		return nil
	})
}

func (c *conn) DoAt(ctx context.Context, addr string, args ...any) (any, error) {
	node, err := c.node(addr)
	if err != nil {
		return nil, err
	}
	return result(node.Do(ctx, c.build(args)))
}

// primary returns the address of the one server of a deployment that is
// not a Cluster: a Sentinel's current primary.
func (c *conn) primary() string {
	for addr := range c.c.Nodes() {
		return addr
	}
	return c.settings.Addr
}

// node returns the client of the server at addr ("": the one server).
func (c *conn) node(addr string) (rueidis.Client, error) {
	nodes := c.c.Nodes()
	if addr == "" && len(nodes) == 1 {
		for _, n := range nodes {
			return n, nil
		}
	}
	if n, ok := nodes[addr]; ok {
		return n, nil
	}
	return nil, fmt.Errorf("no server at %s", addr)
}

func (c *conn) ServerOf(ctx context.Context, key string) (string, error) {
	if c.settings.Topology != rclient.Cluster {
		return c.primary(), nil
	}
	m, err := c.slotMap(ctx)
	if err != nil {
		return "", err
	}
	if addr := m.owner[slot(key)]; addr != "" {
		return addr, nil
	}
	return "", fmt.Errorf("no server serves the slot of %q", key)
}

func (c *conn) Primaries(ctx context.Context) ([]string, error) {
	if c.settings.Topology != rclient.Cluster {
		return []string{c.primary()}, nil
	}
	m, err := c.slotMap(ctx)
	if err != nil {
		return nil, err
	}
	return m.primaries, nil
}

// Reload reads a Cluster's slot map again, in the background; rueidis
// follows MOVED by itself.
func (c *conn) Reload() {
	if c.settings.Topology != rclient.Cluster || !c.loading.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.loading.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = c.loadSlots(ctx)
	}()
}

func (c *conn) Scan(ctx context.Context, match string, each func(key string) bool) error {
	addrs, err := c.Primaries(ctx)
	if err != nil {
		return err
	}
	for _, addr := range addrs {
		node, err := c.node(addr)
		if err != nil {
			return err
		}
		cursor := uint64(0)
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(match).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return mark(err)
			}
			for _, k := range e.Elements {
				if !each(k) {
					return nil
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// build makes the command args, with its keys marked for a Cluster's
// routing: a script call's, and the first argument of the few key commands
// dlock sends.
func (c *conn) build(args []any) rueidis.Completed {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = str(a)
	}
	b := c.c.B()
	switch strings.ToLower(s[0]) {
	case "evalsha_ro", "eval_ro":
		n, _ := strconv.Atoi(s[2])
		return b.Arbitrary(s[:3]...).Keys(s[3 : 3+n]...).Args(s[3+n:]...).ReadOnly()
	case "evalsha", "eval":
		n, _ := strconv.Atoi(s[2])
		return b.Arbitrary(s[:3]...).Keys(s[3 : 3+n]...).Args(s[3+n:]...).Build()
	case "get", "set", "del", "hget":
		return b.Arbitrary(s[0]).Keys(s[1]).Args(s[2:]...).Build()
	}
	return b.Arbitrary(s...).Build()
}

// str formats a command argument as go-redis would.
func str(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case uint32:
		return strconv.FormatUint(uint64(v), 10)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case time.Duration:
		return strconv.FormatInt(v.Milliseconds(), 10)
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprint(a)
}

// result decodes r as rclient promises: a nil reply is nil, an error reply
// an rclient.ReplyError.
func result(r rueidis.RedisResult) (any, error) {
	v, err := r.ToAny()
	if err != nil {
		if rueidis.IsRedisNil(err) {
			return nil, nil
		}
		return nil, mark(err)
	}
	return v, nil
}

// mark makes rueidis's errors match rclient's classes.
func mark(err error) error {
	var re *rueidis.RedisError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &re):
		return &replyError{re}
	case errors.Is(err, rueidis.ErrClosing):
		return &marked{err, rclient.ErrClosed}
	}
	return err
}

// replyError is an error reply of the server, as rclient.ReplyError.
type replyError struct{ e *rueidis.RedisError }

func (r *replyError) Error() string { return r.e.Error() }
func (r *replyError) Unwrap() error { return r.e }
func (*replyError) RedisError()     {}

// marked is rueidis's error, matching rclient's mark too.
type marked struct{ err, mark error }

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.mark} }

// slotMap is a Cluster's slots, as CLUSTER SLOTS told them: each slot's
// primary, and every primary.
type slotMap struct {
	owner     [16384]string
	primaries []string
}

func (c *conn) slotMap(ctx context.Context) (*slotMap, error) {
	if m := c.slots.Load(); m != nil {
		return m, nil
	}
	return c.loadSlots(ctx)
}

func (c *conn) loadSlots(ctx context.Context) (*slotMap, error) {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	v, err := c.Do(ctx, "cluster", "slots")
	if err != nil {
		return nil, err
	}
	ranges, _ := v.([]any)
	m := &slotMap{}
	seen := map[string]bool{}
	for _, r := range ranges {
		e, _ := r.([]any)
		if len(e) < 3 {
			continue
		}
		lo, _ := e[0].(int64)
		hi, _ := e[1].(int64)
		node, _ := e[2].([]any)
		if len(node) < 2 {
			continue
		}
		host, _ := node[0].(string)
		port, _ := node[1].(int64)
		addr := host + ":" + strconv.FormatInt(port, 10)
		for s := lo; s <= hi && s < 16384; s++ {
			m.owner[s] = addr
		}
		if !seen[addr] {
			seen[addr] = true
			m.primaries = append(m.primaries, addr)
		}
	}
	c.slots.Store(m)
	return m, nil
}

// slot is key's hash slot: CRC16 of its hash tag, or of the key, mod 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
