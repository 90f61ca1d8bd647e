// Package faultproxy is a TCP proxy for tests that sits between a Redis
// client and one redis-server and injects faults into chosen requests.
//
// Unlike a byte-level proxy it reads the Redis protocol (RESP2 and RESP3) in
// both directions, so it knows which reply answers which request: a test can
// lose the reply to one particular script, delay one command, or hold a
// request back, and leave everything else alone. It also offers
// connection-level faults: cutting every connection, refusing new ones,
// pausing all traffic and turning pub/sub connections into half-open ones.
//
// Replies are matched to requests in order, so commands that change how
// Redis replies (CLIENT REPLY OFF or SKIP) confuse it; MONITOR output and
// RESP3 pushes are forwarded as replies to nothing.
package faultproxy

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy listens on a free 127.0.0.1 port and forwards every connection to
// target. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // canceled by Close, to stop dials in flight
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the proxy started

	mu       sync.Mutex
	closed   bool
	refuse   bool
	gate     chan struct{} // closed while traffic flows; open while paused
	rules    []*Injection
	conns    map[*conn]struct{}
	accepted int
}

// New starts a proxy to target (host:port) on a free loopback port. Call Close
// when done.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		gate:   make(chan struct{}),
		conns:  make(map[*conn]struct{}),
	}
	close(p.gate)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Start is New for a test: a failure to start fails the test, and the proxy
// is closed when the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr returns the address clients should connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening, closes every connection and waits until all of the
// proxy's goroutines have ended. It works while the proxy is paused, and
// calling it again does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

// Command is one request as the client sent it: its arguments, the command
// name first.
type Command [][]byte

// Name returns the command name, upper-cased.
func (c Command) Name() string { return strings.ToUpper(string(c.Arg(0))) }

// Arg returns argument i (0 is the command name), or nil when there is none.
func (c Command) Arg(i int) []byte {
	if i < 0 || i >= len(c) {
		return nil
	}
	return c[i]
}

// Match reports whether a rule applies to a request.
type Match func(Command) bool

// Script matches a request that runs the Lua script src: EVALSHA or
// EVALSHA_RO with the script's SHA1, or EVAL or EVAL_RO with src as the body.
func Script(src string) Match { return ScriptSHA(sha1hex([]byte(src))) }

// ScriptSHA matches a request that runs the Lua script whose SHA1 is sha (in
// hex, any case): EVALSHA or EVALSHA_RO naming it, or EVAL or EVAL_RO with a
// body that hashes to it.
func ScriptSHA(sha string) Match {
	sha = strings.ToLower(sha)
	return func(c Command) bool {
		switch c.Name() {
		case "EVALSHA", "EVALSHA_RO":
			return strings.EqualFold(string(c.Arg(1)), sha)
		case "EVAL", "EVAL_RO":
			return len(c) > 1 && sha1hex(c.Arg(1)) == sha
		}
		return false
	}
}

func sha1hex(b []byte) string {
	sum := sha1.Sum(b)
	return hex.EncodeToString(sum[:])
}

// CommandIs matches requests with the command name name, in any case.
func CommandIs(name string) Match {
	return func(c Command) bool { return strings.EqualFold(string(c.Arg(0)), name) }
}

// HasArg matches requests in which some argument after the command name is
// exactly s.
func HasArg(s string) Match {
	return func(c Command) bool {
		for _, a := range c[min(1, len(c)):] {
			if string(a) == s {
				return true
			}
		}
		return false
	}
}

// And matches requests that all of ms match.
func And(ms ...Match) Match {
	return func(c Command) bool {
		for _, m := range ms {
			if !m(c) {
				return false
			}
		}
		return true
	}
}

// Fault is what happens to a request a rule applies to.
type Fault int

const (
	// Pass forwards the request and its reply normally; the rule only counts
	// it, so a test can check that the request was seen.
	Pass Fault = iota
	// DropReply lets the request reach Redis and run, then discards its reply
	// and closes the client connection and its upstream connection. The
	// client sees EOF, and go-redis retries.
	DropReply
	// SwallowReply lets the request run, but neither its reply nor anything
	// after it on that connection is delivered. The connection stays open, so
	// the client's read times out.
	SwallowReply
	// DelayReply lets the request run and holds its reply for Rule.Delay
	// before delivering it. Later replies on the same connection wait behind
	// it, as on a real socket.
	DelayReply
	// DropRequest never forwards the request to Redis, and closes the client
	// connection and its upstream connection.
	DropRequest
	// DelayRequest holds the request for Rule.Delay before forwarding it to
	// Redis. Later requests on the same connection wait behind it.
	DelayRequest
)

// Rule says which requests get which fault.
type Rule struct {
	Match Match         // which requests; nil matches every request
	Fault Fault         // what happens to them
	Delay time.Duration // for DelayReply and DelayRequest
	Times int           // how many matching requests the rule applies to; 0: every one
}

// Injection is a rule added by Inject.
type Injection struct {
	p       *Proxy
	rule    Rule
	hit     chan struct{}
	hits    int  // guarded by p.mu
	removed bool // guarded by p.mu
}

// Inject adds a rule. Rules are checked in the order they were added; the
// first one that matches a request and still has Times left applies to it.
// Rules apply to requests read after Inject returns, and not to connections in
// pub/sub mode.
func (p *Proxy) Inject(r Rule) *Injection {
	in := &Injection{p: p, rule: r, hit: make(chan struct{})}
	p.mu.Lock()
	p.rules = append(p.rules, in)
	p.mu.Unlock()
	return in
}

// Hits returns how many requests the rule has applied to so far.
func (in *Injection) Hits() int {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	return in.hits
}

// Hit returns a channel that is closed when the rule first applies.
func (in *Injection) Hit() <-chan struct{} { return in.hit }

// Remove removes the rule. Requests it already applied to keep their fault.
func (in *Injection) Remove() {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	in.removed = true
	in.p.rules = slices.DeleteFunc(in.p.rules, func(r *Injection) bool { return r == in })
}

// Clear removes every rule.
func (p *Proxy) Clear() {
	p.mu.Lock()
	for _, in := range p.rules {
		in.removed = true
	}
	p.rules = nil
	p.mu.Unlock()
}

// apply finds the rule for cmd, counts the hit and returns the pending entry.
// The Match functions run without the lock, so they may call the proxy.
func (p *Proxy) apply(cmd Command) pending {
	p.mu.Lock()
	rules := slices.Clone(p.rules)
	p.mu.Unlock()
	matched := make([]bool, len(rules))
	for i, in := range rules {
		matched[i] = in.rule.Match == nil || in.rule.Match(cmd)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, in := range rules {
		r := in.rule
		if matched[i] && !in.removed && (r.Times == 0 || in.hits < r.Times) {
			in.hits++
			if in.hits == 1 {
				close(in.hit)
			}
			return pending{fault: r.Fault, delay: r.Delay}
		}
	}
	return pending{}
}

// Cut closes every open client connection and its upstream connection, and
// returns how many it closed.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	cs := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.close()
	}
	return len(cs)
}

// Refuse, while on, makes the proxy accept new connections and close them at
// once. Open connections are not affected.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Pause stops all forwarding, in both directions, on every connection, new
// ones included. Connections stay open; what is read meanwhile is held and
// delivered in order after Resume.
func (p *Proxy) Pause() {
	p.mu.Lock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already paused
	}
	p.mu.Unlock()
}

// Resume ends a Pause.
func (p *Proxy) Resume() {
	p.mu.Lock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
	p.mu.Unlock()
}

// BlackholePubSub makes every connection now in pub/sub mode stop forwarding
// in both directions for good, while it stays open: to the client it looks
// like a half-open connection. It returns how many connections it affected.
// A connection is in pub/sub mode from the reply to its first SUBSCRIBE,
// PSUBSCRIBE or SSUBSCRIBE on, until it closes (even if it unsubscribes).
func (p *Proxy) BlackholePubSub() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if c.pubsub.Load() {
			c.blackholed.Store(true)
			n++
		}
	}
	return n
}

// Accepted returns how many connections the proxy has accepted so far,
// refused ones not counted.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Open returns how many client connections are open now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors
			continue
		}
		p.mu.Lock()
		if p.refuse || p.closed {
			p.mu.Unlock()
			_ = client.Close()
			continue
		}
		p.accepted++
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(client)
	}
}

// serve dials the target for one client connection and runs its two pumps.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	var d net.Dialer
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &conn{p: p, client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go c.replies()
	c.requests()
}

// pending is what the reply pump must do with the reply to one request.
type pending struct {
	fault     Fault
	delay     time.Duration
	subscribe bool // the request was SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE
}

// conn is one proxied client connection and its upstream connection.
type conn struct {
	p              *Proxy
	client, server net.Conn
	done           chan struct{} // closed by close
	closeOnce      sync.Once

	mu    sync.Mutex
	queue []pending // one per request forwarded and not yet answered, oldest first

	pubsub     atomic.Bool // replies are forwarded without matching
	blackholed atomic.Bool // nothing is forwarded any more
}

// close closes both sides and wakes both pumps.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.server.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// proceed blocks while the proxy is paused and reports whether the pump may
// forward; it returns false once the connection is closed. On a blackholed
// connection it blocks until the connection is closed.
func (c *conn) proceed() bool {
	c.p.mu.Lock()
	gate := c.p.gate
	c.p.mu.Unlock()
	select {
	case <-gate:
	case <-c.done:
		return false
	}
	if c.blackholed.Load() {
		<-c.done
		return false
	}
	return true
}

// sleep waits d and reports false if the connection closed first.
func (c *conn) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.done:
		return false
	}
}

// requests is the request pump: client to Redis.
func (c *conn) requests() {
	defer c.close()
	rd := newReader(c.client)
	for {
		cmd, err := rd.command()
		if err != nil {
			return
		}
		var e pending
		if len(cmd) > 0 && !c.pubsub.Load() {
			e = c.p.apply(cmd)
			switch cmd.Name() {
			case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE":
				e.subscribe = true
			}
		}
		switch e.fault {
		case DropRequest:
			return
		case DelayRequest:
			if !c.sleep(e.delay) {
				return
			}
		}
		if !c.proceed() {
			return
		}
		if len(cmd) > 0 && !c.pubsub.Load() { // Redis does not answer an empty inline command
			c.mu.Lock()
			c.queue = append(c.queue, e)
			c.mu.Unlock()
		}
		if _, err := c.server.Write(rd.raw); err != nil {
			return
		}
	}
}

// next pops the entry for reply v. A push answers no request, except the
// confirmation of a pending subscribe; a reply with no request waiting (which
// Redis should not send) gets the zero entry.
func (c *conn) next(v value) pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		return pending{}
	}
	e := c.queue[0]
	if v.kind == '>' && !(e.subscribe && isSubscribeReply(v)) {
		return pending{}
	}
	c.queue = c.queue[1:]
	return e
}

func isSubscribeReply(v value) bool {
	switch strings.ToLower(v.text) {
	case "subscribe", "psubscribe", "ssubscribe":
		return v.kind == '>' || v.kind == '*'
	}
	return false
}

// replies is the reply pump: Redis to client.
func (c *conn) replies() {
	defer c.p.wg.Done()
	defer c.close()
	rd := newReader(c.server)
	for !c.pubsub.Load() {
		v, err := rd.reply()
		if err != nil {
			return
		}
		e := c.next(v)
		switch e.fault {
		case DropReply:
			return
		case SwallowReply:
			_, _ = io.Copy(io.Discard, rd.br) // until the connection closes
			return
		case DelayReply:
			if !c.sleep(e.delay) {
				return
			}
		}
		if !c.proceed() {
			return
		}
		if e.subscribe && isSubscribeReply(v) {
			c.pubsub.Store(true) // before the client can see the confirmation
		}
		if _, err := c.client.Write(rd.raw); err != nil {
			return
		}
	}
	// Pub/sub mode: forward bytes as they come, starting with any already
	// buffered.
	buf := make([]byte, 32<<10)
	for {
		n, err := rd.br.Read(buf)
		if n > 0 {
			if !c.proceed() {
				return
			}
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
