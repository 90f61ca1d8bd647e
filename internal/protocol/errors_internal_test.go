package protocol

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/rclient"
)

// TestTransient: a failure is ridden out only if trying again may help. A
// RedLock's short quorum is, while some member did not answer or is
// changing hands, unless so many members refused it that no majority can
// grant it: a script error on the members would otherwise be waited out for
// ever.
func TestTransient(t *testing.T) {
	t.Parallel()
	scriptErr := replyError("ERR value is not an integer or out of range script: x")
	quorum := func(es ...error) error {
		return fmt.Errorf("acquire %q: %w", "l", &errs.QuorumError{Answered: 0, Need: 3, Nodes: 5, Errs: es})
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"closed client", fmt.Errorf("release: %w", rclient.ErrClosed), false},
		{"ended context", context.Canceled, false},
		{"connection cut", io.EOF, true},
		{"failover", replyError("READONLY You can't write against a read only replica."), true},
		{"script error", scriptErr, false},
		{"quorum, members timed out", quorum(errs.ErrNodeTimeout, errs.ErrNodeTimeout, errs.ErrNodeTimeout), true},
		{"quorum, two refused, one cut off", quorum(scriptErr, scriptErr, io.EOF), true},
		{"quorum, one refused, one timed out", quorum(scriptErr, fmt.Errorf("acquire: %w", errs.ErrNodeTimeout)), true},
		{"quorum, all refused", quorum(scriptErr, scriptErr, scriptErr, scriptErr, scriptErr), false},
		{"quorum, a majority refused, the rest not awaited", quorum(scriptErr, scriptErr, scriptErr, errs.ErrNodeTimeout, errs.ErrNodeTimeout), false},
		{"quorum, cut short by the caller", quorum(scriptErr, context.DeadlineExceeded, context.DeadlineExceeded), true},
		{"quorum, no member errors", quorum(), true},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// replyError is an error reply of the server (rclient.ReplyError).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}
