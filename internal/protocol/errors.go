package protocol

// Error classes: which failures are worth trying again, which say a command
// is not allowed.

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/rclient"
)

// isReply reports whether err is, or wraps, an error reply of the server.
func isReply(err error) bool {
	_, ok := rclient.Reply(err)
	return ok
}

// refused says what Redis's refusal of a client that has not authenticated
// means. Redis answers a request of many arguments from such a client with
// "Protocol error: unauthenticated multibulk length", not NOAUTH, and closes
// the connection: every script call is such a request.
func refused(err error) error {
	if err == nil {
		return nil // before rerr, which escapes: no allocation on success
	}
	msg, ok := rclient.Reply(err)
	if !ok {
		return err
	}
	if strings.Contains(msg, "unauthenticated") ||
		strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS") {
		return errs.Op(nil, err, "Redis refuses the client: no password or a wrong one (the Redis client's username and password: go-redis's Options.Username and Password)")
	}
	if scriptsRefused(msg) {
		return errs.Op(nil, err, "Redis runs no script for this user (an ACL without @scripting, or a server without Lua): a Client made with dlock.WithoutScripts() sends none (it needs Valkey 9.0 or later)")
	}
	return err
}

// scriptsRefused reports whether msg, an error reply, refuses a script
// call itself: the ACL user may not send EVALSHA or EVAL, or the server
// does not know them.
func scriptsRefused(msg string) bool {
	m := strings.ToLower(msg)
	return (strings.HasPrefix(m, "noperm") || strings.HasPrefix(m, "err unknown command")) &&
		(strings.Contains(m, "'evalsha'") || strings.Contains(m, "'eval'"))
}

// noScript reports whether err is the server's answer to an EVALSHA of a
// script it does not know, also wrapped.
func noScript(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOSCRIPT")
}

// Transient reports whether err, the failure of a request, says that Redis
// could not be reached or is changing hands (a failover, a restart, a slot
// migration), so that the request may succeed if made again shortly. A reply
// that is an ordinary error, a closed client and an ended context are not.
func Transient(err error) bool {
	var nq *errs.QuorumError
	switch {
	case err == nil, errors.Is(err, rclient.ErrClosed):
		return false
	case errors.As(err, &nq):
		// The members that did not answer (in time, or before the caller's
		// context ended), or are changing hands, may be back shortly; a
		// majority may grant the request then, unless too many members
		// refused it, which they would do again.
		refused := 0
		for _, e := range nq.Errs {
			if !errors.Is(e, errs.ErrNodeTimeout) && !errors.Is(e, context.DeadlineExceeded) &&
				!errors.Is(e, context.Canceled) && !Transient(e) {
				refused++
			}
		}
		return refused <= nq.Nodes-nq.Need
	case isReply(err):
		msg, _ := rclient.Reply(err)
		for _, p := range transientReplies {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, rclient.ErrPoolTimeout):
		return true
	}
	var nerr *net.OpError
	if errors.As(err, &nerr) && nerr.Op == "dial" {
		return true // never sent, even if a deadline cut the dial short
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// transientReplies start the error replies of a server that cannot serve the
// request now but may shortly: its cluster is down or resharding, it is
// loading its data, it was demoted to a replica, or it lost its primary.
var transientReplies = []string{"CLUSTERDOWN ", "TRYAGAIN ", "MOVED ", "ASK ", "LOADING ", "READONLY ", "MASTERDOWN "}

// wrongType reports whether err is Redis's answer to a command on a key
// that holds another type.
func wrongType(err error) bool {
	msg, ok := rclient.Reply(err)
	return ok && strings.HasPrefix(msg, "WRONGTYPE")
}

// noPerm reports whether err is Redis's refusal of a command the ACL user
// may not run.
func noPerm(err error) bool {
	msg, ok := rclient.Reply(err)
	return ok && strings.HasPrefix(msg, "NOPERM")
}

// unknownCommand reports whether err is Redis's answer to a command it does
// not run: an older server, or one renamed away.
func unknownCommand(err error) bool {
	msg, ok := rclient.Reply(err)
	return ok && strings.HasPrefix(msg, "ERR unknown command")
}
