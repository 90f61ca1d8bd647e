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
// What go-redis (v9, default options) and dlock then do, as this package's
// tests check:
//
//   - Cut closes every connection through the switch and refuses new ones
//     (it accepts and closes them at once) until Restore. A request gets an
//     error (io.EOF, or "connection reset by peer") at once; go-redis tries
//     it again MaxRetries times (3 by default) on new connections, with a
//     backoff of 8 ms to 512 ms, and then returns the error. Nothing reaches
//     Redis. A held lease is not renewed and counts as lost at its local
//     deadline (a little before its TTL runs out): Done closes and Err
//     matches dlock.ErrLockLost ("not renewed before its deadline"). After
//     Restore new requests go through; a lost lease stays lost.
//   - Pause stops all traffic, both ways, on every connection, new ones and
//     pub/sub included, while they stay open. A request gets no reply:
//     go-redis waits ReadTimeout (3 s by default; with ContextTimeoutEnabled,
//     no longer than the context's deadline), closes the connection and
//     tries again as after a cut, up to MaxRetries times. The switch never
//     forwards a request whose connection the client closed, so a request
//     given up on does not run later; one whose client still waits for it
//     when Restore is called runs then, and gets its reply.
//   - LoseNextReply lets the next request (a command or script, never a
//     pub/sub message) run in Redis and throws its reply away, closing that
//     connection. go-redis sees io.EOF and sends the request again on
//     another connection (unless MaxRetries is -1, when the caller gets
//     io.EOF), so Redis runs it twice: every dlock request gives the same
//     answer when run twice (the same hold and fence, nothing counted
//     twice, a release that freed the lock reported as released), so the
//     caller sees no difference.
//
// A dlock Client sends more than its caller's requests: renewals, the
// Client's name record, a first look at the server's eviction policy. The
// next request is whichever comes first.
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
// new ones included, until Restore; connections stay open. What Redis sent
// meanwhile is delivered, in order, after Restore; a request is forwarded
// then only if its client has not closed the connection.
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
// says so: through the test if there is one, else on standard error.
func (f *Faults) nilF(method string) bool {
	switch {
	case f == nil:
		fmt.Fprintf(os.Stderr, "dlocktest: %s of a nil *Faults: nothing was done\n", method)
		return true
	case f.p == nil:
		if f.t != nil {
			f.t.Fatalf("dlocktest: %s of a Faults not made by NewFaults", method)
		}
		fmt.Fprintf(os.Stderr, "dlocktest: %s of a Faults not made by NewFaults: nothing was done\n", method)
		return true
	}
	return false
}
