package protocol

// The server's clock as a node knows it, and the deadline every acquire
// carries in the server's time.

import (
	"sync/atomic"
	"time"
)

// serverClock is what a node knows of its server's clock: the offset of the
// server's time from the local wall clock, learned from replies that carry
// the server's time. Requests are dated by it; its error costs nothing but
// a request sent again (a deadline that had passed when it arrived) or a
// record kept longer than needed, since Redis compares each deadline with its
// own clock.
type serverClock struct {
	offset atomic.Int64 // ms: the server's time less the local wall clock's
	// last is the deadline argument handed out last, boxed once: every
	// acquire carries one, and a deadline rounded up to deadlineStep serves
	// the calls of that step without an allocation each.
	last atomic.Pointer[deadlineArg]
}

type deadlineArg struct {
	ms  int64
	arg any
}

// RequestTTL is how long an acquire may take to reach Redis: a copy that
// arrives later changes nothing. It bounds how long a copy whose reply was
// lost can still arrive, and so how long the record that refuses it lives.
const RequestTTL = 10 * time.Second

// deadlineStep is the rounding of a request's deadline (up).
const deadlineStep = 64

// learn notes the server's time (µs), read from a reply just received.
func (c *serverClock) learn(serverMicros int64) {
	if serverMicros > 0 {
		c.offset.Store(serverMicros/1000 - time.Now().UnixMilli())
	}
}

// now returns the server's time as c knows it, in ms.
func (c *serverClock) now() int64 {
	return time.Now().UnixMilli() + c.offset.Load()
}

// deadline returns the deadline of a request sent now, in the server's
// milliseconds, and the same as a script argument.
func (c *serverClock) deadline() (int64, any) {
	ms := time.Now().UnixMilli() + c.offset.Load() + RequestTTL.Milliseconds()
	ms += deadlineStep - 1 - (ms+deadlineStep-1)%deadlineStep
	if a := c.last.Load(); a != nil && a.ms == ms {
		return ms, a.arg
	}
	a := &deadlineArg{ms, ms}
	c.last.Store(a)
	return ms, a.arg
}

// RequestDeadline returns, for a Backend that dates its acquires (a node),
// the deadline it would give one sent now, in its server's milliseconds: no
// earlier than that of any acquire it sent before. It returns 0 for any
// other Backend.
func RequestDeadline(b Backend) int64 {
	if d, ok := b.(interface{ requestDeadline() int64 }); ok {
		return d.requestDeadline()
	}
	return 0
}

func (n *Node) requestDeadline() int64 {
	ms, _ := n.clock.deadline()
	return ms
}
