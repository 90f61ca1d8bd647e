package dlock_test

// An Election's requests whose replies are lost or late, through the fault
// proxy: Campaign, Resign and Proclaim each answer as their first run did,
// and the newest Proclaim is what Redis keeps.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/redis/go-redis/v9"
)

// electionProxied is proxied with the Election's own scripts loaded too.
func electionProxied(t *testing.T, opts ...dlock.Option) (*dlock.Client, *faultproxy.Proxy, *redis.Client) {
	t.Helper()
	c, p, direct := proxied(t, opts...)
	ctx := context.Background()
	load, err := dlock.New(direct, dlock.WithPrefix("load:"))
	if err != nil {
		t.Fatal(err)
	}
	defer load.Close()
	el := load.Election("s")
	ld, err := el.Campaign(ctx, "v")
	if err == nil {
		_, err = el.Leader(ctx)
		err = errors.Join(err, ld.Proclaim(ctx, "w"), ld.Resign(ctx))
	}
	if err != nil {
		t.Fatalf("load the scripts: %v", err)
	}
	return c, p, direct
}

// onlyLeader fails the test unless the election name's lease has exactly
// one holder, the one its leader record names, with one hold, in term: the
// lock state's fence is term.
func onlyLeader(t *testing.T, rdb *redis.Client, name string, term int64) {
	t.Helper()
	ctx := context.Background()
	tag := "dlock:election:{" + name + "}"
	s := readLock(t, rdb, tag)
	if !s.Held() {
		t.Errorf("lock state %+v, want one holder", s)
	} else if rec := rdb.HGet(ctx, tag+":leader", "owner").Val(); s.Owner != rec {
		t.Errorf("lock state held by %q, the leader record names %q", s.Owner, rec)
	}
	if s.Holds != 1 && s.Holds != 0 {
		// 0 for a grant its grantee's renewal has not taken up yet.
		t.Errorf("hold count %d, want 1", s.Holds)
	}
	if s.Fence != term {
		t.Errorf("lock state's fence %d, want the term %d", s.Fence, term)
	}
}

// TestElectionRetriedCampaign: a Campaign whose reply is lost runs again;
// the retry answers the same term: one hold, the record of that term. A
// candidate's registration whose reply is lost keeps one place in line, and
// its value: the Resign before it hands over to it.
func TestElectionRetriedCampaign(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := electionProxied(t)
	in := dropOnce(t, p, "acquire")
	ld, err := c.Election("x").Campaign(ctx, "a")
	checkHit(t, in)
	if err != nil {
		t.Fatalf("Campaign whose reply was lost: %v", err)
	}
	onlyLeader(t, rdb, "x", ld.Term())
	el := clientOn(t, rdb).Election("x")
	mustLead(t, el, "a", ld.Term())

	in = dropOnce(t, p, "acquire")
	next := campaignAsync(ctx, c.Election("x"), "b")
	candidatesInLine(t, rdb, "x", 1)
	checkHit(t, in)
	if n := rdb.ZCard(ctx, "dlock:election:{x}:waiters").Val(); n != 1 {
		t.Errorf("%d candidates in line, want 1", n)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-next
	if r.err != nil {
		t.Fatal(r.err)
	}
	onlyLeader(t, rdb, "x", r.ld.Term())
	mustLead(t, el, "b", r.ld.Term())
	if err := r.ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	mustHaveNoLeader(t, el)
}

// TestElectionLateCampaign: a Campaign whose reply comes after its context
// ended returns an error matching ErrNotAcquired and the context's; the
// lease its request took in Redis is given back once the reply comes:
// nobody leads.
func TestElectionLateCampaign(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := electionProxied(t)
	in := p.Inject(faultproxy.Rule{Match: script("acquire"), Fault: faultproxy.DelayReply, Delay: time.Second, Times: 1})
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := c.Election("x").Campaign(cctx, "a")
	checkHit(t, in)
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign whose reply came late: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	el := clientOn(t, rdb).Election("x")
	if !within(5*time.Second, func() bool { _, err := el.Leader(ctx); return errors.Is(err, dlock.ErrNoLeader) }) {
		t.Fatal("the late Campaign's lease was never given back")
	}
	// The lock state stays, free, until the given-back lease would have
	// ended; the leader record goes.
	if s := readLock(t, rdb, "dlock:election:{x}"); s.Held() || s.Holds != 0 {
		t.Errorf("lock state %+v after the lease was given back, want it free", s)
	} else if ttl := rdb.PTTL(ctx, "dlock:election:{x}").Val(); s.Exists && (ttl <= 0 || ttl > dlock.DefaultTTL) {
		t.Errorf("the free lock state expires in %v, want within the lease's TTL (%v)", ttl, dlock.DefaultTTL)
	}
	if n := rdb.Exists(ctx, "dlock:election:{x}:leader").Val(); n != 0 {
		t.Error("the leader record left after the lease was given back")
	}
}

// TestElectionRetriedResign: a Resign whose reply is lost runs again; the
// retry finds the lease handed over by its first run and answers so: Resign
// returns nil, and the next candidate leads, granted once.
func TestElectionRetriedResign(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := electionProxied(t)
	ld, err := c.Election("x").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	next := campaignAsync(ctx, clientOn(t, rdb).Election("x"), "b")
	candidatesInLine(t, rdb, "x", 1)
	in := dropOnce(t, p, "release")
	err = ld.Resign(ctx)
	checkHit(t, in)
	if err != nil {
		t.Fatalf("Resign whose reply was lost: %v", err)
	}
	r := <-next
	if r.err != nil {
		t.Fatal(r.err)
	}
	onlyLeader(t, rdb, "x", r.ld.Term())
	mustLead(t, clientOn(t, rdb).Election("x"), "b", r.ld.Term())
	if err := ld.Resign(ctx); err != nil {
		t.Errorf("Resign again: %v, want nil", err)
	}
	if err := r.ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectionResignEndsHereFirst: Resign ends the leadership here before it
// sends anything: while its release is held up on the way to Redis, Done is
// closed and Err matches ErrNotHeld; then the next candidate leads.
func TestElectionResignEndsHereFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := electionProxied(t)
	ld, err := c.Election("x").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	next := campaignAsync(ctx, clientOn(t, rdb).Election("x"), "b")
	candidatesInLine(t, rdb, "x", 1)
	held := p.Inject(faultproxy.Rule{Match: script("release"), Fault: faultproxy.DelayRequest, Delay: 300 * time.Millisecond, Times: 1})
	done := make(chan error, 1)
	go func() { done <- ld.Resign(ctx) }()
	select {
	case <-held.Hit():
	case <-time.After(5 * time.Second):
		t.Fatal("the release was never sent")
	}
	select {
	case err := <-done:
		t.Fatalf("Resign returned (%v) while its release was held up", err)
	default:
	}
	if !closedWithin(ld.Done(), 10*time.Millisecond) || !errors.Is(ld.Err(), dlock.ErrNotHeld) {
		t.Errorf("while its release is held up, the leadership has not ended: Err %v", ld.Err())
	}
	if err := <-done; err != nil {
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

// TestElectionResignUnreachable: a Resign that cannot reach Redis returns
// the error, having ended the leadership, and keeps trying in the
// background: soon after Redis is back, well within the TTL, the next
// candidate leads, and a later Resign returns nil.
func TestElectionResignUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = 10 * time.Second
	c, p, rdb := electionProxied(t, dlock.WithTTL(ttl))
	ld, err := c.Election("x").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	next := campaignAsync(ctx, clientOn(t, rdb).Election("x"), "b")
	candidatesInLine(t, rdb, "x", 1)
	fail := failRelease(p, "release")
	start := time.Now()
	err = ld.Resign(ctx)
	checkHit(t, fail)
	if err == nil {
		t.Fatal("Resign with Redis unreachable: no error")
	}
	if !errors.Is(ld.Err(), dlock.ErrNotHeld) {
		t.Errorf("after a failed Resign: Err %v, want ErrNotHeld", ld.Err())
	}
	r := <-next
	if r.err != nil {
		t.Fatal(r.err)
	}
	if took := r.at.Sub(start); took >= ttl/2 {
		t.Errorf("the next candidate led %v after the Resign, want well within the TTL (%v): the background release did not", took, ttl)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Errorf("a later Resign, once the background release succeeded: %v, want nil", err)
	}
	if err := r.ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectionRetriedProclaim: a Proclaim whose reply is lost runs again and
// changes nothing more: the record holds its value, of its term, with the
// Proclaim counted once.
func TestElectionRetriedProclaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, p, rdb := electionProxied(t)
	ld, err := c.Election("x").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	in := dropOnce(t, p, "proclaim")
	err = ld.Proclaim(ctx, "b")
	checkHit(t, in)
	if err != nil {
		t.Fatalf("Proclaim whose reply was lost: %v", err)
	}
	l := mustLead(t, clientOn(t, rdb).Election("x"), "b", ld.Term())
	if seq := rdb.HGet(ctx, "dlock:election:{x}:leader", "seq").Val(); seq != "1" {
		t.Errorf("the record's seq %s after one Proclaim, want 1", seq)
	}
	if !l.Since.Equal(time.UnixMicro(ld.Term())) {
		t.Errorf("Since %v after Proclaim, want the term's start %v", l.Since, time.UnixMicro(ld.Term()))
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectionProclaimOrder: of two Proclaims, Redis keeps the one called
// later, and Value reports it, whether the earlier reaches Redis after it
// (held up on its way), or runs first but its reply comes after (held up on
// the way back), or its reply is lost and go-redis's retry of it comes late.
func TestElectionProclaimOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		inject func(p *faultproxy.Proxy) (held <-chan struct{}, check func())
	}{
		{"request late", func(p *faultproxy.Proxy) (<-chan struct{}, func()) {
			in := p.Inject(faultproxy.Rule{Match: script("proclaim"), Fault: faultproxy.DelayRequest, Delay: 500 * time.Millisecond, Times: 1})
			return in.Hit(), func() { checkHit(t, in) }
		}},
		{"reply late", func(p *faultproxy.Proxy) (<-chan struct{}, func()) {
			in := p.Inject(faultproxy.Rule{Match: script("proclaim"), Fault: faultproxy.DelayReply, Delay: 500 * time.Millisecond, Times: 1})
			return in.Hit(), func() { checkHit(t, in) }
		}},
		{"retry late", func(p *faultproxy.Proxy) (<-chan struct{}, func()) { return retryLate(t, p, "proclaim") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, p, rdb := electionProxied(t)
			ld, err := c.Election("x").Campaign(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			held, check := tc.inject(p)
			first := make(chan error, 1)
			go func() { first <- ld.Proclaim(ctx, "earlier") }()
			select {
			case <-held:
			case <-time.After(5 * time.Second):
				t.Fatal("the earlier Proclaim was never held up")
			}
			if err := ld.Proclaim(ctx, "later"); err != nil {
				t.Fatal(err)
			}
			if err := <-first; err != nil {
				t.Fatalf("the earlier Proclaim: %v", err)
			}
			check()
			mustLead(t, clientOn(t, rdb).Election("x"), "later", ld.Term())
			if v := ld.Value(); v != "later" {
				t.Errorf("Value %q, want later", v)
			}
			if err := ld.Resign(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestElectionNothingLeftBehind: a Client that leads one election, waits in
// line in another (whose leader then resigns, granting it the lease) and
// observes a third, and is then cut off for good, as if it died, leaves
// nothing of them in Redis once its lease, its grant and its registration
// have run out.
func TestElectionNothingLeftBehind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = time.Second
	c, p, rdb := electionProxied(t, dlock.WithTTL(ttl))
	d := clientOn(t, rdb, dlock.WithTTL(ttl))
	if _, err := c.Election("la").Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	other, err := d.Election("lb").Campaign(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := campaignAsync(cctx, c.Election("lb"), "b")
	candidatesInLine(t, rdb, "lb", 1)
	observing := observed(cctx, c.Election("lc"))
	nextObserved(t, observing)
	p.Pause()
	if err := other.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	left := func() []string { return rdb.Keys(ctx, "dlock:election:*").Val() }
	if !within(4*ttl, func() bool { return len(left()) == 0 }) {
		t.Errorf("keys left %v after the lease, the grant and the registration ran out", left())
	}
	cancel()
	p.Resume()
	<-waiting
	for range observing {
	}
}

// TestElectionObserveResync: while Redis cannot be reached, Observe yields
// errors and goes on; once Redis is back, it reads the state again and
// yields the change it missed meanwhile (a Proclaim, whose message it could
// not receive).
func TestElectionObserveResync(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, p, rdb := electionProxied(t, dlock.WithTTL(time.Second))
	ld, err := clientOn(t, rdb).Election("x").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	obs := observed(ctx, c.Election("x"))
	if o := nextObserved(t, obs); o.l.Value != "a" || o.l.Term != ld.Term() {
		t.Fatalf("observed %+v first", o.l)
	}
	p.Refuse(true)
	p.Cut()
	select {
	case o := <-obs:
		if o.err == nil {
			t.Fatalf("observed %+v while Redis could not be reached, want an error", o.l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no error while Redis could not be reached")
	}
	if err := ld.Proclaim(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	p.Refuse(false)
	for {
		select {
		case o := <-obs:
			if o.err != nil {
				continue
			}
			if o.l.Value != "b" || o.l.Term != ld.Term() {
				t.Fatalf("observed %+v once Redis was back, want the Proclaim's value b in term %d", o.l, ld.Term())
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatal("nothing observed 10s after Redis was back")
		}
	}
}

// TestElectionAfterLoss: a leadership lost (its leader cut off past its
// lease) ends with ErrLockLost; Proclaim and Resign then send nothing, and
// return errors matching ErrNotHeld and ErrLockLost.
func TestElectionAfterLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = 500 * time.Millisecond
	c, p, _ := electionProxied(t, dlock.WithTTL(ttl))
	ld, err := c.Election("x").Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	p.Pause()
	if !closedWithin(ld.Done(), 2*ttl) || !errors.Is(ld.Err(), dlock.ErrLockLost) {
		p.Resume()
		t.Fatalf("Err of a leader cut off past its lease: %v, want ErrLockLost", ld.Err())
	}
	p.Resume()
	sent := p.Inject(faultproxy.Rule{Match: func(cmd faultproxy.Command) bool {
		return script("proclaim")(cmd) || script("release")(cmd)
	}, Fault: faultproxy.Pass})
	for name, err := range map[string]error{"Proclaim": ld.Proclaim(ctx, "b"), "Resign": ld.Resign(ctx), "Resign again": ld.Resign(ctx)} {
		if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("%s after the loss: %v, want ErrNotHeld and ErrLockLost", name, err)
		}
	}
	if n := sent.Hits(); n != 0 {
		t.Errorf("%d requests sent after the loss", n)
	}
}
