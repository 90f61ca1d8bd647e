package protocol

// Sending a request, copy by copy. A Redis client sends a request again by
// itself when its reply is lost, and the first copy can still reach Redis
// after the second one's answer came back: after its owner's next request,
// even after its Unlock. So the acquire and release calls are sent once
// (rclient.Client.Once), and the node sends them again itself, as the
// Redis client would, but
// knowing when a copy whose outcome is unknown is still out. Each acquire
// carries a deadline in the server's time, after which Redis ignores it: a
// copy that arrives later takes nothing, and the release that ends an owner
// whose acquire is still out leaves a record, until that deadline, that
// refuses it (lua/lib_common.lua: records).

import (
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/rclient"
)

// backoff is the pause before try (1 for the first try again) under p:
// go-redis's, a random pause from MinBackoff up to MinBackoff << try, at
// most MaxBackoff.
func backoff(p rclient.Retry, try int) time.Duration {
	if p.MinBackoff == 0 {
		return 0
	}
	d := p.MinBackoff << min(try, 30)
	if d < p.MinBackoff || d > p.MaxBackoff {
		d = p.MaxBackoff
	}
	return min(p.MinBackoff+rand.N(d), p.MaxBackoff)
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// unsent reports whether err, the failure of one copy of a request, shows
// that Redis did not run it: no connection could be had or made, the client
// was closed, or Redis answered with an error (every dlock script raises its
// errors before it writes). Any other failure (a reset connection, a read
// that timed out, the caller's context that ended while the reply was out)
// leaves the copy's outcome unknown: it may have run, or may still run.
func unsent(err error) bool {
	var nerr *net.OpError
	switch {
	case isReply(err):
		return true
	case errors.As(err, &nerr) && nerr.Op == "dial":
		return true
	case errors.Is(err, rclient.ErrPoolTimeout), errors.Is(err, rclient.ErrClosed):
		return true
	}
	return false
}

// retryable reports whether a copy that failed with err may be followed by
// another, as go-redis would send one: after a network failure or timeout,
// or a reply of a server that cannot serve the request now (it is loading,
// a replica, its cluster down or its slot moving).
func retryable(err error) bool {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		var nerr *net.OpError
		return errors.As(err, &nerr) && nerr.Op == "dial"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, rclient.ErrPoolTimeout):
		return true
	case errors.Is(err, rclient.ErrClosed):
		return false
	}
	if msg, ok := rclient.Reply(err); ok {
		for _, p := range retryReplies {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// retryReplies start the error replies that go-redis sends a request again
// after: the server cannot serve it now, and did not run it.
var retryReplies = []string{"LOADING ", "READONLY ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN ", "NOREPLICAS ", "ERR max number of clients reached"}

// sent is the outcome of sending a request copy by copy: the reply or the
// last copy's error; doubt, whether a copy's outcome is unknown (it may
// have run, or may still arrive); and retried, whether the reply follows
// such a copy.
type sent struct {
	v       any
	err     error
	doubt   bool
	retried bool
}

// send sends the script call a (EVALSHA, its SHA and the rest) once, then
// EVAL of s's body if the server does not know it, and sends it again, as the
// Redis client would have, while a copy fails in a way that may not recur and
// tries are left.
func (n *Node) send(ctx context.Context, s *Script, a []any) sent {
	var r sent
	for try := 0; ; try++ {
		v, err := n.sendOnce(ctx, s, a)
		if err == nil {
			r.v, r.err = v, nil
			return r
		}
		r.err = err
		if !unsent(err) {
			r.doubt = true
		}
		if try >= n.retry.Max || !retryable(err) || ctx.Err() != nil {
			return r
		}
		r.retried = r.doubt
		if !sleep(ctx, backoff(n.retry, try+1)) {
			return r
		}
	}
}

// sendOnce sends one copy of the call a: EVALSHA, then, if the server does
// not know the script (it did not run it), EVAL of its body.
func (n *Node) sendOnce(ctx context.Context, s *Script, a []any) (any, error) {
	v, err := n.c.Once(ctx, a)
	if noScript(err) {
		a[0], a[1] = "eval", srcArg(s)
		v, err = n.c.Once(ctx, a)
		a[0], a[1] = "evalsha", shaArg(s)
	}
	return v, err
}

// noDeadline is a deadline argument that never passes, for requests whose
// late copy needs no refusal (a re-entry sets a count).
var noDeadline any = int64(math.MaxInt64 / 2)
