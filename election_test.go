package dlock_test

// Election in one process: the leader record a grant writes, Proclaim,
// Resign and Close handing over at once, Observe, the administrative calls,
// and bad input. The multi-process tests are in election_process_test.go,
// the fault-proxy ones in election_faults_test.go.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
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
// but the lock state, free, with the last term as its fence, until the
// lease would have ended.
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

	// Any bytes: the candidate's value travels in its entry in line.
	const bValue = "b|1\x00\n|"
	next := campaignAsync(ctx, other.Election("e"), bValue)
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
	r := <-next
	if r.err != nil {
		t.Fatal(r.err)
	}
	b := r.ld
	if b.Term() <= a.Term() {
		t.Errorf("the next term %d is not above %d", b.Term(), a.Term())
	}
	if l := mustLead(t, el, bValue, b.Term()); !l.Since.After(first.Since) {
		t.Errorf("the next term's Since %v is not after %v", l.Since, first.Since)
	}
	if err := a.Proclaim(ctx, "late"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Proclaim after Resign: %v, want ErrNotHeld", err)
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	mustHaveNoLeader(t, el)
	if keys := rdb.Keys(ctx, "dlock:election:*").Val(); len(keys) != 1 || keys[0] != "dlock:election:{e}" {
		t.Errorf("keys left: %v, want the lock state only", keys)
	}
	if s := readLock(t, rdb, "dlock:election:{e}"); s.Held() || s.Holds != 0 || s.Owner != "" || s.Fence != b.Term() {
		t.Errorf("lock state %+v after the last Resign, want it free with the last term %d as its fence", s, b.Term())
	}
	if ttl := rdb.PTTL(ctx, "dlock:election:{e}").Val(); ttl <= 0 || ttl > dlock.DefaultTTL {
		t.Errorf("the free lock state expires in %v, want within the lease's TTL (%v)", ttl, dlock.DefaultTTL)
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

// observed follows el's Observe on a goroutine of its own, until ctx ends:
// each yield, as it came, on the channel.
func observed(ctx context.Context, el *dlock.Election) <-chan observation {
	ch := make(chan observation, 100)
	go func() {
		defer close(ch)
		for l, err := range el.Observe(ctx) {
			ch <- observation{l, err, time.Now()}
		}
	}()
	return ch
}

type observation struct {
	l   dlock.Leader
	err error
	at  time.Time
}

// nextObserved returns the next state the observer yields, failing the test
// on an error or if none comes within 10s.
func nextObserved(t *testing.T, ch <-chan observation) observation {
	t.Helper()
	select {
	case o, ok := <-ch:
		if !ok {
			t.Fatal("Observe ended")
		}
		if o.err != nil {
			t.Fatalf("Observe: %v", o.err)
		}
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("Observe yielded nothing for 10s")
	}
	return observation{}
}

// TestElectionObserve: in a run paced slower than the observer, Observe
// yields every state, in order: nobody first, a leader, its Proclaim, the
// next leader its Resign granted (with nobody between), nobody after the
// last Resign, a new leader. Two Observe calls of one Client share one
// subscription.
func TestElectionObserve(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, rdb, _ := newClient(t)
	other := clientOn(t, rdb)
	el := c.Election("o")
	obs := observed(ctx, el)
	also := observed(ctx, el)
	want := func(value string, term int64) {
		t.Helper()
		for _, ch := range []<-chan observation{obs, also} {
			if o := nextObserved(t, ch); o.l.Value != value || o.l.Term != term {
				t.Fatalf("observed %+v, want value %q in term %d", o.l, value, term)
			}
		}
	}
	want("", 0)
	if n := subscribers(rdb, "dlock:election:{o}:leader"); n != 1 {
		t.Errorf("%d subscriptions of the election's channel, want the Client's one", n)
	}
	a, err := el.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	want("a", a.Term())
	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	want("a2", a.Term())
	next := campaignAsync(ctx, other.Election("o"), "b")
	candidatesInLine(t, rdb, "o", 1)
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-next
	if r.err != nil {
		t.Fatal(r.err)
	}
	want("b", r.ld.Term())
	if err := r.ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	want("", 0)
	c3, err := other.Election("o").Campaign(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	want("c", c3.Term())
	if err := c3.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	want("", 0)
	cancel()
	for o := range obs {
		t.Errorf("Observe yielded %+v after its context ended", o)
	}
}

// TestElectionObserveLapse: a leader cut off from Redis stops renewing; no
// script runs when its lease runs out, and so no message tells of it, yet
// Observe yields "nobody leads" within a TTL of the lease's end, at most two
// TTLs after the cut (and TTL/10 for scheduling).
func TestElectionObserveLapse(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ttl = time.Second
	c, p, rdb := proxied(t, dlock.WithTTL(ttl))
	ld, err := c.Election("lapse").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	obs := observed(ctx, clientOn(t, rdb).Election("lapse"))
	if o := nextObserved(t, obs); o.l.Term != ld.Term() {
		t.Fatalf("observed %+v first, want term %d", o.l, ld.Term())
	}
	cut := time.Now()
	p.Pause()
	defer p.Resume()
	o := nextObserved(t, obs)
	if o.l.Term != 0 {
		t.Fatalf("observed %+v after the leader was cut off, want nobody", o.l)
	}
	if late := o.at.Sub(cut); late > 2*ttl+ttl/10 {
		t.Errorf("nobody leads was observed %v after the cut, want within 2 TTLs (%v)", late, 2*ttl)
	}
	if !closedWithin(ld.Done(), 2*ttl) || !errors.Is(ld.Err(), dlock.ErrLockLost) {
		t.Errorf("the cut-off leader's Err: %v, want ErrLockLost", ld.Err())
	}
}

// TestElectionCampaignWhileLeading: a Campaign with a context carrying a
// Leadership of the same Election fails at once, matching ErrNotAcquired;
// of another Election, or on another Client, it is a candidate as any.
func TestElectionCampaignWhileLeading(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, _ := newClient(t)
	ld, err := c.Election("x").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := ld.Context(ctx)
	defer cancel()
	inner, cancelInner := context.WithTimeout(lctx, time.Hour)
	defer cancelInner()
	start := time.Now()
	if _, err := c.Election("x").Campaign(inner, "b"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Campaign while leading: %v, want ErrNotAcquired", err)
	}
	if time.Since(start) > time.Second {
		t.Error("Campaign while leading waited")
	}
	if n := rdb.ZCard(ctx, "dlock:election:{x}:waiters").Val(); n != 0 {
		t.Errorf("%d candidates in line after a Campaign while leading", n)
	}
	other, err := c.Election("y").Campaign(lctx, "b")
	if err != nil {
		t.Fatalf("Campaign of another Election while leading one: %v", err)
	}
	if err := other.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(lctx, 300*time.Millisecond)
	defer wcancel()
	if _, err := clientOn(t, rdb).Election("x").Campaign(wctx, "c"); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign on another Client with the leader's context: %v, want it to wait until its deadline", err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectionCampaignGivesUp: a Campaign whose context ends while it waits
// returns an error matching ErrNotAcquired and the context's, and leaves
// the line: nothing of it stays in Redis.
func TestElectionCampaignGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, _ := newClient(t)
	ld, err := c.Election("x").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.Election("x").Campaign(wctx, "b"); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign given up: %v", err)
	}
	if !within(5*time.Second, func() bool {
		return rdb.Exists(ctx, "dlock:election:{x}:waiters", "dlock:election:{x}:alive").Val() == 0
	}) {
		t.Error("the candidate that gave up is still in line")
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	mustHaveNoLeader(t, c.Election("x"))
}

// TestElectionClose: a Client's Close resigns what it leads: the candidate
// in line leads at once, granted by Close's release (its term began while
// Close ran), far within the TTL of 30s; the closed leadership's Err
// matches ErrClosed, and so does its Resign, which sends nothing.
func TestElectionClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, rdb, srv := newClient(t)
	leaderC := clientOn(t, srv.Client(t), dlock.WithTTL(30*time.Second))
	ld, err := leaderC.Election("x").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	next := campaignAsync(ctx, clientOn(t, rdb).Election("x"), "b")
	candidatesInLine(t, rdb, "x", 1)
	before := time.Now()
	if err := leaderC.Close(); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	r := <-next
	if r.err != nil {
		t.Fatal(r.err)
	}
	l := mustLead(t, clientOn(t, rdb).Election("x"), "b", r.ld.Term())
	if l.Since.Before(before.Add(-time.Millisecond)) || l.Since.After(after.Add(time.Millisecond)) {
		t.Errorf("the next term began at %v, not while Close ran (%v to %v)", l.Since, before, after)
	}
	if !errors.Is(ld.Err(), dlock.ErrClosed) {
		t.Errorf("Err after Close: %v, want ErrClosed", ld.Err())
	}
	if err := ld.Resign(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Resign after Close: %v, want ErrClosed", err)
	}
	if err := r.ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLeadershipContext: the context of a Leadership carries the lease's
// local deadline, which moves later with each renewal, or its parent's if
// earlier. (Its end with the leadership's: the lease contract.)
func TestLeadershipContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	c, _, _ := newClient(t, dlock.WithTTL(ttl))
	start := time.Now()
	ld, err := c.Election("x").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := ld.Context(ctx)
	defer cancel()
	d1, ok := lctx.Deadline()
	if !ok || d1.Before(start) || d1.After(time.Now().Add(ttl)) {
		t.Fatalf("Deadline %v, %v: want the lease's local deadline, within the TTL from now", d1, ok)
	}
	derived, cancelDerived := context.WithTimeout(lctx, time.Hour)
	defer cancelDerived()
	time.Sleep(2 * ttl) // renewals
	if lctx.Err() != nil {
		t.Fatalf("the leadership's context ended while renewed: %v", context.Cause(lctx))
	}
	d2, _ := lctx.Deadline()
	if !d2.After(d1) {
		t.Errorf("Deadline after renewals %v, not after %v", d2, d1)
	}
	if d3, _ := derived.Deadline(); !d3.Equal(d2) && !d3.After(d2) {
		t.Errorf("a derived context's Deadline %v is before the leadership's %v", d3, d2)
	}
	early := time.Now().Add(time.Millisecond)
	pctx, pcancel := context.WithDeadline(ctx, early)
	defer pcancel()
	short, cancelShort := ld.Context(pctx)
	defer cancelShort()
	if d, _ := short.Deadline(); !d.Equal(early) {
		t.Errorf("Deadline with an earlier parent's: %v, want %v", d, early)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectionNamespace: an Election and a Mutex of the same name are held
// at once, on keys of their own.
func TestElectionNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, _ := newClient(t)
	m, err := c.Mutex("x").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ld, err := c.Election("x").Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range stateKeys(rdb, "dlock:*") {
		if strings.HasPrefix(k, "dlock:{x}") == strings.HasPrefix(k, "dlock:election:{x}") {
			t.Errorf("key %q of neither", k)
		}
	}
	if err := errors.Join(ld.Resign(ctx), m.Unlock(ctx)); err != nil {
		t.Fatal(err)
	}
}

// TestElectionAdmin: Inspect shows the leader as the holder and the
// candidates in line, Locks lists the election, and ForceRelease takes the
// lease from the leader: the next candidate leads, with a higher term, and
// the evicted leadership ends lost at its next renewal.
func TestElectionAdmin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, _ := newClient(t, dlock.WithTTL(time.Second))
	ld, err := c.Election("x").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	next := campaignAsync(ctx, clientOn(t, rdb).Election("x"), "b")
	candidatesInLine(t, rdb, "x", 1)
	s, err := c.Inspect(ctx, dlock.KindElection, "x")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Holders) != 1 || s.Holders[0].Fence != ld.Term() || len(s.Waiters) != 1 {
		t.Errorf("Inspect: %+v, want the leader of term %d and one candidate", s, ld.Term())
	}
	var found bool
	for id, err := range c.Locks(ctx, "*") {
		if err != nil {
			t.Fatal(err)
		}
		found = found || id == dlock.LockID{Kind: dlock.KindElection, Name: "x"}
	}
	if !found {
		t.Error("Locks does not list the election")
	}
	ev, err := c.ForceRelease(ctx, dlock.KindElection, "x")
	if err != nil || len(ev.Evicted) != 1 {
		t.Fatalf("ForceRelease: %+v, %v", ev, err)
	}
	r := <-next
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.ld.Term() <= ld.Term() {
		t.Errorf("the term after ForceRelease %d is not above the evicted one's %d", r.ld.Term(), ld.Term())
	}
	mustLead(t, c.Election("x"), "b", r.ld.Term())
	if !closedWithin(ld.Done(), 2*time.Second) || !errors.Is(ld.Err(), dlock.ErrLockLost) {
		t.Errorf("the evicted leadership's Err: %v, want ErrLockLost", ld.Err())
	}
	if err := ld.Resign(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Resign of the evicted leadership: %v, want ErrLockLost", err)
	}
	if err := r.ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectionForceReleaseTerm: a forced release of a leader moves the term
// on, as for a lock: the candidate it hands the lease to, and a candidate
// that campaigns after a forced release that found nobody in line, lead in a
// term above the evicted leader's and at least Eviction.Fence, even when the
// terms have run ahead of the server's clock (as after a failover to a server
// whose clock is behind the old one's), so that a term taken from the clock
// alone would fall below the evicted one.
func TestElectionForceReleaseTerm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, _ := newClient(t, dlock.WithTTL(time.Second))
	ahead := time.Now().Add(time.Hour).UnixMicro()
	// A free lock state whose last fence ran ahead of the clock.
	if err := rdb.Set(ctx, "dlock:election:{ahead}", fmt.Sprintf("%d|0|0|0|", ahead), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if s := readLock(t, rdb, "dlock:election:{ahead}"); s.Held() || s.Fence != ahead {
		t.Fatalf("planted lock state %+v, want it free with fence %d", s, ahead)
	}
	el := c.Election("ahead")
	a, err := el.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if a.Term() <= ahead {
		t.Fatalf("term %d: not above the fence %d", a.Term(), ahead)
	}

	// Handed to the candidate in line.
	next := campaignAsync(ctx, clientOn(t, rdb).Election("ahead"), "b")
	candidatesInLine(t, rdb, "ahead", 1)
	ev, err := c.ForceRelease(ctx, dlock.KindElection, "ahead")
	if err != nil || len(ev.Evicted) != 1 || ev.Evicted[0].Fence != a.Term() {
		t.Fatalf("ForceRelease: %+v, %v; want the leader of term %d evicted", ev, err, a.Term())
	}
	r := <-next
	if r.err != nil {
		t.Fatal(r.err)
	}
	b := r.ld
	if b.Term() <= a.Term() || b.Term() < ev.Fence {
		t.Fatalf("the next leader's term %d, after a forced release of term %d (Eviction.Fence %d): want above %d and at least %d",
			b.Term(), a.Term(), ev.Fence, a.Term(), ev.Fence)
	}
	mustLead(t, el, "b", b.Term())
	if !closedWithin(a.Done(), 2*time.Second) || !errors.Is(a.Err(), dlock.ErrLockLost) {
		t.Errorf("the evicted leadership's Err: %v, want ErrLockLost", a.Err())
	}

	// Nobody in line: the next Campaign's term.
	ev, err = c.ForceRelease(ctx, dlock.KindElection, "ahead")
	if err != nil || len(ev.Evicted) != 1 {
		t.Fatalf("ForceRelease: %+v, %v", ev, err)
	}
	mustHaveNoLeader(t, el)
	d, err := el.Campaign(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if d.Term() <= b.Term() || d.Term() < ev.Fence {
		t.Fatalf("the term after a forced release of term %d with nobody in line: %d (Eviction.Fence %d)", b.Term(), d.Term(), ev.Fence)
	}
	if err := d.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectionRedLock: on a RedLock Client every call of an Election
// returns an error matching errors.ErrUnsupported.
func TestElectionRedLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, nodes := redLockNodes(t, 3)
	el := redLockOn(t, nodes).Election("x")
	_, err1 := el.Campaign(ctx, "v")
	_, err2 := el.Leader(ctx)
	var err3 error
	for _, err := range el.Observe(ctx) {
		err3 = err
		break
	}
	for i, err := range []error{err1, err2, err3} {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("call %d on a RedLock: %v, want ErrUnsupported", i, err)
		}
	}
}

// TestElectionBadInput: an empty or oversized name or value, a nil or zero
// Election, a nil Client, a nil context and WithoutRenewal get a clear
// error, never a panic, and write nothing; a nil Leadership has no value
// and cannot Proclaim.
func TestElectionBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb, _ := newClient(t)
	norenew := clientOn(t, rdb, dlock.WithoutRenewal())
	long := strings.Repeat("n", 1025)
	var nilClient *dlock.Client
	var nilElection *dlock.Election
	var nilCtx context.Context
	type campaigner interface {
		Campaign(context.Context, string) (*dlock.Leadership, error)
	}
	var typedNil campaigner = nilElection
	bad := []struct {
		name string
		el   campaigner
	}{
		{"empty name", c.Election("")},
		{"oversized name", c.Election(long)},
		{"WithoutRenewal", c.Election("x", dlock.WithoutRenewal())},
		{"a Client's WithoutRenewal", norenew.Election("x")},
		{"bad option", c.Election("x", dlock.WithTTL(time.Nanosecond))},
		{"nil Election", nilElection},
		{"typed-nil Election", typedNil},
		{"zero Election", &dlock.Election{}},
		{"nil Client", nilClient.Election("x")},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			el, _ := tc.el.(*dlock.Election)
			if _, err := tc.el.Campaign(ctx, "v"); err == nil {
				t.Error("Campaign: no error")
			} else if strings.Contains(err.Error(), long) {
				t.Error("the error quotes the whole oversized name")
			}
			if _, err := el.Leader(ctx); err == nil {
				t.Error("Leader: no error")
			}
			n := 0
			for _, err := range el.Observe(ctx) {
				if err == nil {
					t.Error("Observe yielded no error")
				}
				n++
			}
			if n != 1 {
				t.Errorf("Observe yielded %d times, want once", n)
			}
		})
	}
	el := c.Election("x")
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		value string
	}{
		{"empty value", ctx, ""},
		{"oversized value", ctx, strings.Repeat("v", 4097)},
		{"nil context", nilCtx, "v"},
	} {
		if _, err := el.Campaign(tc.ctx, tc.value); err == nil {
			t.Errorf("Campaign with %s: no error", tc.name)
		}
	}
	if _, err := el.Leader(nilCtx); err == nil {
		t.Error("Leader with a nil context: no error")
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("bad input wrote %d keys: %v", n, rdb.Keys(ctx, "*").Val())
	}

	// A Leadership: bad values change nothing.
	ld, err := el.Campaign(ctx, strings.Repeat("v", 4096))
	if err != nil {
		t.Fatalf("Campaign with a value of 4096 bytes: %v", err)
	}
	for _, v := range []string{"", strings.Repeat("v", 4097)} {
		if err := ld.Proclaim(ctx, v); err == nil {
			t.Errorf("Proclaim of %d bytes: no error", len(v))
		}
	}
	if err := ld.Proclaim(nilCtx, "v"); err == nil {
		t.Error("Proclaim with a nil context: no error")
	}
	if err := ld.Resign(nilCtx); err == nil {
		t.Error("Resign with a nil context: no error")
	}
	mustLead(t, el, strings.Repeat("v", 4096), ld.Term())
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	// Resign, Term, Err, Done and Context of a nil or zero Leadership: the
	// lease contract.
	var nilLd *dlock.Leadership
	if nilLd.Value() != "" {
		t.Error("a nil Leadership has a value")
	}
	if err := nilLd.Proclaim(ctx, "v"); err == nil {
		t.Error("Proclaim of a nil Leadership: no error")
	}
}

// TestElectionDeployments: on a Redis Cluster, and on a Sentinel
// deployment with WithWaitReplicas (whose candidates take a grant only once
// a replica has it), a leader's Resign hands over to the candidate in line,
// value and all, and an observer sees both terms in order.
func TestElectionDeployments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) redis.UniversalClient
		opts  []dlock.Option
	}{
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t, 3, 0).Client(t) }, nil},
		{"sentinel-wait", func(t *testing.T) redis.UniversalClient { return redistest.StartSentinel(t, 1, 1).Client(t) },
			[]dlock.Option{dlock.WithWaitReplicas(1, time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rdb := tc.start(t)
			a, b := clientOn(t, rdb, tc.opts...), clientOn(t, rdb, tc.opts...)
			obs := observed(ctx, clientOn(t, rdb).Election("d"))
			if o := nextObserved(t, obs); o.l.Term != 0 {
				t.Fatalf("observed %+v first, want nobody", o.l)
			}
			ld, err := a.Election("d").Campaign(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if o := nextObserved(t, obs); o.l.Term != ld.Term() || o.l.Value != "a" {
				t.Fatalf("observed %+v, want a in term %d", o.l, ld.Term())
			}
			next := campaignAsync(ctx, b.Election("d"), "b")
			if !within(10*time.Second, func() bool {
				s, err := a.Inspect(ctx, dlock.KindElection, "d")
				return err == nil && len(s.Waiters) == 1
			}) {
				t.Fatal("the second candidate never stood in line")
			}
			if err := ld.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-next
			if r.err != nil {
				t.Fatal(r.err)
			}
			if o := nextObserved(t, obs); o.l.Term != r.ld.Term() || o.l.Value != "b" || r.ld.Term() <= ld.Term() {
				t.Fatalf("observed %+v, want b in term %d, above %d", o.l, r.ld.Term(), ld.Term())
			}
			mustLead(t, a.Election("d"), "b", r.ld.Term())
			if err := r.ld.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if o := nextObserved(t, obs); o.l.Term != 0 {
				t.Fatalf("observed %+v after the last Resign, want nobody", o.l)
			}
		})
	}
}
