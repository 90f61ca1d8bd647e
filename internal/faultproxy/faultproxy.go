// Package faultproxy is a TCP proxy for tests that sits between a Redis
// client and one redis-server and injects faults into chosen requests.
//
// Unlike a byte-level proxy it reads the Redis protocol (RESP2 and RESP3) in
// both directions, so it knows which reply answers which request: a test can
// lose the reply to one particular script, delay one command, or hold a
// request back until the test lets it go, and leave everything else alone. A
// held request outlives its client: it still reaches Redis when released,
// after the client has given up on it and retried elsewhere, as a request
// stuck in the network can. It also offers
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

// Close stops listening, closes every connection, dropping the requests held
// on them, and waits until all of the proxy's goroutines have ended. It works
// while the proxy is paused or holds requests, and calling it again does
// nothing.
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
	// Redis. Later requests on the same connection wait behind it. If the
	// client closes the connection meanwhile, the request may never run;
	// HoldRequest is the fault for a request that outlives its client.
	DelayRequest
	// HoldRequest keeps the request from Redis until the rule is released
	// (Injection.Release, Remove or Clear), then forwards it. Later requests
	// on the same connection wait behind it, as on a real socket. Hit's
	// channel is closed when the rule first holds a request, and Delivered's
	// once Redis has answered every request the rule held. Requests the rule
	// applies to after its release are forwarded at once.
	//
	// A held request outlives its client. If the client closes the
	// connection meanwhile (go-redis does after a read timeout, and retries
	// on a new connection), the proxy keeps the connection to Redis open. On
	// release it forwards the held request and then every request it had read
	// from the client before noticing the close, in order and with the rules
	// applied as usual; it discards their replies and closes the connection
	// once Redis has answered them all. Cut and Close drop held requests, and
	// so does a fault that closes the connection, such as DropReply on an
	// earlier request.
	HoldRequest
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
	p         *Proxy
	rule      Rule
	hit       chan struct{}
	release   chan struct{} // closed by Release
	delivered chan struct{} // closed when released and every held request is answered

	// guarded by p.mu
	hits          int
	removed       bool
	released      bool
	unsettled     int  // held requests neither answered nor dropped yet
	dropped       bool // a held request was dropped
	deliveredShut bool // delivered is closed
}

// Inject adds a rule. Rules are checked in the order they were added; the
// first one that matches a request and still has Times left applies to it.
// Rules apply to requests read after Inject returns, and to those waiting
// behind a held request when it is released; not to connections in pub/sub
// mode.
func (p *Proxy) Inject(r Rule) *Injection {
	in := &Injection{
		p:         p,
		rule:      r,
		hit:       make(chan struct{}),
		release:   make(chan struct{}),
		delivered: make(chan struct{}),
	}
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

// Release lets go of every request the rule holds: each is forwarded to
// Redis, in order on its connection, even if its client has gone. Requests
// the rule applies to from now on are forwarded at once. Calling it again
// does nothing; for a rule whose fault is not HoldRequest it only closes
// Delivered's channel.
func (in *Injection) Release() {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	in.releaseLocked()
}

// Delivered returns a channel that is closed once the rule has been released
// and Redis has answered every request it held: each was forwarded and the
// proxy has read its reply, whether or not the client was still there to
// receive it. If the rule held nothing, the channel is closed by Release. If
// a held request is dropped instead (see HoldRequest), the channel is never
// closed.
func (in *Injection) Delivered() <-chan struct{} { return in.delivered }

// releaseLocked is Release with p.mu held.
func (in *Injection) releaseLocked() {
	if in.released {
		return
	}
	in.released = true
	close(in.release)
	in.deliverLocked()
}

// deliverLocked closes delivered if its time has come; p.mu is held.
func (in *Injection) deliverLocked() {
	if in.released && in.unsettled == 0 && !in.dropped && !in.deliveredShut {
		in.deliveredShut = true
		close(in.delivered)
	}
}

// settle records the end of a request the rule held: answered by Redis, or
// dropped.
func (in *Injection) settle(answered bool) {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	in.unsettled--
	if !answered {
		in.dropped = true
	}
	in.deliverLocked()
}

// Remove removes the rule. Requests it already applied to keep their fault,
// except that the requests it holds are released, as by Release.
func (in *Injection) Remove() {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	in.removed = true
	in.releaseLocked()
	in.p.rules = slices.DeleteFunc(in.p.rules, func(r *Injection) bool { return r == in })
}

// Clear removes every rule, releasing the requests they hold.
func (p *Proxy) Clear() {
	p.mu.Lock()
	for _, in := range p.rules {
		in.removed = true
		in.releaseLocked()
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
			e := pending{fault: r.Fault, delay: r.Delay}
			if r.Fault == HoldRequest && !in.released {
				in.unsettled++
				e.hold = in
			}
			return e
		}
	}
	return pending{}
}

// Cut closes every open connection, on both sides, and returns how many it
// closed. Requests held on them are dropped.
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
// once, and close those accepted before that are still being opened (a Cut
// right after Refuse leaves none open). Open connections are not affected.
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

// Open returns how many connections are open now, counting those whose client
// has gone while they still deliver held requests to Redis (see HoldRequest).
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

// serve dials the target for one client connection and runs its three pumps:
// read (here), forward and replies.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	var d net.Dialer
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &conn{
		p:           p,
		client:      client,
		server:      server,
		done:        make(chan struct{}),
		readable:    make(chan struct{}, 1),
		forwardable: make(chan struct{}, 1),
	}
	p.mu.Lock()
	if p.closed || p.refuse {
		// Accepted before Refuse (or Close), and not yet open when Cut
		// closed the open ones: it must not outlive them.
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	go c.forward()
	go c.replies()
	c.read()
}

// pending is what the reply pump must do with the reply to one request.
type pending struct {
	fault     Fault
	delay     time.Duration
	subscribe bool       // the request was SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE
	hold      *Injection // the rule that held the request; nil if none did
}

// request is one request read from the client and not yet forwarded.
type request struct {
	cmd Command
	raw []byte // its bytes as the client sent them
}

// conn is one proxied client connection and its upstream connection.
//
// Three pumps serve it. read reads requests from the client and hands them to
// forward one at a time, waiting until each has been sent before it reads the
// next, as a single loop would; but while forward holds a request, read reads
// ahead, so that it notices when the client closes. forward applies the rules
// and writes requests to Redis, in order. replies reads Redis's replies and
// writes them to the client.
//
// When the client side ends (EOF or an error, seen by read or by replies)
// while a held request is not yet answered, the connection drains instead of
// closing: the client connection is closed, forward goes on with what read
// had read, replies discards what Redis answers, and the connection closes
// once nothing is left to forward or to answer.
type conn struct {
	p              *Proxy
	client, server net.Conn
	done           chan struct{} // closed by close
	closeOnce      sync.Once
	readable       chan struct{} // wakes read; buffered 1
	forwardable    chan struct{} // wakes forward; buffered 1

	mu         sync.Mutex
	backlog    []request // read and not yet taken by forward, oldest first
	busy       bool      // forward is working on a request from backlog
	holding    bool      // forward waits for a held request to be released
	held       int       // held requests on this connection not yet answered
	queue      []pending // one per request forwarded and not yet answered, oldest first
	clientGone bool      // the client side has ended and the connection drains
	closed     bool      // close has begun

	pubsub     atomic.Bool // replies are forwarded without matching
	blackholed atomic.Bool // nothing is forwarded any more
}

// wake wakes the pump waiting on ch, or its next wait, without blocking.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// close closes both sides and wakes every pump. The held requests that Redis
// has not answered are dropped.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		var dropped []*Injection
		for _, e := range c.queue {
			if e.hold != nil {
				dropped = append(dropped, e.hold)
			}
		}
		c.queue = nil
		c.mu.Unlock()
		close(c.done)
		_ = c.client.Close()
		_ = c.server.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
		for _, in := range dropped {
			in.settle(false)
		}
	})
}

// endClient handles the end of the client side. If a held request is not yet
// answered, it closes only the client connection and lets the connection
// drain, and reports true; otherwise it closes the connection and reports
// false.
func (c *conn) endClient() bool {
	c.mu.Lock()
	drain := !c.closed && (c.clientGone || c.held > 0)
	c.clientGone = drain
	c.mu.Unlock()
	if !drain {
		c.close()
		return false
	}
	_ = c.client.Close()
	c.closeIfDrained()
	return true
}

// closeIfDrained closes a draining connection once nothing is left to forward
// or to answer.
func (c *conn) closeIfDrained() {
	c.mu.Lock()
	drained := c.clientGone && len(c.backlog) == 0 && !c.busy && len(c.queue) == 0
	c.mu.Unlock()
	if drained {
		c.close()
	}
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

// read is the client half of the request pump: it reads requests from the
// client and hands them to forward.
func (c *conn) read() {
	rd := newReader(c.client)
	for {
		cmd, err := rd.command()
		if err != nil {
			c.endClient()
			return
		}
		c.mu.Lock()
		if c.clientGone || c.closed {
			c.mu.Unlock()
			return
		}
		c.backlog = append(c.backlog, request{cmd: cmd, raw: slices.Clone(rd.raw)})
		c.mu.Unlock()
		wake(c.forwardable)
		if !c.waitTurn() {
			return
		}
	}
}

// waitTurn blocks until read may read the next request: when forward has sent
// every request read so far, or while it holds one. It returns false once the
// connection is closed.
func (c *conn) waitTurn() bool {
	for {
		c.mu.Lock()
		ok := c.holding || (len(c.backlog) == 0 && !c.busy)
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-c.readable:
		case <-c.done:
			return false
		}
	}
}

// forward is the Redis half of the request pump: it sends the requests read
// by read to Redis, in order.
func (c *conn) forward() {
	defer c.p.wg.Done()
	for {
		r, ok := c.take()
		if !ok {
			return
		}
		ok = c.send(r)
		c.mu.Lock()
		c.busy = false
		c.mu.Unlock()
		wake(c.readable)
		if !ok {
			c.close()
			return
		}
		c.closeIfDrained()
	}
}

// take waits for the next request read from the client and takes it; it
// returns false once the connection is closed.
func (c *conn) take() (request, bool) {
	for {
		c.mu.Lock()
		if len(c.backlog) > 0 {
			r := c.backlog[0]
			c.backlog = slices.Delete(c.backlog, 0, 1)
			c.busy = true
			c.mu.Unlock()
			return r, true
		}
		c.mu.Unlock()
		select {
		case <-c.forwardable:
		case <-c.done:
			return request{}, false
		}
	}
}

// send applies the rules to one request and forwards it, after holding or
// delaying it if a rule says so. It reports false when the connection must
// close.
func (c *conn) send(r request) bool {
	var e pending
	if len(r.cmd) > 0 && !c.pubsub.Load() {
		e = c.p.apply(r.cmd)
		switch r.cmd.Name() {
		case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE":
			e.subscribe = true
		}
	}
	if e.hold != nil {
		queued := false
		defer func() {
			if !queued { // the connection closed first
				e.hold.settle(false)
			}
		}()
		c.mu.Lock()
		c.held++
		c.holding = true
		c.mu.Unlock()
		wake(c.readable) // read may read ahead now
		select {
		case <-e.hold.release:
		case <-c.done:
			return false
		}
		c.mu.Lock()
		c.holding = false
		c.mu.Unlock()
		if !c.proceed() {
			return false
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return false
		}
		// Queued even in pub/sub mode, so that close can tell it was
		// dropped if no reply is ever matched to it.
		c.queue = append(c.queue, e)
		queued = true
		c.mu.Unlock()
		_, err := c.server.Write(r.raw)
		return err == nil
	}
	switch e.fault {
	case DropRequest:
		return false
	case DelayRequest:
		if !c.sleep(e.delay) {
			return false
		}
	}
	if !c.proceed() {
		return false
	}
	if len(r.cmd) > 0 && !c.pubsub.Load() { // Redis does not answer an empty inline command
		c.mu.Lock()
		c.queue = append(c.queue, e)
		c.mu.Unlock()
	}
	_, err := c.server.Write(r.raw)
	return err == nil
}

// next pops the entry for reply v. A push answers no request, except the
// confirmation of a pending subscribe; a reply with no request waiting (which
// Redis should not send) gets the zero entry. A held request it answers is
// settled as answered.
func (c *conn) next(v value) pending {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.mu.Unlock()
		return pending{}
	}
	e := c.queue[0]
	if v.kind == '>' && !(e.subscribe && isSubscribeReply(v)) {
		c.mu.Unlock()
		return pending{}
	}
	c.queue = c.queue[1:]
	if e.hold != nil {
		c.held--
	}
	c.mu.Unlock()
	if e.hold != nil {
		e.hold.settle(true)
	}
	return e
}

func isSubscribeReply(v value) bool {
	switch strings.ToLower(v.text) {
	case "subscribe", "psubscribe", "ssubscribe":
		return v.kind == '>' || v.kind == '*'
	}
	return false
}

// deliver writes a reply to the client, or discards it once the client has
// gone. It reports false when the connection has closed.
func (c *conn) deliver(raw []byte) bool {
	c.mu.Lock()
	gone := c.clientGone
	c.mu.Unlock()
	if gone {
		return true
	}
	if _, err := c.client.Write(raw); err != nil {
		return c.endClient()
	}
	return true
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
		if !c.deliver(rd.raw) {
			return
		}
		c.closeIfDrained()
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
