package dlock_test

// Helpers shared by the package's tests: Clients on servers of their own
// (plain, behind a fault proxy, a RedLock's members), waiting for what a
// test checks, counting requests, and the lock state as Redis keeps it.

import (
	"context"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// lockState is a Mutex's, a FairMutex's or an Election's lock as Redis keeps
// it: one string key, "<fence>|<holds>|<waits>|<until>|<owner>" (the owner
// followed by "/<gen>" once its lease was extended), then
// "|<link>" and "|<records>" when they are not empty, or "<fence>" alone for
// a free lock nobody waits for (internal/protocol/lua/lib_state.lua).
type lockState struct {
	Exists  bool   // the key is there (held, or free with its last fence)
	Fence   int64  // the last fence handed out
	Holds   int    // the holder's hold count, 0 when free or granted and not yet taken up
	Waits   bool   // the queue may hold waiters
	Until   int64  // when the lease ends (server ms), 0: with the key
	Owner   string // the holder, "" when free
	Gen     int    // how many of the holder's Extends Redis ran
	Links   string // the fences of the releases the state follows, latest first
	Records string // owners that ended with an acquire on its way, or whose hold was taken away
}

var (
	lockStateRE = regexp.MustCompile(`^(\d+)\|(\d+)\|([01])\|(\d+)\|([^|/]*)(?:/(\d+))?\|?([\d,]*)\|?(.*)$`)
	freeStateRE = regexp.MustCompile(`^\d+$`)
)

// readLock reads the lock state at key, failing the test if the key holds
// anything else.
func readLock(t testing.TB, rdb redis.Cmdable, key string) lockState {
	t.Helper()
	s, err := readLockErr(rdb, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// readLockErr is readLock for a caller that is not a test's goroutine.
func readLockErr(rdb redis.Cmdable, key string) (lockState, error) {
	v, err := rdb.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return lockState{}, nil
	}
	if err != nil {
		return lockState{}, fmt.Errorf("read the lock %s: %w", key, err)
	}
	if freeStateRE.MatchString(v) {
		f, _ := strconv.ParseInt(v, 10, 64)
		return lockState{Exists: true, Fence: f}, nil
	}
	m := lockStateRE.FindStringSubmatch(v)
	if m == nil {
		return lockState{}, fmt.Errorf("lock %s holds %q, not a lock state", key, v)
	}
	f, _ := strconv.ParseInt(m[1], 10, 64)
	c, _ := strconv.Atoi(m[2])
	u, _ := strconv.ParseInt(m[4], 10, 64)
	g, _ := strconv.Atoi(m[6])
	return lockState{Exists: true, Fence: f, Holds: c, Waits: m[3] == "1", Until: u, Owner: m[5], Gen: g, Links: m[7], Records: m[8]}, nil
}

// Held tells whether s has a holder whose lease runs (the tests' servers
// share the machine's clock).
func (s lockState) Held() bool {
	return s.Owner != "" && (s.Until == 0 || s.Until > time.Now().UnixMilli())
}

// holderOf returns the owner holding the lock at key, "" if none.
func holderOf(t testing.TB, rdb redis.Cmdable, key string) string {
	t.Helper()
	if s := readLock(t, rdb, key); s.Held() {
		return s.Owner
	}
	return ""
}

// writeLock makes owner hold the lock at key, with fence and ttl, as a
// take would (nobody waiting).
func writeLock(ctx context.Context, rdb redis.Cmdable, key, owner string, fence int64, ttl time.Duration) error {
	return rdb.Set(ctx, key, fmt.Sprintf("%d|1|0|0|%s", fence, owner), ttl).Err()
}

// leaseLeft returns how long owner's lease on the lock at key (a Mutex's, a
// FairMutex's or an Election's) has left as Redis keeps it: until its
// "until", or else the key's PTTL; 0 if owner does not hold the lock, or
// its key has no expiry (dlock writes none without).
func leaseLeft(t testing.TB, rdb redis.Cmdable, key, owner string) time.Duration {
	t.Helper()
	s := readLock(t, rdb, key)
	if !s.Held() || s.Owner != owner {
		return 0
	}
	if s.Until != 0 {
		return time.Until(time.UnixMilli(s.Until))
	}
	p, err := rdb.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return max(p, 0)
}

// holdLeft returns what is left of the lease of the lock state at key (a
// Mutex's, a FairMutex's or an Election's): up to its until if the key
// outlives the lease (after a grant), else the key's PTTL; 0 if nobody holds
// it, below 0 if the holder's lease has run out.
func holdLeft(t testing.TB, rdb redis.Cmdable, key string) time.Duration {
	t.Helper()
	s := readLock(t, rdb, key)
	if s.Owner == "" {
		return 0
	}
	if s.Until == 0 {
		return rdb.PTTL(context.Background(), key).Val()
	}
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(s.Until-now.UnixMilli()) * time.Millisecond
}

// freedErr returns nil if the lock state at key (a Mutex's, a FairMutex's or
// an Election's) is freed: gone, or left free (no holder, no holds, nobody
// waiting) with an expiry at most lease from now, so that nothing of it stays
// behind longer than the lease would have, or, if it keeps records of owners
// whose acquire may still arrive, longer than those requests' deadline;
// else what is wrong.
func freedErr(rdb redis.Cmdable, key string, lease time.Duration) error {
	s, err := readLockErr(rdb, key)
	if err != nil || !s.Exists {
		return err
	}
	if s.Owner != "" || s.Holds != 0 || s.Waits || s.Until != 0 {
		return fmt.Errorf("%s holds %+v, want it free", key, s)
	}
	if s.Records != "" {
		// A record lasts until its request's deadline, rounded up.
		lease = max(lease, dlock.RequestTTL+time.Second)
	}
	p, err := rdb.PTTL(context.Background(), key).Result()
	switch {
	case err != nil:
		return err
	case p == -2: // expired since it was read
		return nil
	case p == -1:
		return fmt.Errorf("%s is left free without an expiry", key)
	case p <= 0 || p > lease:
		return fmt.Errorf("%s is left free for %v, want an expiry within the lease %v", key, p, lease)
	}
	return nil
}

// newClient starts a private redis-server and returns a dlock Client on it,
// closed when the test ends, with the raw go-redis client for inspection.
func newClient(t *testing.T, opts ...dlock.Option) (*dlock.Client, *redis.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	return clientOn(t, rdb, opts...), rdb, srv
}

// clientOn returns a dlock Client on rdb, closed when the test ends.
func clientOn(t testing.TB, rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// stateKeys returns the keys matching pattern, but the Clients' records
// (clientRecord).
func stateKeys(rdb *redis.Client, pattern string) []string {
	var keys []string
	for _, k := range rdb.Keys(context.Background(), pattern).Val() {
		if !clientRecord(k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// within waits until cond holds or d passes, and reports whether it held.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cond()
}

// closedWithin reports whether ch is closed within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// drift is how much earlier than its TTL a lease may end by this process's
// clock.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// lockedWithin waits up to d for a Lease from got.
func lockedWithin(got <-chan *dlock.Lease, d time.Duration) (*dlock.Lease, bool) {
	select {
	case l := <-got:
		return l, l != nil
	case <-time.After(d):
		return nil, false
	}
}

// acquireInBackground calls lock in a goroutine and sends its Lease, or nil
// on failure (reported with t.Errorf unless the error matches ErrNotAcquired
// and ctx ended).
func acquireInBackground(t *testing.T, ctx context.Context, lock func(context.Context) (*dlock.Lease, error)) <-chan *dlock.Lease {
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := lock(ctx)
		if err != nil && ctx.Err() == nil {
			t.Errorf("background acquire: %v", err)
		}
		got <- l
	}()
	return got
}

// inQueue waits until the queue key holds n waiters.
func inQueue(t *testing.T, rdb *redis.Client, key string, n int64) {
	t.Helper()
	if !within(10*time.Second, func() bool { return rdb.ZCard(context.Background(), key).Val() >= n }) {
		t.Fatalf("%s holds %d waiters, want %d", key, rdb.ZCard(context.Background(), key).Val(), n)
	}
}

// subscribers returns how many connections are subscribed to the shard
// channel channel.
// subscribers returns how many connections have subscribed the shard
// channel.
func subscribers(rdb *redis.Client, channel string) int64 {
	return rdb.PubSubShardNumSub(context.Background(), channel).Val()[channel]
}

// redLockNodes starts n independent redis-servers and returns them with a
// client of each. The clients give up a request after 500ms, so that one
// sent to a paused server does not hold a connection for long.
func redLockNodes(t *testing.T, n int) ([]*redistest.Server, []*redis.Client) {
	t.Helper()
	srvs := redistest.StartN(t, n)
	rdbs := make([]*redis.Client, n)
	for i, s := range srvs {
		o := s.Options()
		o.ReadTimeout, o.WriteTimeout, o.DialTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
		rdbs[i] = redis.NewClient(o)
		t.Cleanup(func() { _ = rdbs[i].Close() })
	}
	return srvs, rdbs
}

// redLockOn returns a RedLock Client over rdbs, closed when the test ends.
func redLockOn(t *testing.T, rdbs []*redis.Client, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	nodes := make([]redis.UniversalClient, len(rdbs))
	for i, r := range rdbs {
		nodes[i] = r
	}
	c, err := dlock.NewRedLock(nodes, opts...)
	if err != nil {
		t.Fatalf("NewRedLock: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Logf("Close: %v", err) // a node may be down by design
		}
	})
	return c
}

// holders counts the nodes whose lock key of name has a holder.
func holders(t *testing.T, rdbs []*redis.Client, name string) int {
	t.Helper()
	n := 0
	for _, r := range rdbs {
		if r.HLen(context.Background(), "dlock:{"+name+"}").Val() > 0 {
			n++
		}
	}
	return n
}

// proxied starts a redis-server with a fault proxy in front of it. It returns
// a dlock Client that talks to Redis through the proxy, the proxy, and a
// go-redis client straight to the server, for looking at what Redis holds.
func proxied(t *testing.T, opts ...dlock.Option) (*dlock.Client, *faultproxy.Proxy, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	direct := srv.Client(t)
	loadScripts(t, direct)
	return clientOn(t, rdb, opts...), p, direct
}

// loadScripts runs dlock's scripts once on rdb's server, under a prefix of
// its own, and loads those a lock's life does not run, so that every one is
// loaded: a fault injected into a script's first run would otherwise hit
// the NOSCRIPT reply that makes go-redis send its body.
func loadScripts(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	c, err := dlock.New(rdb, dlock.WithPrefix("load:"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, lock := range []func() (*dlock.Lease, error){
		func() (*dlock.Lease, error) { return c.Mutex("s").Lock(ctx) },
		func() (*dlock.Lease, error) { return c.FairMutex("s").Lock(ctx) },
		func() (*dlock.Lease, error) { return c.RWMutex("s").Lock(ctx) },
		func() (*dlock.Lease, error) { return c.Semaphore("s", 1).Acquire(ctx, 1) },
	} {
		l, err := lock()
		if err == nil {
			err = errorsJoin(l.Extend(ctx, time.Second), l.Unlock(ctx))
		}
		if err != nil {
			t.Fatalf("load the scripts: %v", err)
		}
	}
	if err := c.CountDownLatch("s").CountDown(ctx); err != nil {
		t.Fatalf("load the scripts: %v", err)
	}
	// What no lock above ran: a waiter's giving up, ForceRelease, a
	// Group's result.
	for _, op := range []string{"leave", "evict", "group_result", "group_share"} {
		if err := rdb.ScriptLoad(ctx, dlock.ScriptSource(op)).Err(); err != nil {
			t.Fatalf("load the scripts: %v", err)
		}
	}
}

// dropOnce makes the proxy lose the reply to the next run of op: Redis runs
// it, the client sees its connection close, and go-redis runs it again.
func dropOnce(t *testing.T, p *faultproxy.Proxy, op string) *faultproxy.Injection {
	t.Helper()
	return p.Inject(faultproxy.Rule{Match: script(op), Fault: faultproxy.DropReply, Times: 1})
}

// checkHit fails the test if in never applied: a fault test whose fault did
// not happen proves nothing.
func checkHit(t *testing.T, in *faultproxy.Injection) {
	t.Helper()
	// A call that gave up at its context's end may leave its request to be
	// sent in the background: on a loaded machine it reaches the proxy a
	// moment after the call returned.
	select {
	case <-in.Hit():
	case <-time.After(5 * time.Second):
		t.Fatal("the injected fault never applied")
	}
}

// allKeys returns every key in rdb, with SCAN, but the Clients' records
// (clientRecord).
func allKeys(t *testing.T, rdb *redis.Client) []string {
	t.Helper()
	var keys []string
	iter := rdb.Scan(context.Background(), 0, "*", 1000).Iterator()
	for iter.Next(context.Background()) {
		if !clientRecord(iter.Val()) {
			keys = append(keys, iter.Val())
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// clientRecord reports whether key is a Client's record of its name
// (WithClientName): one per Client, not per lock, living a minute after the
// Client's last use (TestClientName checks it).
func clientRecord(key string) bool {
	return !strings.Contains(key, "{") && strings.Contains(key, "client:")
}

// slogTo returns a logger writing text to w, guarded by mu.
func slogTo(w io.Writer, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{w, mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// countRequests counts the requests rdb sends from now on.
func countRequests(rdb *redis.Client) *requestCounter {
	rc := new(requestCounter)
	rdb.AddHook(rc)
	return rc
}

// lockInBackground locks m in a goroutine, unlocks it at once, and then sends
// the time it got the lock (or closes the channel on failure).
func lockInBackground(t *testing.T, m locker) <-chan time.Time {
	got := make(chan time.Time, 1)
	go func() {
		ctx := context.Background()
		l, err := m.Lock(ctx)
		if err != nil {
			t.Errorf("background Lock: %v", err)
			close(got)
			return
		}
		at := time.Now()
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("background Unlock: %v", err)
		}
		got <- at // after the Unlock, so the test does not end before it
	}()
	return got
}

// requestCounter is a go-redis hook counting the requests a client sends:
// every command, also inside a pipeline, and separately every round trip (a
// pipeline is one). The connection handshake and the Client's eviction check
// are left out.
type requestCounter struct {
	requests   atomic.Int64
	roundTrips atomic.Int64

	mu    sync.Mutex
	bySHA map[string]int // script calls by the script's SHA1, since the last take
}

// waitFor starts lock, with a context that ends after d, and returns where
// its outcome arrives.
func waitFor(lock func(context.Context) (*dlock.Lease, error), d time.Duration) <-chan lockOutcome {
	out := make(chan lockOutcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		l, err := lock(ctx)
		out <- lockOutcome{l, err}
	}()
	return out
}

// lockOutcome is what a Lock started by waitFor returned.
type lockOutcome struct {
	l   *dlock.Lease
	err error
}

// inLine starts lock on a goroutine of its own, as waitFor does, and
// returns once the sorted set queue holds n waiters, its own included.
func inLine(t *testing.T, rdb redis.UniversalClient, lock func(context.Context) (*dlock.Lease, error), queue string, n int64) <-chan lockOutcome {
	t.Helper()
	// Longer than any test waits for what it checks meanwhile: a waiter
	// that gave up would spoil the check.
	out := waitFor(lock, 60*time.Second)
	if !within(5*time.Second, func() bool { return rdb.ZCard(context.Background(), queue).Val() == n }) {
		t.Fatalf("waiter not registered in %s", queue)
	}
	return out
}

// outcomeLease returns the Lease of a Lock that waitFor or inLine started,
// failing the test if it returned an error.
func outcomeLease(t *testing.T, o lockOutcome) *dlock.Lease {
	t.Helper()
	if o.err != nil {
		t.Fatalf("waiting Lock: %v", o.err)
	}
	return o.l
}

// firstErr returns the first error seq yields, nil if it yields none.
func firstErr[T any](seq iter.Seq2[T, error]) error {
	for _, err := range seq {
		if err != nil {
			return err
		}
	}
	return nil
}

// count counts cmd, which has run, if it ran a script: a call the server
// answered NOSCRIPT (the client then sends the script's body) is not counted.
func (rc *requestCounter) count(cmd redis.Cmder, err error) {
	args := cmd.Args()
	if len(args) < 2 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return
	}
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return
	}
	key, _ := args[1].(string)
	if cmd.Name() == "eval" {
		key = redis.NewScript(key).Hash()
	}
	rc.mu.Lock()
	if rc.bySHA == nil {
		rc.bySHA = make(map[string]int)
	}
	rc.bySHA[key]++
	rc.mu.Unlock()
}

// takeScripts returns the calls of each script counted so far, by the name
// ScriptHash knows it by, and starts counting again.
func (rc *requestCounter) takeScripts(names ...string) map[string]int {
	m := rc.scripts(names...)
	rc.mu.Lock()
	rc.bySHA = nil
	rc.mu.Unlock()
	return m
}

// scripts is takeScripts without starting again. A call is counted once its
// reply is in, which can be a moment after Redis ran it.
func (rc *requestCounter) scripts(names ...string) map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := make(map[string]int)
	for _, n := range names {
		if c := rc.bySHA[dlock.ScriptHash(n)]; c > 0 {
			m[n] = c
		}
	}
	return m
}

func (rc *requestCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (rc *requestCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isHandshake(cmd) {
			rc.requests.Add(1)
			rc.roundTrips.Add(1)
		}
		err := next(ctx, cmd)
		rc.count(cmd, err)
		return err
	}
}

func (rc *requestCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			if !isHandshake(cmd) {
				n++
			}
		}
		if n > 0 {
			rc.requests.Add(int64(n))
			rc.roundTrips.Add(1)
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			rc.count(cmd, cmd.Err())
		}
		return err
	}
}

func (rc *requestCounter) reset() {
	rc.requests.Store(0)
	rc.roundTrips.Store(0)
}

// take returns the requests counted so far, and starts counting again.
func (rc *requestCounter) take() int64 {
	rc.roundTrips.Store(0)
	return rc.requests.Swap(0)
}

// report adds req/op and rt/op for n operations.
func (rc *requestCounter) report(b *testing.B, n int) (reqPerOp float64) {
	reqPerOp = float64(rc.requests.Load()) / float64(n)
	b.ReportMetric(reqPerOp, "req/op")
	b.ReportMetric(float64(rc.roundTrips.Load())/float64(n), "rt/op")
	return reqPerOp
}
