// Package notify is the notifier layer: the pub/sub messages that wake a
// Client's waiters (Notifier).
package notify

import (
	"container/list"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/rclient"
)

// Notifier receives the messages that wake a Client's waiters. A Client
// listens on one shard channel per lock it waits for (the lock's channel stem
// + its id), in the lock's hash slot: on a Cluster, the message of a release
// stays on the shard that holds the lock. The notifier keeps one pub/sub
// connection per shard (one in all on a single server) and fans the messages
// out to per-lock gates. When a lock is freed while others wait, its release
// script grants it to the waiter next in line and publishes that waiter's
// owner id on its Client's channel, with the grant's fence: exactly one
// waiter, in one process, is woken, and it holds the lock. The releases of
// the kinds that let several waiters in (an RWMutex's readers, a Semaphore's
// permits) tell each of them, by owner id, to try again. A message "*" on a
// channel wakes every waiter of its gate (a latch that opened).
//
// Pub/sub delivers at most once: a message sent while a connection is down is
// lost, and one sent to a process that died is lost with it. Waiters never
// rely on it alone: every wait is also bounded by the holder's remaining TTL
// and by the waiter's keep-alive, after which it tries again. After a
// connection breaks, or stays silent past a health check that gets no answer
// (a half-open connection), or the server drops a channel because its slot
// moved (a failover, a resharding), the waiters are woken so that they look
// for themselves, and the channels are subscribed again, where they live now.
type Notifier struct {
	backend protocol.Backend
	sharded protocol.Sharded // backend's (protocol.ShardingOf)
	// later runs f in the background, which Close waits for (once Close
	// waits, on the caller's goroutine).
	later   func(f func())
	log     *slog.Logger
	closing <-chan struct{}
	cfg     Config

	// subMu orders every SSUBSCRIBE and SUNSUBSCRIBE the notifier sends, and
	// the replacement of a connection, so that what a server last heard about
	// a channel is what the notifier last decided about it.
	subMu sync.Mutex

	mu     sync.Mutex
	shards map[string]*shard // by the address of the node serving them; "" on a single server
	gates  map[string]*Gate
	idle   *list.List // gates without waiters, oldest first, still subscribed
	closed bool
	wg     sync.WaitGroup // the receive loops, and resubscriptions
}

// shard is one pub/sub connection and the channels subscribed on it.
type shard struct {
	addr string
	rc   rclient.Client // the Redis client whose connection ps is
	ps   rclient.Subscriber
	// pending counts, per channel, the SSUBSCRIBEs sent and not yet
	// confirmed; a gate is ready when its channel's last one is confirmed.
	pending map[string]int
	// apart: a RedLock member's, whose addr names the member, not a
	// server of a deployment.
	apart bool
	// leaving counts, per channel, the SUNSUBSCRIBEs this notifier sent on
	// ps whose confirmations have not been read: those are its own doing,
	// not the server dropping a channel whose slot moved.
	leaving map[string]int
}

// leave counts a SUNSUBSCRIBE of channel about to be sent on sh's
// connection. The notifier's mu must be held.
func (sh *shard) leave(channel string) {
	if sh.leaving == nil {
		sh.leaving = make(map[string]int)
	}
	sh.leaving[channel]++
}

// server is the address of sh's server, as its Redis client names it: ""
// for a RedLock member's, which is one server.
func (sh *shard) server() string {
	if sh.apart {
		return ""
	}
	return sh.addr
}

// Gate is where this process's waiters for one lock wait.
type Gate struct {
	// Set when the gate is made, never changed.
	k       protocol.Keys
	ttl     time.Duration // of the primitive that made the gate; sets the grant lease of a lock passed on
	channel string

	// Guarded by Notifier.mu.
	//
	// shs are where the channel is subscribed: one shard, or on a RedLock
	// one per member; got tells which of them confirmed it, need how many
	// must for the gate to be ready, refused how many refused it (see
	// Notifier.refused). subscribe sets them, under subMu too.
	shs     []*shard
	got     []bool
	need    int
	refused int
	refs    int // joins not yet left
	waiters map[string]*Listener
	idle    *list.Element // in Notifier.idle while refs == 0
	// again, if not nil, marks a subscription being made again because the
	// channel's slot moved (the server dropped the channel, or Check found
	// it served elsewhere); it is closed when Redis confirms it.
	again chan struct{}

	// Ordered by ready, which is closed once (under Notifier.mu) when Redis
	// confirmed the subscription or it failed (isReady). subErr, why it
	// failed, is set before ready is closed and never after: whoever has
	// seen ready closed may read it without a lock.
	ready  chan struct{}
	subErr error
}

// isReady reports whether g.ready is closed: Redis confirmed g's
// subscription, or it failed. Notifier.mu must be held, under which alone
// ready is closed.
func (g *Gate) isReady() bool {
	select {
	case <-g.ready:
		return true
	default:
		return false
	}
}

// Listener is one waiting Lock call, known by its owner id.
type Listener struct {
	owner string
	// Wake gets the message that woke the waiter, parsed (the zero wake
	// after a broken connection); capacity 1, so that it never blocks the
	// notifier: a message that finds it full is dropped, the waiter being
	// awake.
	Wake chan protocol.Wake
}

// Drain empties w.wake: a message that came before a request is answered
// by that request.
func (w *Listener) Drain() {
	select {
	case <-w.Wake:
	default:
	}
}

func (w *Listener) signal(msg protocol.Wake) {
	select {
	case w.Wake <- msg:
	default:
	}
}

// Config is a notifier's tuning, which tests change per Client.
type Config struct {
	// MaxIdleGates is how many channels stay subscribed with nobody
	// waiting, so that a lock contended over and over is not subscribed
	// again for every wait.
	MaxIdleGates int
	// HealthCheck is how long a receive loop waits in silence before it
	// pings its connection; pongWait is how long it then waits for any word
	// from the server before it takes the connection for dead and makes
	// another.
	HealthCheck, PongWait time.Duration
	// BeforeUnsubscribe, if not nil, runs before unsubscribe decides which
	// channels to let go; tests use it to make a join race the decision.
	BeforeUnsubscribe func()
	// LoseDropped, in tests, passes over the SUNSUBSCRIBE a server sends
	// when a channel's slot moves, as if it never arrived.
	LoseDropped bool
}

var DefaultConfig = Config{
	MaxIdleGates: 256,
	HealthCheck:  30 * time.Second,
	PongWait:     5 * time.Second,
}

func New(n protocol.Backend, later func(func()), log *slog.Logger, closing <-chan struct{}, cfg Config) *Notifier {
	return &Notifier{backend: n, sharded: protocol.ShardingOf(n), later: later, log: log, closing: closing, cfg: cfg,
		shards: make(map[string]*shard), gates: make(map[string]*Gate), idle: list.New()}
}

// Join returns the gate of channel, for lock k, subscribed: Redis has
// confirmed the subscription when join returns, so any message from then on
// arrives. Every join must be followed by one leave.
func (n *Notifier) Join(ctx context.Context, k protocol.Keys, ttl time.Duration, channel string) (*Gate, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errs.ErrClosed
	}
	g := n.gates[channel]
	subscribe := g == nil
	if subscribe {
		g = &Gate{k: k, ttl: ttl, channel: channel, ready: make(chan struct{}), waiters: make(map[string]*Listener)}
		n.gates[channel] = g
	}
	n.use(g)
	n.mu.Unlock()

	if subscribe {
		if err := n.subscribe(ctx, g); err != nil {
			err = errs.Op(nil, err, "subscribe to %s", channel)
			n.fail(g, err)
			return nil, err
		}
	}
	select {
	case <-g.ready:
		if g.subErr != nil {
			n.Leave(g)
			return nil, g.subErr
		}
		return g, nil
	case <-ctx.Done():
		n.Leave(g)
		return nil, ctx.Err()
	case <-n.closing:
		n.Leave(g)
		return nil, errs.ErrClosed
	}
}

// subscribe sends SSUBSCRIBE for g's channel on the connection of each
// shard that serves it now: one, or on a RedLock one per member, of which a
// majority must take it.
func (n *Notifier) subscribe(ctx context.Context, g *Gate) error {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	ps, err := n.backend.Places(ctx, g.channel)
	if err != nil {
		return err
	}
	sends, err := n.place(g, ps)
	if err != nil {
		return err
	}
	if len(sends) == 0 && ps.Need == 0 && ps.Short == nil {
		// A deployment with no wake-up channels: its waiters ask again as
		// the holder's lease runs out, which every wait does anyway.
		n.mu.Lock()
		if !g.isReady() {
			close(g.ready)
		}
		n.mu.Unlock()
		return nil
	}
	if ps.Apart {
		n.subscribeApart(g, sends)
		return ps.Short
	}
	return n.subscribeShared(ctx, g, sends)
}

// send is one SSUBSCRIBE that subscribe is to send: on sh, whose connection
// the SSUBSCRIBE makes if fresh.
type send struct {
	sh    *shard
	fresh bool
}

// place records where g's channel is to be subscribed (ps), making the shards
// that are new, and counts an SSUBSCRIBE pending on each. A RedLock member's
// new shard gets its connection (and receive loop) here; any other new
// shard's is made by its first SSUBSCRIBE (subscribeShared). n.subMu must be
// held.
func (n *Notifier) place(g *Gate, ps protocol.Placement) ([]send, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errs.ErrClosed
	}
	sends := make([]send, 0, len(ps.At))
	g.shs, g.got, g.need, g.refused = g.shs[:0], g.got[:0], ps.Need, 0
	for _, p := range ps.At {
		sh := n.shards[p.Addr]
		fresh := sh == nil
		if fresh {
			sh = &shard{addr: p.Addr, rc: p.Client, pending: make(map[string]int), apart: ps.Apart}
			n.shards[p.Addr] = sh
			if ps.Apart {
				// A RedLock member's connection is made now, with no channel
				// (which sends nothing), so that the subscriptions go out
				// without waiting for it.
				sh.ps = p.Client.Subscribe(context.Background(), "") // a member is one server
				n.wg.Add(1)
				go n.receive(sh)
				fresh = false
			}
		}
		g.shs, g.got = append(g.shs, sh), append(g.got, false)
		sh.pending[g.channel]++
		sends = append(sends, send{sh, fresh})
	}
	return sends, nil
}

// subscribeApart sends the SSUBSCRIBEs of a RedLock's members, each member
// on its own: one that is paused or unreachable must not hold up the others,
// and join waits for a majority to confirm. A failure is logged: the member
// does not confirm, which is what join counts.
func (n *Notifier) subscribeApart(g *Gate, sends []send) {
	for _, s := range sends {
		ps := s.sh.ps
		n.wg.Go(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := ps.Subscribe(sctx, g.channel); err != nil {
				n.unpend(s.sh, g.channel)
				n.log.Debug("dlock: subscribing on a RedLock node failed", "node", s.sh.addr, "channel", g.channel, "err", err)
			}
		})
	}
}

// subscribeShared sends the SSUBSCRIBE of g's channel on its shard's
// connection, which it makes if fresh, and returns the first failure.
func (n *Notifier) subscribeShared(ctx context.Context, g *Gate, sends []send) error {
	// The connection is shared: a caller's deadline cutting the write short
	// would break it for every waiter of this Client. The write is local and
	// quick; the wait for the confirmation is what ctx bounds.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var first error
	for _, s := range sends {
		if s.fresh {
			// A Cluster's pub/sub connection goes to the node of its first
			// channel.
			s.sh.ps = s.sh.rc.Subscribe(sctx, s.sh.server(), g.channel)
			n.wg.Add(1)
			go n.receive(s.sh)
			continue
		}
		if err := s.sh.ps.Subscribe(sctx, g.channel); err != nil {
			n.unpend(s.sh, g.channel)
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// unpend takes back the pending SSUBSCRIBE of channel on sh, which failed to
// go out.
func (n *Notifier) unpend(sh *shard, channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if sh.pending[channel]--; sh.pending[channel] <= 0 {
		delete(sh.pending, channel)
	}
}

// JoinSubscribed is join for the channel stem + suffix, if its subscription
// is in place already; it returns nil, and joins nothing, otherwise. Every
// wait starts here, so the name is put together without an allocation.
func (n *Notifier) JoinSubscribed(stem, suffix string) *Gate {
	var buf [128]byte
	channel := append(append(buf[:0], stem...), suffix...)
	n.mu.Lock()
	defer n.mu.Unlock()
	g := n.gates[string(channel)]
	if n.closed || g == nil || !g.isReady() || g.subErr != nil {
		return nil
	}
	n.use(g)
	return g
}

// use counts one more join of g. n.mu must be held.
func (n *Notifier) use(g *Gate) {
	if g.idle != nil {
		n.idle.Remove(g.idle)
		g.idle = nil
	}
	g.refs++
}

// fail forgets a gate whose subscription failed, so that the next join tries
// again, and tells the waiters that joined it meanwhile.
func (n *Notifier) fail(g *Gate, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	g.refs--
	if n.gates[g.channel] == g {
		delete(n.gates, g.channel)
	}
	if !g.isReady() {
		g.subErr = err
		close(g.ready)
	}
}

// Leave gives back a gate from join. A gate nobody waits on stays subscribed
// until cfg.maxIdleGates newer ones are idle.
func (n *Notifier) Leave(g *Gate) {
	n.mu.Lock()
	g.refs--
	var evict []*Gate
	if g.refs == 0 && n.gates[g.channel] == g {
		g.idle = n.idle.PushBack(g)
		for n.idle.Len() > n.cfg.MaxIdleGates {
			old := n.idle.Remove(n.idle.Front()).(*Gate)
			old.idle = nil
			delete(n.gates, old.channel)
			evict = append(evict, old)
		}
	}
	n.mu.Unlock()
	if len(evict) > 0 {
		n.unsubscribe(evict)
	}
}

// unsubscribe sends SUNSUBSCRIBE for the channels of gates that no join has
// taken up again meanwhile: a join that did is ordered after this by subMu,
// so its SSUBSCRIBE comes later and stands.
func (n *Notifier) unsubscribe(gates []*Gate) {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	if n.cfg.BeforeUnsubscribe != nil {
		n.cfg.BeforeUnsubscribe()
	}
	byShard := make(map[*shard][]string)
	n.mu.Lock()
	for _, g := range gates {
		if n.gates[g.channel] == nil {
			for _, sh := range g.shs {
				byShard[sh] = append(byShard[sh], g.channel)
				sh.leave(g.channel)
			}
		}
	}
	closed := n.closed
	n.mu.Unlock()
	if closed {
		return
	}
	for sh, channels := range byShard {
		// Best effort: a failure leaves a harmless subscription behind.
		_ = sh.ps.Unsubscribe(context.Background(), channels...)
	}
}

// Enter makes owner a waiter of g, to be woken by messages naming it.
func (n *Notifier) Enter(g *Gate, owner string) *Listener {
	w := &Listener{owner: owner, Wake: make(chan protocol.Wake, 1)}
	n.mu.Lock()
	g.waiters[owner] = w
	n.mu.Unlock()
	return w
}

// Exit ends w's wait. If w gives up (registered is true and it did not take
// the lock), its registration is removed from Redis, and the lock passed on if
// it was granted to w; doubt is as Unregister's.
func (n *Notifier) Exit(g *Gate, w *Listener, registered bool, doubt int64) {
	n.mu.Lock()
	delete(g.waiters, w.owner)
	n.mu.Unlock()
	if registered {
		n.Unregister(g.k, g.ttl, w.owner, doubt)
	}
}

// Unregister removes owner's registration as a waiter of lock k (whose TTL
// is ttl), and if the lock was granted to owner, passes it to the next
// waiter or frees it. doubt, if not 0, is the deadline of an acquire of
// owner whose outcome is unknown (protocol.AcquireResult.Doubt): Redis
// refuses it until then, should it arrive later. It runs in the background,
// which Close waits for, since the caller may be a Lock that is returning or
// the receive loop; once Close waits, it runs on the caller's goroutine (a
// waiting Lock, which Close waits for too).
func (n *Notifier) Unregister(k protocol.Keys, ttl time.Duration, owner string, doubt int64) {
	n.later(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := n.backend.Release(ctx, k, protocol.ReleaseArgs{Owner: owner, Fence: protocol.NoFence, Mode: protocol.ReleaseLeave, TTL: ttl, Void: doubt}); err != nil {
			n.log.Warn("dlock: removing a waiter that gave up failed", "lock", k.Name, "err", err)
		}
	})
}

// receive reads sh's connection until the notifier closes.
func (n *Notifier) receive(sh *shard) {
	defer n.wg.Done()
	r := &receiver{n: n, sh: sh, ps: sh.ps}
	for {
		msg, err := r.ps.Receive(context.Background(), r.wait())
		if err != nil {
			if n.isClosed() || !r.failed(err) {
				return
			}
			continue
		}
		r.down, r.pinged = 0, false
		n.dispatch(sh, msg)
	}
}

// receiver is what a receive loop keeps of its connection's health. Only
// the loop's goroutine uses it.
type receiver struct {
	n      *Notifier
	sh     *shard
	ps     rclient.Subscriber // sh's connection, as the loop last made or took it
	pinged bool               // a PING went out, and nothing has come back since
	down   int                // receives failed in a row, up to 4
}

// wait is how long the next receive waits for a word from the server: a
// health check's, or a PING's answer's.
func (r *receiver) wait() time.Duration {
	if r.pinged {
		return r.n.cfg.PongWait
	}
	return r.n.cfg.HealthCheck
}

// failed handles a receive's error, and reports whether the loop goes on.
func (r *receiver) failed(err error) bool {
	switch reply, isReply := rclient.Reply(err); {
	case rclient.Timeout(err):
		return r.silent()
	case isReply:
		r.n.errorReply(r.sh, reply, err)
	default:
		r.broken(err)
	}
	return true
}

// silent handles a receive that timed out: after a health check's wait, it
// pings; after a PING's, it takes the connection for dead (half-open) and
// makes another. It reports false if the notifier closed meanwhile.
func (r *receiver) silent() bool {
	if !r.pinged {
		r.pinged = r.ps.Ping(context.Background()) == nil // a failed write fails the next receive, which reconnects
		return true
	}
	r.n.log.Warn("dlock: wake-up connection silent after a health check; connecting again", "node", r.sh.addr)
	r.pinged = false
	if r.ps = r.n.reconnect(r.sh); r.ps == nil {
		return false
	}
	r.n.wakeAll(r.sh)
	return true
}

// broken handles a receive that failed because the connection broke;
// the Subscriber (rclient) connects and subscribes again on the next receive. Messages
// sent meanwhile were lost: it wakes every waiter so that it looks for
// itself, once; while the server stays unreachable, it tries again less and
// less often (on a RedLock, a member can stay down while the others serve).
func (r *receiver) broken(err error) {
	r.pinged = false
	r.n.mu.Lock()
	clear(r.sh.leaving) // the connection they went on is gone
	r.n.mu.Unlock()
	r.n.sharded.Failed(err)
	if r.down == 0 {
		r.n.log.Warn("dlock: wake-up messages interrupted", "node", r.sh.addr, "err", err)
		r.n.wakeAll(r.sh)
	}
	select {
	case <-r.n.closing:
	case <-time.After(min(100*time.Millisecond<<r.down, time.Second)):
	}
	r.down = min(r.down+1, 4)
}

// errorReply handles an error reply on sh's connection (err), which is not a
// broken connection.
func (n *Notifier) errorReply(sh *shard, reply string, err error) {
	if strings.HasPrefix(reply, "NOPERM") {
		// The user's ACL refused a command: no retry will change that. A
		// refused SSUBSCRIBE fails its waiters.
		n.log.Warn("dlock: wake-up connection refused a command", "node", sh.addr, "err", err)
		if subscribeRefused(reply) {
			n.refused(sh, err)
		}
		return
	}
	// The MOVED that answers SUNSUBSCRIBE or SSUBSCRIBE of a channel whose
	// slot has moved.
	n.log.Debug("dlock: wake-up connection got an error reply", "node", sh.addr, "err", err)
	n.sharded.Failed(err)
}

// dispatch hands a message read from sh's connection to whom it concerns.
func (n *Notifier) dispatch(sh *shard, m rclient.Message) {
	switch m.Kind {
	case "smessage", "message":
		n.deliver(m.Channel, m.Payload)
	case "ssubscribe", "subscribe":
		n.confirmed(sh, m.Channel)
	case "sunsubscribe":
		if !n.cfg.LoseDropped {
			n.dropped(sh, m.Channel)
		}
	}
}

// subscribeRefused reports whether reply, a NOPERM on a pub/sub connection,
// is the user's ACL refusing an SSUBSCRIBE: the command, or the channels it
// names.
func subscribeRefused(reply string) bool {
	return strings.Contains(reply, "'ssubscribe'") || strings.Contains(reply, "channel")
}

// refused fails the subscriptions that sh has not confirmed yet: its server
// refused an SSUBSCRIBE (err), and a refusal does not say which channel it
// was for. A user's ACL allows the channels of one prefix alike (see
// docs/acl.md), so each of them is refused too; their waiters return err at
// once rather than waiting for their contexts. On a RedLock, a gate fails
// only once too few members are left to confirm it.
func (n *Notifier) refused(sh *shard, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch, g := range n.gates {
		i := slices.Index(g.shs, sh)
		if i < 0 || g.got[i] || g.isReady() {
			continue
		}
		delete(sh.pending, ch)
		if g.refused++; len(g.shs)-g.refused >= g.need {
			continue
		}
		delete(n.gates, ch)
		g.subErr = errs.Op(nil, err, "subscribe to %s", ch)
		close(g.ready)
	}
}

// confirmed records Redis's confirmation of an SSUBSCRIBE to channel on sh.
// The channel's gate is ready once the last SSUBSCRIBE sent for it is
// confirmed: an earlier one may have been undone by an SUNSUBSCRIBE sent
// after it.
func (n *Notifier) confirmed(sh *shard, channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if sh.pending[channel] > 1 {
		sh.pending[channel]--
		return
	}
	delete(sh.pending, channel)
	g := n.gates[channel]
	if g == nil {
		return
	}
	i := slices.Index(g.shs, sh)
	if i < 0 {
		return
	}
	g.got[i] = true
	if !g.isReady() && confirmedBy(g) >= g.need {
		close(g.ready)
	}
	if g.again != nil {
		close(g.again)
		g.again = nil
	}
}

// dropped handles the end of channel's subscription on sh. One the notifier
// asked for (an idle gate let go) needs nothing. One the server decided (the
// channel's slot moved to another node: a failover, a resharding) is taken
// up where the slot lives now, and its waiters woken meanwhile.
func (n *Notifier) dropped(sh *shard, channel string) {
	n.mu.Lock()
	if sh.leaving[channel] > 0 {
		// The confirmation of a SUNSUBSCRIBE of ours: a Join since then
		// sent its SSUBSCRIBE after it, which stands.
		if sh.leaving[channel]--; sh.leaving[channel] == 0 {
			delete(sh.leaving, channel)
		}
		n.mu.Unlock()
		return
	}
	g := n.gates[channel]
	// Once: the server's SUNSUBSCRIBE and a waiter's Check may both see it.
	moved := g != nil && slices.Contains(g.shs, sh) && g.again == nil
	if moved {
		g.again = make(chan struct{}) // resubscribe makes its own
		for _, w := range g.waiters {
			w.signal(protocol.Wake{})
		}
	}
	n.mu.Unlock()
	if !moved {
		return
	}
	n.log.Warn("dlock: wake-up channel's slot moved; subscribing again where it lives now", "node", sh.addr, "channel", channel)
	n.wg.Go(func() {
		// the Subscriber keeps the channel for sh's connection: forget it there,
		// so that a reconnection does not ask the wrong node for it. (The
		// server answers MOVED, which the receive loop passes over.)
		n.subMu.Lock()
		n.mu.Lock()
		sh.leave(channel)
		n.mu.Unlock()
		_ = sh.ps.Unsubscribe(context.Background(), channel)
		n.subMu.Unlock()
		for attempt := 1; ; attempt++ {
			if n.resubscribe(g, sh, attempt) || n.isClosed() {
				return
			}
			select {
			case <-n.closing:
				return
			case <-time.After(min(time.Duration(attempt)*100*time.Millisecond, time.Second)):
			}
		}
	})
}

// Check makes sure that g's channel is subscribed where its slot lives now,
// as far as the Cluster's slot map (held locally) tells: a waiter calls it
// after each attempt, so that a subscription whose slot moved is taken up on
// the new server even if the old one's SUNSUBSCRIBE never arrived (it went
// down, or the message was lost with its connection). It does nothing
// elsewhere than on a Cluster, and while a subscription is under way.
func (n *Notifier) Check(ctx context.Context, g *Gate) {
	addr, err := n.sharded.ShardOf(ctx, g.channel)
	if err != nil || addr == "" {
		return
	}
	n.mu.Lock()
	var sh *shard
	if len(g.shs) == 1 && g.again == nil && g.isReady() && g.subErr == nil && n.gates[g.channel] == g {
		sh = g.shs[0]
	}
	n.mu.Unlock()
	if sh == nil || sh.addr == addr {
		return
	}
	n.dropped(sh, g.channel)
}

// resubscribe subscribes g's channel again, which the server of shard old
// dropped, and reports whether Redis confirmed it within resubscribeWait.
// It waits a while for the Cluster's slot map to show the channel's new
// server: the Redis client loads it in the background.
func (n *Notifier) resubscribe(g *Gate, old *shard, attempt int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), resubscribeWait)
	defer cancel()
	n.sharded.Reload()
	for {
		addr, err := n.sharded.ShardOf(ctx, g.channel)
		if err == nil && addr != old.addr {
			break
		}
		select {
		case <-ctx.Done():
			// Still the same server (the slot came back), or no answer:
			// subscribe where the Redis client says.
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}
	n.mu.Lock()
	again := make(chan struct{})
	g.again = again
	n.mu.Unlock()
	if err := n.subscribe(ctx, g); err != nil {
		n.log.Warn("dlock: subscribing again failed", "channel", g.channel, "attempt", attempt, "err", err)
		return false
	}
	select {
	case <-again:
		return true
	case <-time.After(resubscribeWait):
		n.log.Warn("dlock: subscribing again not confirmed", "channel", g.channel, "attempt", attempt)
		return false
	case <-n.closing:
		return false
	}
}

// resubscribeWait bounds each step of subscribing a dropped channel again.
var resubscribeWait = 2 * time.Second

// reconnect replaces sh's connection, which stopped answering, by a new one
// subscribed to every channel of sh's gates. It returns the new connection,
// or nil if the notifier closed meanwhile.
func (n *Notifier) reconnect(sh *shard) rclient.Subscriber {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	var channels []string
	clear(sh.pending)
	clear(sh.leaving) // their confirmations were the old connection's
	for ch, g := range n.gates {
		if slices.Contains(g.shs, sh) {
			channels = append(channels, ch)
			sh.pending[ch] = 1
		}
	}
	old := sh.ps
	n.mu.Unlock()
	// The dial and the SSUBSCRIBE go without mu, which every wait takes
	// (JoinSubscribed) and which a server that does not answer would hold
	// up to the timeout; subMu, held, keeps other subscriptions and Close
	// off sh.ps meanwhile. A failure surfaces on the next receive, which
	// connects and subscribes again: the Subscriber keeps the channels.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps := sh.rc.Subscribe(ctx, sh.server(), channels...)
	n.mu.Lock()
	sh.ps = ps
	n.mu.Unlock()
	_ = old.Close()
	return ps
}

func (n *Notifier) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// deliver wakes the waiter a message names: one a lock was granted to, or
// one told to try again; "*" wakes every waiter of the gate. A message for a
// waiter that has gone needs nothing: a waiter leaves either with the lock,
// or after removing its registration, which gives back a grant made to it
// (releaseLeave).
func (n *Notifier) deliver(channel, msg string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	g := n.gates[channel]
	if g == nil {
		return
	}
	m := protocol.ParseWake(msg)
	if m.Owner == "*" {
		for _, w := range g.waiters {
			w.signal(m)
		}
		return
	}
	if w := g.waiters[m.Owner]; w != nil {
		w.signal(m)
	}
}

// wakeAll wakes the waiters of every gate subscribed on sh.
func (n *Notifier) wakeAll(sh *shard) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, g := range n.gates {
		if slices.Contains(g.shs, sh) {
			for _, w := range g.waiters {
				w.signal(protocol.Wake{})
			}
		}
	}
}

// Close closes every connection and waits for the receive loops.
func (n *Notifier) Close() {
	n.subMu.Lock()
	n.mu.Lock()
	n.closed = true
	var conns []rclient.Subscriber
	for _, sh := range n.shards {
		conns = append(conns, sh.ps)
	}
	n.mu.Unlock()
	n.subMu.Unlock()
	for _, ps := range conns {
		_ = ps.Close()
	}
	n.wg.Wait()
}

// confirmedBy counts the shards that confirmed g's subscription.
// notifier.mu must be held.
func confirmedBy(g *Gate) int {
	c := 0
	for _, ok := range g.got {
		if ok {
			c++
		}
	}
	return c
}

// ReadyChannels returns the channels n believes it is subscribed to.
func (n *Notifier) ReadyChannels() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var chs []string
	for ch, g := range n.gates {
		if g.isReady() && g.subErr == nil {
			chs = append(chs, ch)
		}
	}
	return chs
}
