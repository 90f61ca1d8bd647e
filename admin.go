package dlock

import (
	"context"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// Kind is a lock type, as Inspect, Locks and ForceRelease name it, and as
// LockInfo.Kind spells it.
type Kind string

// The kinds of lock Redis can hold.
const (
	KindMutex          Kind = "Mutex"
	KindFairMutex      Kind = "FairMutex"
	KindRWMutex        Kind = "RWMutex"
	KindSemaphore      Kind = "Semaphore"
	KindCountDownLatch Kind = "CountDownLatch"
	KindElection       Kind = "Election"
	KindGroup          Kind = "Group"
)

// Kinds lists every Kind, in the order Locks reports them for one name.
var Kinds = []Kind{KindMutex, KindFairMutex, KindRWMutex, KindSemaphore, KindCountDownLatch, KindElection, KindGroup}

// adminKinds maps each Kind to the layout of its keys.
var adminKinds = map[Kind]*protocol.Layout{
	KindMutex:          protocol.MutexKind,
	KindFairMutex:      protocol.FairKind,
	KindRWMutex:        protocol.RWWriteKind,
	KindSemaphore:      protocol.SemKind,
	KindCountDownLatch: protocol.LatchKind,
	KindElection:       protocol.ElectionKind,
	KindGroup:          protocol.GroupKind,
}

// LockID names one lock: its kind and the name its callers gave it.
type LockID struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name"`
}

// LockState is one lock as Redis held it at one moment, read in one step
// by Inspect.
type LockState struct {
	LockID
	// Time is the Redis server's clock when the state was read; the TTLs
	// below count from it.
	Time time.Time `json:"time"`
	// Holders are the live holds: one for a held Mutex or FairMutex, the
	// writer or every reader of an RWMutex, every holder of a Semaphore. At
	// most InspectLimit are listed.
	Holders []Holder `json:"holders"`
	// Waiters are the live waiters, in the order they will be served (for
	// a Mutex, the order a release grants in). At most InspectLimit are
	// listed.
	Waiters []Waiter `json:"waiters"`
	// Queued is how many waiters are registered: at least those listed, and
	// possibly some whose registration has lapsed and that no request has
	// dropped yet.
	Queued int `json:"queued"`
	// Fence is the last fence handed out, 0 if Redis keeps none (it expires
	// with the lock, and the next fence is then the server's time in µs).
	Fence int64 `json:"fence"`
	// Permits is a Semaphore's total, 0 if none is set yet; Used is the
	// part its live holders hold.
	Permits int64 `json:"permits,omitempty"`
	Used    int64 `json:"used,omitempty"`
	// Count is a CountDownLatch's count; 0 when it is open (or was never
	// armed).
	Count int64 `json:"count,omitempty"`
}

// Exists reports whether Redis holds anything of the lock: a holder, a
// waiter, a fence, a Semaphore's total or a latch's count.
func (s *LockState) Exists() bool {
	return len(s.Holders) > 0 || s.Queued > 0 || s.Fence > 0 || s.Permits > 0 || s.Count > 0
}

// Holder is one hold of a lock.
type Holder struct {
	// Owner is the owner id: the holding Client's id, ':' and a sequence
	// number of that Client. Client is the part before ':'; ClientName is
	// that Client's name (WithClientName), "" if Redis keeps none (a Client
	// of an earlier version, or one whose record expired).
	Owner      string `json:"owner"`
	Client     string `json:"client"`
	ClientName string `json:"client_name,omitempty"`
	// Read is set for an RWMutex's read hold.
	Read bool `json:"read,omitempty"`
	// Holds is the hold count (re-entries included); Redis keeps none for
	// a read hold, which counts as one. Permits is what a Semaphore's
	// holder holds.
	Holds   int   `json:"holds"`
	Permits int64 `json:"permits,omitempty"`
	// Fence is the hold's fence, 0 if unknown.
	Fence int64 `json:"fence"`
	// Since is when the hold was granted, read from its fence, which is the
	// server's time in microseconds when it was handed out unless fences ran
	// ahead of the clock (many within a microsecond): then a moment too
	// late. Zero if the fence is unknown.
	Since time.Time `json:"since,omitzero"`
	// TTL is how long the lease has left unless its holder renews it.
	TTL time.Duration `json:"ttl"`
}

// Waiter is one waiter of a lock.
type Waiter struct {
	// Owner, Client and ClientName are as a Holder's.
	Owner      string `json:"owner"`
	Client     string `json:"client"`
	ClientName string `json:"client_name,omitempty"`
	// Read is set for a reader waiting on an RWMutex; Permits is what a
	// Semaphore's waiter wants.
	Read    bool  `json:"read,omitempty"`
	Permits int64 `json:"permits,omitempty"`
	// Since is when it joined the queue; zero where Redis does not keep it
	// (a Mutex's waiters are kept by when their registration lapses).
	Since time.Time `json:"since,omitzero"`
	// TTL is how long its registration lasts unless its Client renews it
	// (a live waiter does, every third of its registration time).
	TTL time.Duration `json:"ttl"`
}

// InspectLimit is the most holders and the most waiters Inspect lists.
const InspectLimit = 100

// Inspect reads the lock of kind and name as Redis holds it, in one
// request that writes nothing (a read-only script: EVALSHA_RO, which a user
// allowed only to read keys may send, and a replica runs). A lock Redis
// holds nothing of comes back with no holders, no waiters and no fence
// (LockState.Exists is false). An empty name, or one longer than MaxNameLen
// bytes, is an error, here and in ForceRelease.
func (c *Client) Inspect(ctx context.Context, kind Kind, name string) (*LockState, error) {
	k, err := c.adminKeys(ctx, "Inspect", kind, name)
	if err != nil {
		return nil, err
	}
	keys, code := k.InspectArgs()
	v, err := c.e.admin.Inspect(ctx, keys, code, InspectLimit)
	c.e.heard(err)
	if err != nil {
		return nil, errs.Op(nil, err, "inspect %s %q", kind, name)
	}
	s := stateOf(v)
	s.LockID = LockID{kind, name}
	if kind == KindCountDownLatch {
		s.Count, s.Permits = s.Permits, 0
	}
	if err := c.nameClients(ctx, s); err != nil {
		return nil, errs.Op(nil, err, "inspect %s %q: names of its Clients", kind, name)
	}
	return s, nil
}

// nameClients fills in the ClientName of s's holders and waiters from the
// Clients' records in Redis: one read per Client, in one round trip.
func (c *Client) nameClients(ctx context.Context, s *LockState) error {
	var ids []string
	for _, h := range s.Holders {
		if !slices.Contains(ids, h.Client) {
			ids = append(ids, h.Client)
		}
	}
	for _, w := range s.Waiters {
		if !slices.Contains(ids, w.Client) {
			ids = append(ids, w.Client)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = clientKey(c.cfg.prefix, id)
	}
	names, err := c.e.admin.Strings(ctx, keys)
	if err != nil {
		return err
	}
	for i := range s.Holders {
		s.Holders[i].ClientName = names[slices.Index(ids, s.Holders[i].Client)]
	}
	for i := range s.Waiters {
		s.Waiters[i].ClientName = names[slices.Index(ids, s.Waiters[i].Client)]
	}
	return nil
}

// adminKeys checks an administrative call and names the keys of the lock
// it is about.
func (c *Client) adminKeys(ctx context.Context, op string, kind Kind, name string) (protocol.Keys, error) {
	ak, ok := adminKinds[kind]
	if !ok {
		return protocol.Keys{}, errs.Op(nil, nil, "%s: unknown kind %q (want one of %v)", op, kind, Kinds)
	}
	if err := nameErr(op+" "+string(kind), name); err != nil {
		return protocol.Keys{}, err
	}
	if err := c.adminCheck(ctx, op); err != nil {
		return protocol.Keys{}, err
	}
	return protocol.NewKeys(c.cfg.prefix, ak, name), nil
}

// adminCheck rejects an administrative call the Client cannot make.
func (c *Client) adminCheck(ctx context.Context, op string) error {
	switch {
	case c == nil || c.e == nil:
		return errs.Op(nil, nil, "%s of a nil or zero Client", op)
	case ctx == nil:
		return errs.Op(nil, nil, "%s: nil context", op)
	case c.e.admin == nil:
		return c.e.unsupported(op, "")
	case c.e.closed():
		return errs.Op(ErrClosed, nil, "%s", op)
	}
	return nil
}

// stateOf is a lock's state as Inspect tells it, from what Redis holds.
func stateOf(v protocol.State) *LockState {
	st := &LockState{Time: time.UnixMicro(v.Now), Queued: v.Queued, Fence: v.Fence, Permits: v.Permits, Used: v.Used}
	for _, r := range v.Holders {
		st.Holders = append(st.Holders, Holder{Owner: r.Owner, Client: clientOf(r.Owner), Read: r.Read,
			Holds: r.Holds, Permits: r.Permits, Fence: r.Fence, Since: fenceTime(r.Fence, v.Now), TTL: r.TTL})
	}
	for _, r := range v.Waiters {
		st.Waiters = append(st.Waiters, Waiter{Owner: r.Owner, Client: clientOf(r.Owner), Read: r.Read,
			Permits: r.Permits, Since: r.Since, TTL: r.TTL})
	}
	return st
}

// clientOf returns the Client id in an owner id.
func clientOf(owner string) string {
	c, _, _ := strings.Cut(owner, ":")
	return c
}

// fenceTime reads the time a fence was handed out: its value in
// microseconds, if that is a time not after now (µs, the server's). Else
// zero.
func fenceTime(fence, now int64) time.Time {
	if fence <= 0 || fence > now {
		return time.Time{}
	}
	return time.UnixMicro(fence)
}

// Locks returns every lock under the Client's prefix whose name matches
// pattern, a Redis glob ("*" for all; "order:*", say), found with SCAN on
// every primary (never KEYS, which would block Redis), each lock once. A
// lock appears as long as Redis holds any state of it (see Inspect); what
// SCAN guarantees holds: a lock that exists throughout the scan is
// returned, one created or gone meanwhile may or may not be. The sequence
// stops at the first error, which it yields. A pattern longer than
// MaxNameLen bytes is an error.
func (c *Client) Locks(ctx context.Context, pattern string) iter.Seq2[LockID, error] {
	return func(yield func(LockID, error) bool) {
		err := c.adminCheck(ctx, "Locks")
		if err == nil && len(pattern) > MaxNameLen {
			err = errs.Op(nil, nil, "Locks: a pattern of %d bytes: at most MaxNameLen (%d) are allowed", len(pattern), MaxNameLen)
		}
		if err != nil {
			yield(LockID{}, err)
			return
		}
		match := globEscaper.Replace(c.cfg.prefix) + "*{" + protocol.NameEscaper.Replace(pattern) + "}*"
		seen := make(map[LockID]bool)
		stopped := false
		err = c.e.admin.Scan(ctx, match, func(key string) bool {
			id, ok := parseKey(c.cfg.prefix, key)
			if !ok || seen[id] {
				return true
			}
			seen[id] = true
			stopped = !yield(id, nil)
			return !stopped
		})
		c.e.heard(err)
		if err != nil && !stopped {
			yield(LockID{}, errs.Op(nil, err, "Locks"))
		}
	}
}

// globEscaper escapes the characters special in a Redis glob.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// stateSuffixes are the key suffixes that hold a lock's state; a key with
// another makes no lock appear.
var stateSuffixes = []string{"", ":fence", ":waiters", ":alive", ":holders", ":total", ":readers", ":fences", ":writers", ":leader", ":result"}

// parseKey returns the lock a key under prefix belongs to, if it holds some
// of its state.
func parseKey(prefix, key string) (LockID, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return LockID{}, false
	}
	space, rest, ok := strings.Cut(rest, "{")
	if !ok {
		return LockID{}, false
	}
	esc, suffix, ok := strings.Cut(rest, "}")
	if !ok || !slices.Contains(stateSuffixes, suffix) {
		return LockID{}, false
	}
	for kind, ak := range adminKinds {
		if ak.Space == space {
			if kind == KindCountDownLatch && suffix != "" {
				return LockID{}, false
			}
			return LockID{kind, nameUnescaper.Replace(esc)}, true
		}
	}
	return LockID{}, false
}

// nameUnescaper undoes nameEscaper.
var nameUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

// Eviction is what ForceRelease did.
type Eviction struct {
	// Evicted are the holds it took away, as Inspect saw them just before.
	Evicted []Holder `json:"evicted"`
	// Gone are the owners asked for that held nothing any more when their
	// turn came (their lease ended, or they released it).
	Gone []string `json:"gone,omitempty"`
	// Fence is a fence above every evicted hold's: the fence Redis keeps is at
	// least this now, so every fence handed out from now on is above it. A
	// resource that has seen Fence (or any later fence) rejects the evicted
	// holders' writes.
	Fence int64 `json:"fence"`
}

// ForceRelease takes the lock of kind and name away from its holders (or
// only from the owners given), whoever they are: for the people on call,
// when a holder is stuck and its lease keeps being renewed. Each hold is
// released as its holder's own release would release it, so the next
// waiter is granted the lock or woken at once, in the same script and with a
// fence above the evicted hold's (an Election's next leader: a higher term);
// Redis's fence is then moved to at least Eviction.Fence, above every evicted
// hold's. An evicted holder learns at
// its next renewal: its Lease's Done closes, with ErrLockLost. Until then it
// may still act; only fences stop it, which is why the fence moves.
//
// A hold taken after ForceRelease read the lock is never evicted: only the
// owners it saw (or was given) are. A retry of a release whose reply was
// lost answers as the first run did. A CountDownLatch has no holders: use
// CountDownLatch.Delete.
func (c *Client) ForceRelease(ctx context.Context, kind Kind, name string, owners ...string) (*Eviction, error) {
	k, err := c.adminKeys(ctx, "ForceRelease", kind, name)
	switch {
	case err != nil:
		return nil, err
	case kind == KindCountDownLatch:
		return nil, errs.Op(nil, nil, "ForceRelease %q: a CountDownLatch has no holders (CountDownLatch.Delete opens it)", name)
	}
	st, err := c.Inspect(ctx, kind, name)
	if err != nil {
		return nil, errs.Op(nil, err, "ForceRelease")
	}
	if len(owners) == 0 {
		for _, h := range st.Holders {
			owners = append(owners, h.Owner)
		}
	}
	ev := &Eviction{}
	var last int64
	for _, o := range owners {
		var fence int64 // unknown for an owner Inspect did not see
		if i := slices.IndexFunc(st.Holders, func(h Holder) bool { return h.Owner == o }); i >= 0 {
			fence = st.Holders[i].Fence
		}
		code, err := c.e.admin.Evict(ctx, k, o, fence, c.cfg.ttl)
		if err != nil {
			return ev, errs.Op(nil, err, "ForceRelease %s %q: release %s", kind, name, o)
		}
		// CodeEvicted: a run of this call whose reply was lost took it away
		// (or another ForceRelease did). CodeAfter for a hold Inspect saw:
		// it is over, its fence still the last (it ended just before).
		if code != protocol.CodeDone && code != protocol.CodeEvicted && (code != protocol.CodeAfter || fence == 0) {
			ev.Gone = append(ev.Gone, o)
			continue
		}
		h := Holder{Owner: o, Client: clientOf(o)}
		if i := slices.IndexFunc(st.Holders, func(h Holder) bool { return h.Owner == o }); i >= 0 {
			h = st.Holders[i]
		}
		ev.Evicted = append(ev.Evicted, h)
		last = max(last, h.Fence)
	}
	// Every fence handed out from now on exceeds the evicted ones: the
	// fence Inspect read is at least theirs.
	ev.Fence = max(st.Fence, last) + 1
	if err := c.e.admin.MoveFence(ctx, k, ev.Fence, c.cfg.ttl); err != nil {
		return ev, errs.Op(nil, err, "ForceRelease %s %q: move the fence on", kind, name)
	}
	return ev, nil
}
