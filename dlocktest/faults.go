package dlocktest

import (
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/faultproxy"
)

// Faults is a switch between Clients and one server: a proxy that Clients
// dial at Addr instead of the server's address, which forwards everything
// until told to cut, pause or lose a reply. It reads the Redis protocol, so
// it knows which reply answers which request. Its methods are safe for
// concurrent use.
//
// What go-redis v9 (default options) and dlock then do, as this package's
// tests check:
//
//   - Cut closes every connection through the switch and refuses new ones
//     (it accepts them and closes them at once) until Restore. A request
//     fails with io.EOF, after go-redis has tried it again MaxRetries times
//     (3 by default, 8 ms to 512 ms apart). Nothing reaches Redis.
//   - Pause stops all traffic, both ways, on every connection, new ones and
//     pub/sub included, while they stay open. A request gets no reply:
//     go-redis waits ReadTimeout (3 s by default; with ContextTimeoutEnabled,
//     no longer than the context's deadline), drops the connection, tries a
//     new one, whose handshake gets no reply either, and returns a timeout
//     (a net.Error whose Timeout is true: "i/o timeout"). The switch keeps
//     what it read: on Restore the request reaches Redis and runs, late,
//     though go-redis gave up on it, as a request held up in the network
//     would.
//   - LoseNextReply lets the next request (a command or a script, never a
//     pub/sub message) run in Redis, throws its reply away and closes that
//     connection. go-redis sees io.EOF and sends the request again on
//     another connection (with MaxRetries -1 the caller gets io.EOF), so
//     Redis runs it twice. Every dlock request answers a second run as it
//     answered the first (the same hold and fence, nothing counted twice, a
//     release that freed the lock reported as released), so a Lock or an
//     Unlock whose reply is lost returns as if nothing had happened.
//
// Under Cut or Pause a held lease is not renewed and counts as lost at its
// local deadline, a little before its TTL runs out: Done closes, and Err
// matches dlock.ErrLockLost ("not renewed before its deadline"). After
// Restore the Client works again; a lost lease stays lost.
//
// The reply LoseNextReply loses is that of whichever request comes first,
// and more is sent than the caller's requests: go-redis opens a connection
// with a handshake (HELLO, whose lost reply go-redis takes as a failed dial
// and tries again), and a dlock Client sends renewals, its name record and,
// on first use, a look at the server's eviction policy. Warm the Client up
// first (Client.Check, or a first lock) to aim at a request of your own.
type Faults struct {
	// Addr is the switch's address, for go-redis's Options.Addr: 127.0.0.1
	// and a free port.
	Addr string

	t testing.TB
	p *faultproxy.Proxy
}

// NewFaults starts a switch to the server at addr (host:port), passing
// everything, and closes it (and every connection through it) when the test
// ends. Give its Addr to the go-redis client of the dlock Client to be cut
// off.
//
// Cleanup functions run last registered first: a Client made after
// NewFaults is closed while the switch is still there. Call Restore before
// the test ends if it leaves the switch cut or paused, or the Client's Close
// waits for go-redis to give up on the releases it sends.
func NewFaults(t testing.TB, addr string) *Faults {
	if nilT(t, "NewFaults") {
		return nil
	}
	t.Helper()
	if _, _, err := net.SplitHostPort(addr); err != nil {
		t.Fatalf("dlocktest.NewFaults(%q): want a server's host:port: %v", addr, err)
	}
	p, err := faultproxy.New(addr)
	if err != nil {
		t.Fatalf("dlocktest.NewFaults(%q): %v", addr, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &Faults{Addr: p.Addr(), t: t, p: p}
}

// Cut closes every connection through the switch and refuses new ones until
// Restore.
func (f *Faults) Cut() {
	if f.nilF("Cut") {
		return
	}
	f.p.Refuse(true)
	f.p.Cut()
}

// Pause stops forwarding, both ways, on every connection through the switch,
// new ones included, until Restore; connections stay open. What either side
// sent meanwhile is forwarded, in order, after Restore, where the other side
// can still take it: a request reaches Redis even if its client gave up on
// it.
func (f *Faults) Pause() {
	if f.nilF("Pause") {
		return
	}
	f.p.Pause()
}

// Restore ends a Cut and a Pause, and cancels a LoseNextReply that has not
// happened yet: from then on the switch forwards everything.
func (f *Faults) Restore() {
	if f.nilF("Restore") {
		return
	}
	f.p.Clear()
	f.p.Refuse(false)
	f.p.Resume()
}

// LoseNextReply has the switch lose the reply to the next request it reads
// from a client, on any connection not in pub/sub mode: the request runs in
// Redis, its reply is thrown away and the connection closed. It returns a
// channel that is closed when that request has been read (its reply is then
// being lost). Calling it again before that loses one more reply.
func (f *Faults) LoseNextReply() <-chan struct{} {
	if f.nilF("LoseNextReply") {
		ch := make(chan struct{})
		return ch
	}
	return f.p.Inject(faultproxy.Rule{Fault: faultproxy.DropReply, Times: 1}).Hit()
}

// nilF reports whether f is nil or was not made by NewFaults, and if so
// says so on standard error: there is no test to fail.
func (f *Faults) nilF(method string) bool {
	switch {
	case f == nil:
		fmt.Fprintf(os.Stderr, "dlocktest: %s of a nil *Faults: nothing was done\n", method)
		return true
	case f.p == nil:
		fmt.Fprintf(os.Stderr, "dlocktest: %s of a Faults not made by NewFaults: nothing was done\n", method)
		return true
	}
	return false
}
