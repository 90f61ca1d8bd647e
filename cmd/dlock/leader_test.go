package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
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
	var el struct {
		Leader *struct {
			Owner, Value string
			Term         int64
			Since        time.Time
		}
		Candidates []struct{ Owner string }
	}
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

// electionInLine waits until c's election name has n candidates in line,
// and returns its state then.
func electionInLine(t *testing.T, c *dlock.Client, name string, n int) *dlock.LockState {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s, err := c.Inspect(context.Background(), dlock.KindElection, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Waiters) == n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect: %+v, want %d candidates in line", s, n)
		}
	}
}

// TestWatchElection: in a terminal (a tmux pane), watch --kind Election
// shows who leads, in which term and with which value, and the candidates in
// line; after the leader's Resign, the candidate it handed over to, and after
// the last Resign, that nobody leads.
func TestWatchElection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, flags := admin(t)
	screen := watchPane(t, append(append([]string{"--kind", "Election", "--interval", "50ms"}, flags...), "tmux-el")...)
	screen(`Election "tmux-el"`, "leader      none: nobody leads", "leader changes: 0 seen", "candidates  none in line")

	a, err := c.Election("tmux-el").Campaign(ctx, "host-a:8080")
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan *dlock.Leadership, 1)
	go func() {
		b, _ := newLockClient(t, rdb).Election("tmux-el").Campaign(ctx, "host-b:8080")
		next <- b
	}()
	s := electionInLine(t, c, "tmux-el", 1)
	first, second := s.Holders[0].Owner, s.Waiters[0].Owner
	screen("leader      "+first, "term        "+itoa(a.Term()), `value       "host-a:8080"`, "candidates  1 in line", "1  "+second, "leader changes: 1 seen")

	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-next
	if b == nil {
		t.Fatal("the candidate in line did not lead after the Resign")
	}
	got := screen("leader      "+second, "term        "+itoa(b.Term()), `value       "host-b:8080"`, "candidates  none in line", "leader changes: 2 seen")
	if strings.Contains(got, first) {
		t.Errorf("the pane still shows the leader that resigned:\n%s", got)
	}

	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	got = screen("leader      none: nobody leads", "candidates  none in line", "leader changes: 2 seen")
	if strings.Contains(got, second) || strings.Contains(got, "term ") {
		t.Errorf("the pane still shows a leader after the last Resign:\n%s", got)
	}
	if n := strings.Count(got, "dlock watch"); n != 1 {
		t.Errorf("the view is drawn %d times on the screen, want once, in place:\n%s", n, got)
	}
}

// TestWatchElectionPiped: piped, watch --kind Election prints a line at each
// change: nobody, the first leader, the candidate it hands over to at its
// Resign (with no line of nobody leading in between: the Resign granted the
// next term), and nobody again after the last Resign.
func TestWatchElectionPiped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, flags := admin(t)
	pr, pw := io.Pipe()
	wctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(wctx, append([]string{"watch", "--kind", "Election", "--interval", "20ms"}, append(flags, "el")...), nil, pw, io.Discard)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	// until reads lines up to the first with every one of want in it;
	// each line it skips must have one of may in it.
	until := func(may []string, want ...string) string {
		t.Helper()
		for {
			if !lines.Scan() {
				t.Fatalf("watch ended: %v", lines.Err())
			}
			l := lines.Text()
			all := true
			for _, w := range want {
				all = all && strings.Contains(l, w)
			}
			if all {
				return l
			}
			ok := false
			for _, m := range may {
				ok = ok || strings.Contains(l, m)
			}
			if !ok {
				t.Fatalf("watch printed %q before a line with %q", l, want)
			}
		}
	}
	until(nil, "leader=none candidates=0", "changes=0")
	a, err := c.Election("el").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan *dlock.Leadership, 1)
	go func() {
		b, _ := newLockClient(t, rdb).Election("el").Campaign(ctx, "b")
		next <- b
	}()
	s := electionInLine(t, c, "el", 1)
	first, second := s.Holders[0].Owner, s.Waiters[0].Owner
	until([]string{"leader=" + first}, "leader="+first, "term="+itoa(a.Term()), `value="a"`, "candidates=1", "changes=1")
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-next
	if b == nil {
		t.Fatal("the candidate in line did not lead after the Resign")
	}
	until([]string{"leader=" + first}, "leader="+second, "term="+itoa(b.Term()), `value="b"`, "candidates=0", "changes=2")
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	until([]string{"leader=" + second}, "leader=none candidates=0", "changes=2")
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Errorf("watch: %v", err)
	}
}
