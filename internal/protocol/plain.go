package protocol

// Plain: a deployment's Backend that sends no command of Redis's
// @scripting category (dlock.WithoutScripts), for servers or ACL users that
// forbid scripts. It runs a Mutex on plain commands and nothing else: each
// request is one command, a pipeline, or a MULTI/EXEC transaction on the
// server that serves the lock's slot. It lives here, beside Node, rather
// than in a package of its own: it shares the node's Redis client, clock,
// resend policy and data epoch, and the keys and result codes every
// Backend speaks, all of which are this package's.
//
// Keys of a Mutex called N (PlainMutexKind), which carry the same hash tag:
//
//	<prefix>{N}        the lock: "p1|<owner>|<gen>" while held, missing when free
//	<prefix>{N}:fence  a stream, always empty (MAXLEN 0): its last id gives fences
//	<prefix>{N}:wake   the channel a release publishes "*" on
//
// gen is the generation of the holder's latest Extend (ExtendItem.Gen), so
// that a renewal or Extend sent before a later Extend that Redis ran finds
// another value and changes nothing (CodeStale). A name is used in one
// mode: a value that is not "p1|…" is a scripted Client's, which these
// requests refuse to touch, and lua/lib_state.lua refuses a "p1|…" value.
//
// What it gives up, against the scripts: no queue, so no order among
// waiters and no hand-off (DECISIONS 14 excepts it from 6): a release
// wakes every waiter of the lock in every Client (Traits.WakeAll), and they
// race. A request sent late (DECISIONS 4) is bounded in time rather than
// refused: see plainFirst.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/rclient"
)

// plainFirst bounds the first lease of a take: the acquire sets the lock's
// expiry to an absolute server time at most plainFirst after the request
// was sent (PXAT, from the node's reading of the server's clock), and the
// renewer lengthens it to the TTL at once, as a grant (renew.Start.Grant).
// A copy of the acquire that reaches Redis later than that creates nothing
// (SET … PXAT of a time past leaves no key), and one that reaches it
// sooner, after its owner gave up, holds the name at most until then,
// never renewed: nothing else refuses a late copy, since DELIFEQ leaves no
// record of the owner that released.
const plainFirst = 2 * time.Second

// PlainMutexKind is a Mutex on a Plain backend: its lock key is the
// scripted Mutex's, so that one mode finds the other's value and refuses
// it; its fence is a stream of its own.
var PlainMutexKind = &Layout{Name: "Mutex",
	acquireKeys: []string{"lock", "fence"},
	releaseKeys: []string{"lock"},
	leaseKeys:   []string{"lock"},
	leaseIn:     leaseInState,
	Handoff:     handoffTell, Reentrant: true}

// Plain is a Node that sends no script: see the top of this file.
type Plain struct {
	n *Node
}

// NewPlain returns the script-free Backend of the node n. The node's Redis
// client must know which server holds a key (not a go-redis Ring), since
// each request is a transaction on that server.
func NewPlain(n *Node) (*Plain, error) {
	if n.c.Settings().Topology == rclient.Sharded {
		return nil, errors.New("requests without scripts are MULTI/EXEC transactions on the server of a lock's key: they need a client that knows it, a server, a Sentinel's primary or a Cluster, not keys spread by the client (a Ring)")
	}
	return &Plain{n: n}, nil
}

var (
	_ Backend = (*Plain)(nil)
	_ Kinds   = (*Plain)(nil)
	_ Sharded = (*Plain)(nil)
	_ Probed  = (*Plain)(nil)
)

// PlainWhat names a Plain backend's Client in messages.
const PlainWhat = "a Client made with dlock.WithoutScripts()"

// Traits: no grant (a release wakes every waiter, on the lock's channel
// stem alone), and no script.
func (p *Plain) Traits() Traits {
	return Traits{What: PlainWhat, CtxAware: p.n.ctxAware, WakeAll: true, NoScripts: true}
}

// KindFor: a Mutex, and nothing else, keeps its promises without a script.
func (p *Plain) KindFor(k *Layout) *Layout {
	if k == MutexKind {
		return PlainMutexKind
	}
	return nil
}

// plainValue is the lock's value while owner holds it, at Extend
// generation gen.
func plainValue(owner string, gen uint32) string {
	return "p1|" + owner + "|" + strconv.FormatUint(uint64(gen), 10)
}

// parsePlain splits a lock's value into its owner and generation; ok is
// false for a value no Plain backend wrote (a scripted Client's).
func parsePlain(v string) (owner string, gen uint32, ok bool) {
	rest, ok := strings.CutPrefix(v, "p1|")
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '|')
	if i < 0 {
		return "", 0, false
	}
	g, err := strconv.ParseUint(rest[i+1:], 10, 32)
	if err != nil {
		return "", 0, false
	}
	return rest[:i], uint32(g), true
}

// otherMode is the error of a request that found, at a lock's key, a value
// that a scripted Client wrote.
func otherMode(k Keys) error {
	return errs.Op(nil, nil, "lock key %s holds a lock of a Client made without dlock.WithoutScripts(): a name is used in one mode, by every Client", k.AcquireKeys[0])
}

// tx sends cmds, wrapped in MULTI and EXEC, on the server of key, once,
// and again as the Redis client would after a failure on the way (send).
// It returns the replies of cmds, as EXEC gave them.
func (p *Plain) tx(ctx context.Context, key string, cmds ...[]any) ([]any, sent) {
	var r sent
	for try := 0; ; try++ {
		v, err := p.txOnce(ctx, key, cmds)
		if err == nil {
			r.v, r.err = v, nil
			return v, r
		}
		r.err = err
		if !unsent(err) {
			r.doubt = true
		}
		if try >= p.n.retry.Max || !retryable(err) || ctx.Err() != nil {
			return nil, r
		}
		r.retried = r.doubt
		if !sleep(ctx, backoff(p.n.retry, try+1)) {
			return nil, r
		}
	}
}

func (p *Plain) txOnce(ctx context.Context, key string, cmds [][]any) ([]any, error) {
	addr, err := p.n.ShardOf(ctx, key)
	if err != nil {
		return nil, err
	}
	pipe := make([]rclient.Cmd, 0, len(cmds)+2)
	pipe = append(pipe, rclient.Cmd{Args: []any{"multi"}})
	for _, c := range cmds {
		pipe = append(pipe, rclient.Cmd{Args: c})
	}
	pipe = append(pipe, rclient.Cmd{Args: []any{"exec"}})
	if err := p.n.c.PipeAt(ctx, addr, false, pipe); err != nil {
		return nil, err
	}
	exec := pipe[len(pipe)-1]
	if exec.Err != nil {
		// EXECABORT: a command was refused as it was queued (NOPERM, a
		// syntax Redis does not know): its own error says why.
		for _, c := range pipe[1 : len(pipe)-1] {
			if c.Err != nil && isReply(c.Err) {
				return nil, c.Err
			}
		}
		return nil, exec.Err
	}
	vs, ok := exec.Reply.([]any)
	if !ok || len(vs) != len(cmds) {
		return nil, fmt.Errorf("unexpected reply %v to EXEC", exec.Reply)
	}
	for _, v := range vs {
		if err, ok := v.(error); ok {
			return nil, err
		}
	}
	return vs, nil
}

// Acquire takes k's lock for owner, in one transaction: SET NX with a short
// absolute expiry (plainFirst) and GET, the key's PTTL, an XADD to the
// fence stream, the stream's expiry, and TIME. The lock is taken if SET
// found no value (and PTTL shows the key: a copy that arrived after its
// expiry time set nothing), or found owner's own (an earlier copy took it,
// its reply lost). Nothing registers a waiter: register is ignored.
//
// The fence is max(ms*1000+seq, t): the XADD's id <ms>-<seq> in µs, and t,
// the TIME of the same transaction in µs, as the scripts' max(last+1, t).
// Redis makes each id above the stream's last, so fences rise across
// holders and expiry even if the clock steps back; t keeps them rising when
// the stream is lost (a restart, a failover, a deleted key), also within the
// millisecond of the last fence, where a new stream's id starts again at
// seq 0 (DECISIONS 2). A take whose seq reaches 1000 could give a fence
// that a later holder's next millisecond would not exceed: it gives the
// lock back, and is sent again.
func (p *Plain) Acquire(ctx context.Context, k Keys, owner string, ttl, register time.Duration, x KindArgs) (AcquireResult, error) {
	lock, fence := k.AcquireKeys[0], k.AcquireKeys[1]
	v := plainValue(owner, 0)
	var doubt int64
	for tries := 0; ; tries++ {
		at := p.n.clock.now() + min(ttl, plainFirst).Milliseconds()
		vs, s := p.tx(ctx, lock,
			[]any{"set", lock, v, "nx", "pxat", at, "get"},
			[]any{"pttl", lock},
			[]any{"xadd", fence, "maxlen", "0", "*", "o", owner},
			[]any{"pexpire", fence, ttl.Milliseconds()},
			[]any{"time"})
		if s.doubt {
			// A copy may still reach Redis, and take the lock until at.
			doubt = at
		}
		if s.err != nil {
			p.n.Failed(s.err)
			return AcquireResult{Doubt: doubt}, errs.Op(nil, s.err, "acquire %q", k.Name)
		}
		r, redo, err := p.acquired(ctx, k, owner, v, vs)
		r.Doubt = doubt
		if err == nil && redo && tries < expiredTries && ctx.Err() == nil {
			continue
		}
		if redo && err == nil && !r.Expired {
			// Given back each time, for want of a fence that keeps their
			// order: as if held, briefly. (Expired each time, it says so.)
			r = AcquireResult{Pttl: time.Millisecond, Doubt: doubt}
		}
		return r, err
	}
}

// acquired decodes the replies of Acquire's transaction; redo says the
// take changed nothing, or gave the lock back, and is to be sent again.
func (p *Plain) acquired(ctx context.Context, k Keys, owner, v string, vs []any) (r AcquireResult, redo bool, err error) {
	pttl, ok1 := vs[1].(int64)
	id, ok2 := vs[2].(string)
	at, ok3 := serverMicros(vs[4])
	if !ok1 || !ok2 || !ok3 {
		return r, false, errs.Op(nil, nil, "acquire %q: unexpected reply %v", k.Name, vs)
	}
	p.n.clock.learn(at)
	taken := false
	switch cur := vs[0].(type) {
	case nil:
		if pttl < 0 {
			// Reached Redis after its expiry time: it set nothing.
			return AcquireResult{Expired: true, At: at}, true, nil
		}
		taken = true
	case string:
		if cur == v {
			taken = true // an earlier copy took it: its fence, lost, was lower
			break
		}
		if _, _, ok := parsePlain(cur); !ok {
			return r, false, otherMode(k)
		}
		if pttl < 0 {
			pttl = -1
		}
		return AcquireResult{Pttl: time.Duration(pttl) * time.Millisecond}, false, nil
	default:
		return r, false, errs.Op(nil, nil, "acquire %q: unexpected reply %v", k.Name, vs[0])
	}
	if !taken {
		return r, false, nil
	}
	fence, ok := fenceOf(id)
	if !ok {
		// Give it back: a later holder's fence might not be above this one.
		if _, err := p.release(ctx, k, owner); err != nil {
			return AcquireResult{}, false, errs.Op(nil, err, "acquire %q: give back a take whose fence would break their order", k.Name)
		}
		return AcquireResult{}, true, nil
	}
	fence = max(fence, at)
	return AcquireResult{Fence: fence, FenceArg: BoxFence(fence), Short: time.Duration(pttl) * time.Millisecond}, false, nil
}

// fenceOf returns the fence of a fence stream's id "<ms>-<seq>": ms*1000 +
// seq, if seq is below 1000.
func fenceOf(id string) (int64, bool) {
	a, b, ok := strings.Cut(id, "-")
	if !ok {
		return 0, false
	}
	ms, err1 := strconv.ParseInt(a, 10, 64)
	seq, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || seq >= 1000 || ms <= 0 {
		return 0, false
	}
	return ms*1000 + seq, true
}

// serverMicros decodes TIME's reply into µs.
func serverMicros(v any) (int64, bool) {
	t, ok := v.([]any)
	if !ok || len(t) != 2 {
		return 0, false
	}
	var n [2]int64
	for i, x := range t {
		switch x := x.(type) {
		case string:
			var err error
			if n[i], err = strconv.ParseInt(x, 10, 64); err != nil {
				return 0, false
			}
		case int64:
			n[i] = x
		default:
			return 0, false
		}
	}
	return n[0]*1_000_000 + n[1], true
}

// Reenter confirms that owner still holds k's lock: the hold count lives in
// the client, which alone decides when the lock is freed.
func (p *Plain) Reenter(ctx context.Context, k Keys, owner string, ttl time.Duration, count int, x KindArgs) (AcquireResult, error) {
	code, _, err := p.holder(ctx, k, owner)
	switch {
	case err != nil:
		return AcquireResult{}, errs.Op(nil, err, "re-enter %q", k.Name)
	case code == CodeDone:
		return AcquireResult{Reentered: true}, nil
	}
	return AcquireResult{Gone: true}, nil
}

// holder reads k's lock: CodeDone and the value if owner holds it,
// CodeOther if another owner does, CodeGone if nobody.
func (p *Plain) holder(ctx context.Context, k Keys, owner string) (int64, string, error) {
	v, err := p.n.c.Do(ctx, "get", k.AcquireKeys[0])
	if err != nil {
		p.n.Failed(err)
		return 0, "", err
	}
	return p.codeOf(k, owner, v)
}

// codeOf tells whose a lock's value v is.
func (p *Plain) codeOf(k Keys, owner string, v any) (int64, string, error) {
	switch v := v.(type) {
	case nil:
		return CodeGone, "", nil
	case string:
		o, _, ok := parsePlain(v)
		switch {
		case !ok:
			return 0, "", otherMode(k)
		case o == owner:
			return CodeDone, v, nil
		}
		return CodeOther, v, nil
	}
	return 0, "", fmt.Errorf("unexpected value %v at %s", v, k.AcquireKeys[0])
}

// Release gives back a hold. The last (ReleaseLast, ReleaseLastQueued, an
// evict) deletes the lock if it holds owner's value (DELIFEQ) and publishes
// "*" on its channel in the same transaction, waking every waiter; one of
// several (ReleaseOne) confirms the owner still holds it (CodeHeld); a
// waiter that gives up (ReleaseLeave) has nothing to take back. Void is
// ignored: nothing can refuse a late acquire, which plainFirst bounds.
func (p *Plain) Release(ctx context.Context, k Keys, a ReleaseArgs) (Released, error) {
	switch a.Mode {
	case ReleaseLeave:
		return Released{Code: CodeDone}, nil
	case ReleaseOne:
		code, _, err := p.holder(ctx, k, a.Owner)
		if err != nil {
			return Released{}, errs.Op(nil, err, "release %q", k.Name)
		}
		if code == CodeDone {
			code = CodeHeld
		}
		return Released{Code: code}, nil
	}
	r, err := p.release(ctx, k, a.Owner)
	if err != nil {
		return Released{}, errs.Op(nil, err, "release %q", k.Name)
	}
	return r, nil
}

// release deletes k's lock if owner holds it, and wakes its waiters. It
// tries the value of the lease's first generation, which most leases keep,
// then the one Redis holds if it is owner's.
func (p *Plain) release(ctx context.Context, k Keys, owner string) (Released, error) {
	lock := k.AcquireKeys[0]
	v := plainValue(owner, 0)
	var retried bool
	for tries := 0; tries < 4; tries++ {
		vs, s := p.tx(ctx, lock, []any{"delifeq", lock, v}, []any{"spublish", k.Channel, "*"})
		retried = retried || s.retried
		if s.err != nil {
			p.n.Failed(s.err)
			return Released{}, s.err
		}
		if n, _ := vs[0].(int64); n == 1 {
			return Released{Code: CodeDone, Retried: retried}, nil
		}
		code, cur, err := p.holder(ctx, k, owner)
		switch {
		case err != nil:
			return Released{}, err
		case code != CodeDone:
			return Released{Code: code, Retried: retried}, nil
		}
		v = cur // owner's, at a later generation: an Extend ran
	}
	return Released{}, errors.New("the lock's value kept changing")
}

// Extend lengthens, or sets (Exact), the leases of items: see ExtendAll.
func (p *Plain) Extend(ctx context.Context, items []ExtendItem) ([]int64, error) {
	codes, errs := p.ExtendAll(ctx, [][]ExtendItem{items}, nil)
	return codes[0], errs[0]
}

// ExtendAll renews or extends every lease of calls in one pipeline (one
// round trip per server), with rec: for each, SET of the value of its
// generation, if the lock holds the value it expects, with PX of its TTL,
// and GET. A renewal expects its own generation's value, an Extend of
// generation g that of g-1; finding owner's value at another generation
// below g (an Extend whose outcome was unknown, or is still to come), it
// is sent again for that value in a second round, and then writes g, so
// that a late copy of the earlier request changes nothing. The value of a
// later generation answers CodeStale, another owner's CodeOther, none
// CodeGone. A renewal sets the TTL the lease counts on now (the latest
// Extend's): it never shortens what an Extend set, which is that TTL from
// when the Extend ran.
func (p *Plain) ExtendAll(ctx context.Context, calls [][]ExtendItem, rec *Record) ([][]int64, []error) {
	codes, errl := make([][]int64, len(calls)), make([]error, len(calls))
	type todo struct {
		call, item int
		expect     string
	}
	var round []todo
	for i, items := range calls {
		codes[i] = make([]int64, len(items))
		for j, it := range items {
			g := it.Gen
			if it.Exact && g > 0 {
				g--
			}
			round = append(round, todo{i, j, plainValue(it.Owner, g)})
		}
	}
	for try := 0; len(round) > 0 && try < 3; try++ {
		cmds := make([]rclient.Cmd, len(round), len(round)+1)
		for x, td := range round {
			it := calls[td.call][td.item]
			cmds[x].Args = []any{"set", it.K.leaseKeys[0], plainValue(it.Owner, it.Gen), "ifeq", td.expect, "px", it.TTL.Milliseconds(), "get"}
		}
		set := rec != nil && !rec.Sent
		if set {
			cmds = append(cmds, rclient.Cmd{Args: []any{"set", rec.Key, rec.Value, "px", rec.TTL.Milliseconds()}})
			rec.Sent = true
		}
		if err := p.n.c.Pipe(ctx, cmds); err != nil {
			for x := range cmds {
				cmds[x].Err = err
			}
		}
		if set {
			if err := cmds[len(cmds)-1].Err; err != nil {
				p.n.Failed(err)
				rec.Err = fmt.Errorf("write %s: %w", rec.Key, err)
			}
		}
		var again []todo
		for x, td := range round {
			it := calls[td.call][td.item]
			if err := cmds[x].Err; err != nil {
				p.n.Failed(err)
				if errl[td.call] == nil {
					errl[td.call] = errs.Op(nil, err, "extend %q", it.K.Name)
				}
				continue
			}
			code, expect := p.extended(it, td.expect, cmds[x].Reply)
			if expect != "" {
				td.expect = expect
				again = append(again, td)
				continue
			}
			if code == codeMode {
				if errl[td.call] == nil {
					errl[td.call] = otherMode(it.K)
				}
				continue
			}
			codes[td.call][td.item] = code
		}
		round = again
	}
	for _, td := range round {
		// Owner's value at an earlier generation each time: an Extend
		// that Redis has not run yet keeps arriving. Proves nothing.
		codes[td.call][td.item] = CodeStale
	}
	for i := range calls {
		if errl[i] != nil {
			codes[i] = nil
		}
	}
	return codes, errl
}

// codeMode marks, within ExtendAll, a value a scripted Client wrote.
const codeMode = -100

// extended tells what the reply v of the SET of it, which expected the
// value expect, says: a result code, or the value to expect in a second
// try.
func (p *Plain) extended(it ExtendItem, expect string, v any) (int64, string) {
	cur, ok := v.(string)
	switch {
	case v == nil:
		return CodeGone, ""
	case !ok:
		return CodeOther, ""
	case cur == expect:
		return CodeDone, ""
	}
	o, g, ok := parsePlain(cur)
	switch {
	case !ok:
		return codeMode, ""
	case o != it.Owner:
		return CodeOther, ""
	case g > it.Gen:
		return CodeStale, ""
	case g == it.Gen:
		// An Extend's earlier copy ran (its reply lost): this generation's
		// TTL holds from then, which was after this request was sent.
		return CodeDone, ""
	}
	return 0, cur
}

// TTL tells whether owner holds k's lock, and how long it has left, in one
// transaction of GET and PTTL.
func (p *Plain) TTL(ctx context.Context, k Keys, owner string) (time.Duration, int64, error) {
	lock := k.AcquireKeys[0]
	vs, s := p.tx(ctx, lock, []any{"get", lock}, []any{"pttl", lock})
	if s.err != nil {
		p.n.Failed(s.err)
		return 0, 0, errs.Op(nil, s.err, "ttl %q", k.Name)
	}
	code, _, err := p.codeOf(k, owner, vs[0])
	if err != nil {
		return 0, 0, errs.Op(nil, err, "ttl %q", k.Name)
	}
	ms, _ := vs[1].(int64)
	if code != CodeDone {
		return 0, code, nil
	}
	return time.Duration(ms) * time.Millisecond, CodeDone, nil
}

// The requests that need no script are the node's own.

func (p *Plain) Announce(ctx context.Context, key, value string, ttl time.Duration) error {
	return p.n.Announce(ctx, key, value, ttl)
}
func (p *Plain) Places(ctx context.Context, channel string) (Placement, error) {
	return p.n.Places(ctx, channel)
}
func (p *Plain) EvictionPolicy(ctx context.Context) (string, bool, error) {
	return p.n.EvictionPolicy(ctx)
}
func (p *Plain) Settle() { p.n.Settle() }
func (p *Plain) ShardOf(ctx context.Context, channel string) (string, error) {
	return p.n.ShardOf(ctx, channel)
}
func (p *Plain) Group(key string) int                               { return p.n.Group(key) }
func (p *Plain) Failed(err error)                                   { p.n.Failed(err) }
func (p *Plain) Reload()                                            { p.n.Reload() }
func (p *Plain) watchEpoch(ctx context.Context)                     { p.n.watchEpoch(ctx) }
func (p *Plain) keptData(ctx context.Context, since time.Time) bool { return p.n.keptData(ctx, since) }
func (p *Plain) requestDeadline() int64                             { return p.n.clock.now() + plainFirst.Milliseconds() }

// Missing: what every wait needs (SPUBLISH, SSUBSCRIBE), and the commands
// the Mutex is made of that older servers lack: SET's IFEQ (Valkey 8.1)
// and DELIFEQ (Valkey 9.0), tried on the key channel, which they leave
// alone (no value is equal to one never written). TIME, with them, teaches
// the node the server's clock, which the first take's expiry reads.
func (p *Plain) Missing(ctx context.Context, channel string, subscribe bool) ([]string, bool, error) {
	missing, hidden, err := p.n.missingPubSub(ctx, channel, subscribe)
	if err != nil {
		return nil, false, err
	}
	cmds := []rclient.Cmd{
		{Args: []any{"set", channel, "0", "ifeq", "1", "px", 1000}},
		{Args: []any{"delifeq", channel, "1"}},
		{Args: []any{"time"}},
	}
	if err := p.n.c.Pipe(ctx, cmds); err != nil {
		return nil, false, errs.Op(nil, err, "try SET … IFEQ and DELIFEQ")
	}
	for i, what := range []string{"SET … IFEQ", "DELIFEQ"} {
		err := cmds[i].Err
		switch {
		case err == nil:
		case noPerm(err):
			missing = append(missing, what+" (the ACL user may not send it)")
		case isReply(err):
			missing = append(missing, what)
		default:
			return nil, false, errs.Op(nil, err, "try %s", what)
		}
	}
	if at, ok := serverMicros(cmds[2].Reply); ok && cmds[2].Err == nil {
		p.n.clock.learn(at)
	}
	return missing, hidden, nil
}
