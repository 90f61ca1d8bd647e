package dlock_test

// The fault matrix's rows beyond acquire, release, registration and Extend
// of each kind (matrix_test.go): a renewal round, a Proclaim, a CountDown, a
// SetPermits, a ForceRelease; a RedLock member's acquire, release, undo and
// retake; a Cluster primary's acquire.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The next steps of these rows.
const (
	mxProclaim   mxNext = "Proclaim"
	mxCountDown  mxNext = "CountDown, armed again"
	mxSetPermits mxNext = "SetPermits"
	mxOtherTakes mxNext = "another owner's acquire"
	mxNextRun    mxNext = "another owner's run of the key"
)

// mxMoreRequests are these rows.
func mxMoreRequests() []mxRequest {
	kind := func(name string) mxKind {
		for _, k := range mxKinds {
			if k.name == name {
				return k
			}
		}
		panic(name)
	}
	one := func(m faultproxy.Match) func(mxKind) faultproxy.Match {
		return func(mxKind) faultproxy.Match { return m }
	}
	var rows []mxRequest
	for _, k := range []string{"Mutex", "Semaphore"} {
		rows = append(rows, mxRequest{name: "renewal", kind: kind(k), ttl: 3 * time.Second,
			match: one(faultproxy.And(script("extend"), faultproxy.HasArg("gt"))),
			nexts: []mxNext{mxUnlock, mxExtend}, run: mxRenewal})
	}
	rows = append(rows,
		mxRequest{name: "Proclaim", kind: kind("Election"), match: one(script("proclaim")), nexts: []mxNext{mxProclaim}, run: mxProclaimRow},
		mxRequest{name: "CountDown", kind: mxKind{name: "CountDownLatch"}, match: one(script("latch")), nexts: []mxNext{mxCountDown}, run: mxCountDownRow},
		mxRequest{name: "Share", kind: mxKind{name: "Group"}, match: one(script("group_share")), nexts: []mxNext{mxNextRun}, run: mxShareRow},
		mxRequest{name: "SetPermits", kind: kind("Semaphore"), match: one(faultproxy.And(script("sem_release"), faultproxy.HasArg("3"))), nexts: []mxNext{mxSetPermits}, run: mxSetPermitsRow},
	)
	for _, k := range []string{"Mutex", "RWMutex", "Semaphore", "Election"} {
		// A lock of the string state has a script for it; the others'
		// release scripts a mode.
		evict := one(script("evict"))
		switch k {
		case "RWMutex":
			evict = func(k mxKind) faultproxy.Match { return faultproxy.And(script(k.release), faultproxy.HasArg("3")) }
		case "Semaphore":
			evict = func(k mxKind) faultproxy.Match { return faultproxy.And(script(k.release), faultproxy.HasArg("6")) }
		}
		rows = append(rows, mxRequest{name: "ForceRelease", kind: kind(k), match: evict,
			nexts: []mxNext{mxOtherTakes}, run: mxForceReleaseRow})
	}
	redlock := mxKind{name: "RedLock"}
	rows = append(rows,
		mxRequest{name: "acquire", kind: redlock, nexts: []mxNext{mxUnlock}, cell: mxRedLockAcquire},
		mxRequest{name: "undo", kind: redlock, nexts: []mxNext{mxOtherTakes}, cell: mxRedLockUndo},
		mxRequest{name: "release", kind: redlock, nexts: []mxNext{mxOtherTakes}, cell: mxRedLockRelease},
		mxRequest{name: "retake", kind: redlock, nexts: []mxNext{mxUnlock}, cell: mxRedLockRetake},
		mxRequest{name: "acquire", kind: mxKind{name: "Cluster Mutex"}, nexts: []mxNext{mxUnlock}, cell: mxClusterAcquire},
	)
	return rows
}

// mxRenewal: the renewal of a held lease (TTL 3s, renewed every second) is
// faulted; then the owner unlocks, or shortens the lease. A late copy
// lengthens nothing: after Unlock the name is free, after Extend another
// owner takes it once the shortened lease has run out. A renewal lost or
// dropped is sent again: the lease stays held.
func mxRenewal(e *mxEnv, f mxFault, next mxNext, cp *mxCopies) error {
	k := cp.kind
	cp.in.Remove()
	h, err := k.lock(e.ctx, e.c, e.name)
	if err != nil {
		return fmt.Errorf("acquire: %v", err)
	}
	cp.in = e.p.Inject(cp.rule(e, k))
	if !within(5*time.Second, func() bool { return cp.in.Hits() > 0 }) {
		return errors.New("no renewal was sent")
	}
	if f == mxLost || f == mxDropped {
		time.Sleep(2 * time.Second) // two renewal periods
		if err := h.err(); err != nil {
			return fmt.Errorf("the lease after a renewal %s: %v", f, err)
		}
	}
	switch next {
	case mxUnlock:
		if err := h.release(e.ctx); err != nil {
			return fmt.Errorf("release: %v", err)
		}
		cp.deliverLate()
		return mxFree(e, k)
	case mxExtend:
		return mxShortened(e, k, h, cp, 2*time.Second, "Extend", "a late renewal lengthened the lease an Extend shortened")
	}
	return fmt.Errorf("no cell for %s", next)
}

// mxProclaimRow: a leader's Proclaim is faulted, then it proclaims again:
// Redis keeps the newer value, whatever order the copies run in.
func mxProclaimRow(e *mxEnv, f mxFault, _ mxNext, cp *mxCopies) error {
	cp.in.Remove()
	ld, err := e.c.Election(e.name).Campaign(e.ctx, "a")
	if err != nil {
		return fmt.Errorf("Campaign: %v", err)
	}
	defer ld.Resign(e.ctx)
	cp.in = e.p.Inject(cp.rule(e, cp.kind))
	err = ld.Proclaim(e.ctx, "b")
	if err := cp.ran(); err != nil {
		return err
	}
	if f == mxDropped {
		if err == nil {
			return errors.New("a Proclaim whose only request never reached Redis returned nil")
		}
	} else if err != nil {
		return fmt.Errorf("Proclaim: %v", err)
	}
	if err := ld.Proclaim(e.ctx, "c"); err != nil {
		return fmt.Errorf("the next Proclaim: %v", err)
	}
	cp.deliverLate()
	l, err := e.other.Election(e.name).Leader(e.ctx)
	if err != nil || l.Value != "c" || l.Term != ld.Term() {
		return fmt.Errorf("leader after the late Proclaim: %+v, %v; want the newer value c", l, err)
	}
	return nil
}

// mxShareRow: a Group runner's write of its result is faulted; then the
// other Client runs the key again and shares its own. A lost reply's
// retry leaves the result once; a late copy leaves the later run's result;
// a dropped write leaves none, and the runner's Do returns its value all
// the same.
func mxShareRow(e *mxEnv, f mxFault, _ mxNext, cp *mxCopies) error {
	result := func() string {
		return e.direct.HGet(e.ctx, "dlock:group:{g/"+e.name+"}:result", "v").Val()
	}
	run := func(c *dlock.Client, v string) error {
		got, shared, err := c.Group("g").Do(e.ctx, e.name, func(context.Context) ([]byte, error) { return []byte(v), nil })
		if err != nil || string(got) != v || shared {
			return fmt.Errorf("a run alone: %q, shared %v, %v; want its own %q", got, shared, err, v)
		}
		return nil
	}
	if err := run(e.c, "a"); err != nil {
		return err
	}
	if err := cp.ran(); err != nil {
		return err
	}
	want := "a"
	if f == mxDropped {
		want = ""
	}
	if got := result(); got != want {
		return fmt.Errorf("the result after the run: %q, want %q", got, want)
	}
	if err := run(e.other, "b"); err != nil {
		return err
	}
	cp.deliverLate()
	if got := result(); got != "b" {
		return fmt.Errorf("the result after the late copy: %q, want the later run's b", got)
	}
	return nil
}

// mxCountDownRow: a CountDown of a latch armed with 2 is faulted; then the
// latch is counted down to zero and armed again with 2. A late copy counts
// nothing in the new latch; a lost one counted once.
func mxCountDownRow(e *mxEnv, f mxFault, _ mxNext, cp *mxCopies) error {
	cp.in.Remove()
	l, ol := e.c.CountDownLatch(e.name), e.other.CountDownLatch(e.name)
	if _, err := ol.TrySetCount(e.ctx, 2); err != nil {
		return err
	}
	cp.in = e.p.Inject(cp.rule(e, cp.kind))
	err := l.CountDown(e.ctx)
	if err := cp.ran(); err != nil {
		return err
	}
	n, cerr := ol.Count(e.ctx)
	switch {
	case cerr != nil:
		return cerr
	case f == mxDropped && (err == nil || n != 2):
		return fmt.Errorf("a CountDown that never reached Redis: %v, count %d; want an error and 2", err, n)
	case f != mxDropped && (err != nil || n != 1):
		return fmt.Errorf("CountDown %s: %v, count %d; want 1", f, err, n)
	}
	for range n {
		if err := ol.CountDown(e.ctx); err != nil {
			return err
		}
	}
	if _, err := ol.TrySetCount(e.ctx, 2); err != nil {
		return err
	}
	cp.deliverLate()
	if n, err := ol.Count(e.ctx); err != nil || n != 2 {
		return fmt.Errorf("the latch armed again after the late CountDown: count %d, %v; want 2", n, err)
	}
	return nil
}

// mxSetPermitsRow: a SetPermits(3) is faulted, then SetPermits(5): the
// total is 5, whatever order the copies run in.
func mxSetPermitsRow(e *mxEnv, f mxFault, _ mxNext, cp *mxCopies) error {
	s := e.c.Semaphore(e.name, 1)
	err := s.SetPermits(e.ctx, 3)
	if err := cp.ran(); err != nil {
		return err
	}
	if f == mxDropped {
		if err == nil {
			return errors.New("a SetPermits whose only request never reached Redis returned nil")
		}
	} else if err != nil {
		return fmt.Errorf("SetPermits: %v", err)
	}
	if err := e.other.Semaphore(e.name, 1).SetPermits(e.ctx, 5); err != nil {
		return err
	}
	cp.deliverLate()
	n, err := e.other.Semaphore(e.name, 1).Available(e.ctx)
	if err != nil || n != 5 {
		return fmt.Errorf("permits after the late SetPermits: %d, %v; want 5", n, err)
	}
	return nil
}

// mxForceReleaseRow: the owner holds; ForceRelease (by an admin through the
// proxy) is faulted; another owner takes the lock; a late copy of the
// eviction takes nothing from it, and the evicted owner is told
// ForceRelease took its hold.
func mxForceReleaseRow(e *mxEnv, f mxFault, _ mxNext, cp *mxCopies) error {
	k := cp.kind
	cp.in.Remove()
	h, err := k.lock(e.ctx, e.other, e.name)
	if err != nil {
		return fmt.Errorf("acquire: %v", err)
	}
	cp.in = e.p.Inject(cp.rule(e, k))
	_, err = e.c.ForceRelease(e.ctx, mxAdminKind(k), e.name)
	if err := cp.ran(); err != nil {
		return err
	}
	if f == mxDropped {
		if err == nil {
			return errors.New("a ForceRelease whose request never reached Redis returned nil")
		}
		return h.release(e.ctx)
	}
	if err != nil {
		return fmt.Errorf("ForceRelease: %v", err)
	}
	o, err := k.try(e.ctx, e.other, e.name)
	if err != nil {
		return fmt.Errorf("another owner after ForceRelease: %v", err)
	}
	cp.deliverLate()
	if err := o.err(); err != nil {
		return fmt.Errorf("the new owner after the late eviction: %v", err)
	}
	if n, err := mxHeldBy(e, k); err != nil || n != 1 {
		return fmt.Errorf("holders after the late eviction: %d, %v; want the new owner", n, err)
	}
	if err := h.release(e.ctx); !errors.Is(err, dlock.ErrLockLost) {
		return fmt.Errorf("the evicted owner's release: %v; want ErrLockLost", err)
	}
	return o.release(e.ctx)
}

// mxRedLock is a RedLock of three members, each behind a proxy; other
// reaches them straight.
type mxRedLock struct {
	srvs    []*redistest.Server
	proxies []*faultproxy.Proxy
	direct  []*redis.Client
	c       *dlock.Client
	other   *dlock.Client
}

// newMxRedLock starts the members; the faulted Client's node timeout is
// nodeTimeout[0] if given, else 150 ms.
func newMxRedLock(t *testing.T, f mxFault, nodeTimeout ...time.Duration) *mxRedLock {
	r := &mxRedLock{srvs: redistest.StartN(t, 3)}
	rdbs := make([]*redis.Client, 3)
	for i, s := range r.srvs {
		r.proxies = append(r.proxies, faultproxy.Start(t, s.Addr))
		o := &redis.Options{Addr: r.proxies[i].Addr(), ReadTimeout: 300 * time.Millisecond}
		if f == mxDropped {
			o.MaxRetries = -1
		}
		rdbs[i] = redis.NewClient(o)
		t.Cleanup(func() { _ = rdbs[i].Close() })
		r.direct = append(r.direct, s.Client(t))
		loadScripts(t, r.direct[i])
	}
	nt := 150 * time.Millisecond
	if len(nodeTimeout) > 0 {
		nt = nodeTimeout[0]
	}
	r.c = redLockOn(t, rdbs, dlock.WithNodeTimeout(nt), dlock.WithTTL(10*time.Second))
	r.other = redLockOn(t, r.direct, dlock.WithNodeTimeout(time.Second))
	// Every member dialled: the faults meet requests, not connections.
	var err error
	for range 5 {
		if err = r.c.Mutex("warm-up").Do(context.Background(), func(context.Context) error { return nil }); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rule is f's proxy rule on the member requests m matches.
func mxRule(f mxFault, m faultproxy.Match) faultproxy.Rule {
	switch f {
	case mxLost:
		return faultproxy.Rule{Match: m, Fault: faultproxy.DropReply, Times: 1}
	case mxDropped:
		return faultproxy.Rule{Match: m, Fault: faultproxy.DropRequest, Times: 1}
	}
	return faultproxy.Rule{Match: m, Fault: faultproxy.HoldRequest, Times: 1}
}

// held returns on how many members name is held.
func (r *mxRedLock) held(t *testing.T, name string) int { return holders(t, r.direct, name) }

// deliverAll lets the held copies reach their members, once their clients
// have given them up.
func mxDeliverAll(t *testing.T, f mxFault, ins []*faultproxy.Injection) {
	if f != mxLateOwn && f != mxLateOther {
		return
	}
	time.Sleep(400 * time.Millisecond) // past the members' read timeout
	for _, in := range ins {
		deliver(t, in)
	}
}

// mxRedLockAcquire: a member's acquire is faulted (member 0), the owner
// locks and unlocks: whatever the copy does, once the owner has ended no
// member holds the lock.
func mxRedLockAcquire(t *testing.T, f mxFault, _ mxNext) error {
	ctx := context.Background()
	r := newMxRedLock(t, f)
	in := r.proxies[0].Inject(mxRule(f, script("red_acquire")))
	l, err := r.c.Mutex("cell").Lock(ctx)
	if err != nil {
		return fmt.Errorf("Lock with one member's acquire %s: %v", f, err)
	}
	if err := l.Unlock(ctx); err != nil {
		return fmt.Errorf("Unlock: %v", err)
	}
	if in.Hits() == 0 {
		return errors.New("the injected fault never applied")
	}
	mxDeliverAll(t, f, []*faultproxy.Injection{in})
	if !within(2*time.Second, func() bool { return r.held(t, "cell") == 0 }) {
		return fmt.Errorf("held on %d members after the owner unlocked", r.held(t, "cell"))
	}
	return nil
}

// mxRedLockUndo: two members' acquires are faulted, so that TryLock fails
// and undoes its parts; then another owner tries: it takes the lock, and
// keeps it whatever the faulted copies do.
func mxRedLockUndo(t *testing.T, f mxFault, _ mxNext) error {
	ctx := context.Background()
	r := newMxRedLock(t, f)
	var ins []*faultproxy.Injection
	for _, p := range r.proxies[:2] {
		rule := mxRule(f, script("red_acquire"))
		if f == mxLost {
			// The undo's reply lost: sent again.
			rule = faultproxy.Rule{Match: script("red_release"), Fault: faultproxy.DropReply, Times: 1}
			p.Inject(faultproxy.Rule{Match: script("red_acquire"), Fault: faultproxy.DelayReply, Delay: 400 * time.Millisecond, Times: 1})
		}
		ins = append(ins, p.Inject(rule))
	}
	if l, err := r.c.Mutex("cell").TryLock(ctx); err == nil {
		_ = l.Unlock(ctx)
		return errors.New("TryLock with two of three members faulted succeeded")
	}
	mxDeliverAll(t, f, ins)
	var o *dlock.Lease
	var err error
	if !within(time.Second, func() bool {
		o, err = r.other.Mutex("cell").TryLock(ctx)
		return err == nil
	}) {
		return fmt.Errorf("another owner after the failed TryLock: %v (held on %d members)", err, r.held(t, "cell"))
	}
	mxDeliverAll(t, f, nil)
	if err := o.Err(); err != nil {
		return fmt.Errorf("the other owner's lease: %v", err)
	}
	return o.Unlock(ctx)
}

// mxRedLockRelease: one member's release is faulted (member 0): the
// owner's Unlock says nil, for the other two released it (their answers
// have a second: on a loaded machine, an answer past 150 ms would be
// asked again, and a second answer, "free already", leaves it to the
// silent member); another owner then takes the lock, and keeps it whatever
// the faulted copy does; once it unlocks, no member holds the lock (but
// member 0, where a dropped release leaves the first owner's hold until
// its TTL).
func mxRedLockRelease(t *testing.T, f mxFault, _ mxNext) error {
	ctx := context.Background()
	r := newMxRedLock(t, f, time.Second)
	l, err := r.c.Mutex("cell").Lock(ctx)
	if err != nil {
		return fmt.Errorf("Lock: %v", err)
	}
	in := r.proxies[0].Inject(mxRule(f, script("red_release")))
	if err := l.Unlock(ctx); err != nil {
		return fmt.Errorf("Unlock with one member's release %s: %v", f, err)
	}
	if in.Hits() == 0 {
		return errors.New("the injected fault never applied")
	}
	var o *dlock.Lease
	if !within(2*time.Second, func() bool {
		o, err = r.other.Mutex("cell").TryLock(ctx)
		return err == nil
	}) {
		return fmt.Errorf("another owner after the Unlock: %v (held on %d members)", err, r.held(t, "cell"))
	}
	mxDeliverAll(t, f, []*faultproxy.Injection{in})
	if err := o.Err(); err != nil {
		return fmt.Errorf("the other owner's lease after the late release: %v", err)
	}
	if err := o.Unlock(ctx); err != nil {
		return fmt.Errorf("the other owner's Unlock: %v", err)
	}
	left := 0
	if f == mxDropped {
		left = 1
	}
	if !within(2*time.Second, func() bool { return r.held(t, "cell") <= left }) {
		return fmt.Errorf("held on %d members after both owners unlocked, want at most %d", r.held(t, "cell"), left)
	}
	return nil
}

// mxRedLockRetake: member 0 restarts empty while the lock is held; the
// renewal's retake there is faulted; the owner unlocks: whatever the copy
// does, no member holds the lock after.
func mxRedLockRetake(t *testing.T, f mxFault, _ mxNext) error {
	ctx := context.Background()
	r := newMxRedLock(t, f)
	l, err := r.c.Mutex("cell").Lock(ctx)
	if err != nil {
		return fmt.Errorf("Lock: %v", err)
	}
	in := r.proxies[0].Inject(mxRule(f, script("red_acquire")))
	if err := r.srvs[0].Restart(); err != nil {
		return err
	}
	loadScripts(t, r.srvs[0].Client(t))
	if !within(10*time.Second, func() bool { return in.Hits() > 0 }) {
		return errors.New("no renewal took the lock again on the restarted member")
	}
	time.Sleep(400 * time.Millisecond) // the retake's copy given up, or answered
	if err := l.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrLockLost) {
		return fmt.Errorf("Unlock: %v", err)
	}
	mxDeliverAll(t, f, []*faultproxy.Injection{in})
	if !within(2*time.Second, func() bool { return r.held(t, "cell") == 0 }) {
		return fmt.Errorf("held on %d members after the owner unlocked", r.held(t, "cell"))
	}
	return nil
}

// mxClusterAcquire: on a Cluster, the primary of the lock's slot behind a
// proxy (the Cluster client dials it through the proxy): the acquire is
// faulted, the owner locks and unlocks; after, the name is free.
func mxClusterAcquire(t *testing.T, f mxFault, _ mxNext) error {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 2, 0)
	primary, err := cl.PrimaryFor(ctx, "dlock:{cell}")
	if err != nil {
		return err
	}
	p := faultproxy.Start(t, primary.Addr)
	loadScripts(t, primary.Client(t))
	o := cl.Options()
	o.ReadTimeout = 300 * time.Millisecond
	if f == mxDropped {
		o.MaxRetries, o.MaxRedirects = -1, -1 // a Cluster client sends again up to MaxRedirects times
	}
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == primary.Addr {
			addr = p.Addr()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	rdb := redis.NewClusterClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	c, other := clientOn(t, rdb), clientOn(t, cl.Client(t))
	in := p.Inject(mxRule(f, script("acquire")))
	l, err := c.Mutex("cell").Lock(ctx)
	if f == mxDropped {
		if err == nil {
			_ = l.Unlock(ctx)
			return errors.New("a Lock whose only request never reached Redis succeeded")
		}
	} else if err != nil {
		return fmt.Errorf("Lock: %v", err)
	} else if err := l.Unlock(ctx); err != nil {
		return fmt.Errorf("Unlock: %v", err)
	}
	if in.Hits() == 0 {
		return errors.New("the injected fault never applied")
	}
	mxDeliverAll(t, f, []*faultproxy.Injection{in})
	var ol *dlock.Lease
	if !within(2*time.Second, func() bool {
		ol, err = other.Mutex("cell").TryLock(ctx)
		return err == nil
	}) {
		return fmt.Errorf("the name is not free: %v", err)
	}
	return ol.Unlock(ctx)
}
