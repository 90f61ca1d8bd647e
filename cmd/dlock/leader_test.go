package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestLeader: dlock leader prints who leads an election (owner id, term,
// value) and the candidates in line, in order; -json the same as an object;
// with nobody leading, it says so.
func TestLeader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, flags := admin(t)
	out, err := runCmd(t, "", append([]string{"leader"}, append(flags, "jobs")...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "leader      none") || !strings.Contains(out, "candidates  none in line") {
		t.Errorf("with nobody leading:\n%s", out)
	}

	ld, err := c.Election("jobs").Campaign(ctx, "host-a:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(ctx)
	other := newLockClient(t, rdb)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := make(chan error, 1)
	go func() {
		ld, err := other.Election("jobs").Campaign(cctx, "host-b:8080")
		if err == nil {
			err = ld.Resign(ctx)
		}
		waiting <- err
	}()
	defer func() { cancel(); <-waiting }()
	var s *dlock.LockState
	for deadline := time.Now().Add(10 * time.Second); ; {
		if s, err = c.Inspect(ctx, dlock.KindElection, "jobs"); err != nil {
			t.Fatal(err)
		}
		if len(s.Waiters) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(s.Holders) != 1 || len(s.Waiters) != 1 {
		t.Fatalf("Inspect: %+v, want a leader and a candidate", s)
	}
	leaderID, candidate := s.Holders[0].Owner, s.Waiters[0].Owner

	out, err = runCmd(t, "", append([]string{"leader"}, append(flags, "jobs")...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"leader      " + leaderID, "term        " + strconv.FormatInt(ld.Term(), 10), `value       "host-a:8080"`,
		"candidates  1 in line", "1  " + candidate,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	out, err = runCmd(t, "", append([]string{"leader", "-json"}, append(flags, "jobs")...)...)
	if err != nil {
		t.Fatal(err)
	}
	var el election
	if err := json.Unmarshal([]byte(out), &el); err != nil {
		t.Fatalf("-json: %v\n%s", err, out)
	}
	if el.Leader == nil || el.Leader.Owner != leaderID || el.Leader.Term != ld.Term() || el.Leader.Value != "host-a:8080" ||
		!el.Leader.Since.Equal(time.UnixMicro(ld.Term())) || len(el.Candidates) != 1 || el.Candidates[0].Owner != candidate {
		t.Errorf("-json: %+v", el)
	}
}

// TestLeaderUsage: dlock leader wants one NAME.
func TestLeaderUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"leader"}, {"leader", "a", "b"}} {
		if _, err := runCmd(t, "", args...); err == nil {
			t.Errorf("%q: no error", args)
		} else if _, ok := err.(*usageError); !ok {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}
