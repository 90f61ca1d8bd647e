package dlock_test

// Election in one process: the leader record a grant writes, Proclaim,
// Resign and Close handing over at once, Observe, the administrative calls,
// and bad input. The multi-process tests are in election_process_test.go,
// the fault-proxy ones in election_faults_test.go.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// campaignAsync runs Campaign on another goroutine; its outcome comes on the
// channel.
func campaignAsync(ctx context.Context, el *dlock.Election, value string) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		ld, err := el.Campaign(ctx, value)
		ch <- campaignResult{ld, err, time.Now()}
	}()
	return ch
}

type campaignResult struct {
	ld  *dlock.Leadership
	err error
	at  time.Time
}

// mustLead fails the test unless el's leader is value in term.
func mustLead(t *testing.T, el *dlock.Election, value string, term int64) dlock.Leader {
	t.Helper()
	l, err := el.Leader(context.Background())
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	if l.Value != value || l.Term != term {
		t.Fatalf("Leader %+v, want value %q in term %d", l, value, term)
	}
	return l
}

// mustHaveNoLeader fails the test unless nobody leads el.
func mustHaveNoLeader(t *testing.T, el *dlock.Election) {
	t.Helper()
	if l, err := el.Leader(context.Background()); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader: %+v, %v; want ErrNoLeader", l, err)
	}
}

// candidatesInLine waits until the election name's line holds n candidates.
func candidatesInLine(t *testing.T, rdb *redis.Client, name string, n int64) {
	t.Helper()
	inQueue(t, rdb, "dlock:election:{"+name+"}:waiters", n)
}

// TestElection: a Campaign of a free election leads at once, and the grant
// wrote term, value and Since (the server time its fence comes from); a
// second candidate waits; Proclaim changes the value, not the term or Since;
// Resign hands over to the waiting candidate at once, with a higher term and
// its own value; the last Resign leaves nobody leading, and nothing in Redis
// but the fence.
func TestElection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, _ := newClient(t)
	other := clientOn(t, rdb)
	el := c.Election("e")
	mustHaveNoLeader(t, el)

	a, err := el.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	first := mustLead(t, el, "a", a.Term())
	if !first.Since.Equal(time.UnixMicro(a.Term())) {
		// A fresh name's first fence is the server time of its grant, in µs.
		t.Errorf("Since %v, want the server time of the grant, %v", first.Since, time.UnixMicro(a.Term()))
	}
	if a.Value() != "a" {
		t.Errorf("Value %q, want a", a.Value())
	}

	next := campaignAsync(ctx, other.Election("e"), "b")
	candidatesInLine(t, rdb, "e", 1)
	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if l := mustLead(t, el, "a2", a.Term()); !l.Since.Equal(first.Since) {
		t.Errorf("Since after Proclaim %v, want %v", l.Since, first.Since)
	}
	if a.Value() != "a2" {
		t.Errorf("Value after Proclaim %q, want a2", a.Value())
	}

	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(a.Err(), dlock.ErrNotHeld) {
		t.Errorf("Err after Resign: %v, want ErrNotHeld", a.Err())
	}
	r := <-next
	if r.err != nil {
		t.Fatal(r.err)
	}
	b := r.ld
	if b.Term() <= a.Term() {
		t.Errorf("the next term %d is not above %d", b.Term(), a.Term())
	}
	if l := mustLead(t, el, "b", b.Term()); !l.Since.After(first.Since) {
		t.Errorf("the next term's Since %v is not after %v", l.Since, first.Since)
	}
	if err := a.Proclaim(ctx, "late"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Proclaim after Resign: %v, want ErrNotHeld", err)
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	mustHaveNoLeader(t, el)
	if keys := rdb.Keys(ctx, "dlock:election:*").Val(); len(keys) != 1 || keys[0] != "dlock:election:{e}:fence" {
		t.Errorf("keys left: %v, want the fence only", keys)
	}
}

// exerciseElection runs every script an Election uses, through c (and
// other, which contends): take, renew, Proclaim, read the leader, register
// and give up as a candidate, hand over by Resign, and release with nobody
// in line.
func exerciseElection(t *testing.T, c, other *dlock.Client) {
	t.Helper()
	ctx := context.Background()
	ld, err := c.Election("e").Campaign(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // a renewal, with c's TTL of 300ms
	if err := ld.Proclaim(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Election("e").Leader(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if _, err := other.Election("e").Campaign(wctx, "o"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a second leader: %v", err)
	}
	cancel()
	next := campaignAsync(ctx, other.Election("e"), "o")
	time.Sleep(100 * time.Millisecond)
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-next
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
