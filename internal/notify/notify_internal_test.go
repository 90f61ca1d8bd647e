package notify

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/rclient/goredis"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The notifier's tests run against one plain redis-server per test (the
// fast tier's one server), started by redistest, and a protocol.Node on it,
// over which backend scripts what a plain server cannot show: placements on
// other shards or RedLock members, a failed Places, a slot that moved, and
// the releases the notifier sends.

func TestMain(m *testing.M) { redistest.Main(m, 0) }

// guard bounds every wait for something that is to happen at once (a
// message, a reconnection): a test that reaches it has failed, it is never a
// measure of how long anything took.
const guard = 10 * time.Second

// backend is the node on the test's server with what a test scripts over
// it: Places answered by places if set, ShardOf answered by shard if set,
// and the calls of Failed, Reload and Release recorded (Release is not
// sent).
type backend struct {
	protocol.Backend

	mu       sync.Mutex
	places   func(channel string) (protocol.Placement, error)
	shard    string
	failed   []error
	reloads  int
	releases []release
}

// release is one Release call the notifier made.
type release struct {
	name string
	args protocol.ReleaseArgs
}

func (b *backend) Places(ctx context.Context, channel string) (protocol.Placement, error) {
	b.mu.Lock()
	places := b.places
	b.mu.Unlock()
	if places != nil {
		return places(channel)
	}
	return b.Backend.Places(ctx, channel)
}

func (b *backend) ShardOf(ctx context.Context, channel string) (string, error) {
	b.mu.Lock()
	shard := b.shard
	b.mu.Unlock()
	if shard != "" {
		return shard, nil
	}
	return protocol.ShardingOf(b.Backend).ShardOf(ctx, channel)
}

// Group: every key is in one group, as on a single server.
func (b *backend) Group(string) int { return 0 }

func (b *backend) Failed(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failed = append(b.failed, err)
}

func (b *backend) Reload() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reloads++
}

func (b *backend) Release(_ context.Context, k protocol.Keys, a protocol.ReleaseArgs) (protocol.Released, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releases = append(b.releases, release{k.Name, a})
	return protocol.Released{Code: protocol.CodeDone}, nil
}

func (b *backend) set(f func(b *backend)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b)
}

// background owns the work the notifier hands off (later), as a Client's
// does: each piece runs on a goroutine of its own, counted in handed, and
// the test's end waits for them.
type background struct {
	mu     sync.Mutex
	handed int
	wg     sync.WaitGroup
}

func (bg *background) later(f func()) {
	bg.mu.Lock()
	bg.handed++
	bg.mu.Unlock()
	bg.wg.Go(f)
}

// handedOff returns how many pieces of work the notifier handed off.
func (bg *background) handedOff() int {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	return bg.handed
}

// env is a notifier under test and what it runs on.
type env struct {
	n       *Notifier
	b       *backend
	bg      *background
	srv     *redistest.Server
	rdb     *redis.Client  // the node's, through which the notifier subscribes
	rc      rclient.Client // rdb, as the node reaches it
	admin   *redis.Client  // the test's own, straight to the server
	closing chan struct{}
	// close closes the notifier as a Client's Close does; later calls (the
	// test's end) do nothing, even while the first is under way.
	close func()
}

// start makes a notifier with cfg on a node on a fresh server, reached at
// the address via returns if not "" (a fault proxy in front of it), else
// directly; it is closed when the test ends.
func start(t *testing.T, cfg Config, via func(srv *redistest.Server) string) *env {
	t.Helper()
	srv := redistest.Start(t)
	e := &env{srv: srv, admin: srv.Client(t), closing: make(chan struct{}), bg: &background{}}
	opt := srv.Options()
	if via != nil {
		if addr := via(srv); addr != "" {
			opt.Addr = addr
		}
	}
	e.rdb = redis.NewClient(opt)
	t.Cleanup(func() { _ = e.rdb.Close() })
	rc, err := goredis.New(e.rdb, false)
	if err != nil {
		t.Fatal(err)
	}
	e.rc = rc
	e.b = &backend{Backend: protocol.NewNode(rc, nil)}
	e.n = New(e.b, e.bg.later, slog.New(slog.DiscardHandler), e.closing, cfg)
	var closed atomic.Bool
	e.close = func() {
		if closed.CompareAndSwap(false, true) {
			close(e.closing)
			e.bg.wg.Wait()
			e.n.Close()
		}
	}
	t.Cleanup(e.close)
	return e
}

// keys are the keys of the Mutex name; its gate's channel is the keys'
// stem and a Client's id.
func keys(name string) protocol.Keys { return protocol.NewKeys("", protocol.MutexKind, name) }

const (
	clientID = ":c1"
	ttl      = 10 * time.Second
)

// join joins the gate of lock name for this test's Client.
func (e *env) join(t *testing.T, name string) *Gate {
	t.Helper()
	k := keys(name)
	g, err := e.n.Join(context.Background(), k, ttl, k.Channel+clientID)
	if err != nil {
		t.Fatalf("Join %q: %v", name, err)
	}
	return g
}

// publish sends msg on channel, as a release script does, and returns how
// many connections it reached.
func (e *env) publish(t *testing.T, channel, msg string) int64 {
	t.Helper()
	n, err := e.admin.SPublish(context.Background(), channel, msg).Result()
	if err != nil {
		t.Fatalf("SPUBLISH %s: %v", channel, err)
	}
	return n
}

// subscribers returns how many connections have channel subscribed.
func (e *env) subscribers(t *testing.T, channel string) int64 {
	t.Helper()
	m, err := e.admin.PubSubShardNumSub(context.Background(), channel).Result()
	if err != nil {
		t.Fatalf("PUBSUB SHARDNUMSUB: %v", err)
	}
	return m[channel]
}

// conn is a pub/sub connection as the server lists it.
type conn struct {
	id   string
	ssub int // shard channels subscribed
}

// conns returns the server's pub/sub connections.
func (e *env) conns(t *testing.T) []conn {
	t.Helper()
	out, err := e.admin.Do(context.Background(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	var cs []conn
	for line := range strings.Lines(out) {
		var c conn
		for f := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "id":
				c.id = v
			case "ssub":
				c.ssub, _ = strconv.Atoi(v)
			}
		}
		if c.id != "" {
			cs = append(cs, c)
		}
	}
	return cs
}

// eventually polls cond until it holds; what says what was awaited.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	stop := time.After(guard)
	for !cond() {
		select {
		case <-tick.C:
		case <-stop:
			t.Fatalf("%s: still not so after %v", what, guard)
		}
	}
}

// await waits for ch to be closed; what says what it tells.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(guard):
		t.Fatalf("%s: not after %v", what, guard)
	}
}

// next returns the next message to w.
func next(t *testing.T, w *Listener, what string) protocol.Wake {
	t.Helper()
	select {
	case m := <-w.Wake:
		return m
	case <-time.After(guard):
		t.Fatalf("%s: no message to %s", what, w.owner)
		return protocol.Wake{}
	}
}

// none fails if w has a message waiting; what happened before must be known
// to have been dispatched (a later message on the same connection arrived).
func none(t *testing.T, w *Listener, what string) {
	t.Helper()
	select {
	case m := <-w.Wake:
		t.Errorf("%s: %s got %+v, want nothing", what, w.owner, m)
	default:
	}
}

// channels returns the channels the notifier has a gate for.
func (n *Notifier) channels() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var chs []string
	for ch := range n.gates {
		chs = append(chs, ch)
	}
	return chs
}
