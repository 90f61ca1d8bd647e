package protocol

// The node: one deployment's Backend. Each request names its
// script, builds the KEYS and ARGV that script's header (lua/*.lua) lists,
// and decodes the reply into Go values. Nothing here waits, retries or keeps
// state: the layers above decide what a reply means for a lease.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/timing"

	"github.com/redis/go-redis/v9"
)

// Node is a Redis deployment that holds locks: a plain, Sentinel or Cluster
// go-redis client. A Client runs on one node; a lock is on the node that
// owns its keys, which go-redis finds for a Cluster.
type Node struct {
	rdb redis.UniversalClient
	// cmd runs the scripts: rdb itself, or its autopipeliner
	// (WithAutoPipeline); proc sends the acquire and release calls built
	// here: the autopipeliner, or rdb through a batcher, or, if rdb gives
	// up a request at its context's end, rdb itself.
	cmd  redis.Scripter
	proc interface {
		Process(context.Context, redis.Cmder) error
	}
	// batch, if not nil, is the batcher proc sends through.
	batch *batcher
	// ctxAware: cmd gives up a request at its context's deadline by itself
	// (rdb made with ContextTimeoutEnabled, and no autopipeliner).
	ctxAware bool
	// Cluster: keys of different hash slots may live on different servers,
	// so one script call must not span slots.
	Cluster bool
	// scripts are the scripts the node runs: defaultScripts, unless a
	// test's Client asked for others.
	scripts *ScriptSet
	// retry is how the node sends an acquire or a release again (send.go);
	// clock dates their deadlines.
	retry retryPolicy
	clock serverClock
	// epoch is the latest reading of the server's data epoch (epoch.go).
	epoch atomic.Pointer[dataEpoch]
}

func NewNode(rdb redis.UniversalClient, autoPipeline bool, scripts *ScriptSet) (*Node, error) {
	n := &Node{rdb: rdb, cmd: rdb, proc: rdb, scripts: scripts, retry: retryPolicyOf(rdb)}
	switch r := rdb.(type) {
	case *redis.Client:
		n.ctxAware = r.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		n.ctxAware, n.Cluster = r.Options().ContextTimeoutEnabled, true
	case *redis.Ring:
		n.ctxAware, n.Cluster = r.Options().ContextTimeoutEnabled, true
	}
	switch {
	case autoPipeline:
		ap, err := rdb.AutoPipeline()
		if err != nil {
			return nil, err
		}
		n.cmd, n.proc, n.ctxAware = ap, ap, false
	case !n.ctxAware:
		// Its requests do not give up at their context's end anyway, so
		// that a request waits for a batch changes nothing for the caller.
		n.batch = newBatcher(rdb)
		n.proc = n.batch
	}
	return n, nil
}

// Settle waits for the pipelines of n's batcher, which outlive the requests
// they carry.
func (n *Node) Settle() {
	if n.batch != nil {
		n.batch.Settle()
	}
}

// Traits: a node's requests give up at their context's end if its Redis
// client does so (ctxAware), and its waiters may take a lock on a grant
// message.
func (n *Node) Traits() Traits { return Traits{CtxAware: n.ctxAware, GrantWake: true, Admin: true} }

// KindFor: every kind runs on a node.
func (n *Node) KindFor(k *Kind) *Kind { return k }

// A kind is a lock type's scripts and the layout of its keys. Each key list
// names, in the order of the KEYS in its script's header, the keys of one
// lock by the name the header gives them; the key itself is the lock's tag
// followed by the name's suffix (keyNames).
type Kind struct {
	Name    string // the Go type, for messages
	Space   string // the keys' namespace after the prefix: "" for a Mutex, "fair:", ...
	acquire script
	release script

	acquireKeys []string // KEYS of acquire
	releaseKeys []string // KEYS of release
	// leaseKeys is a lease's group of KEYS in extend.lua (but for a
	// RedLock member's extends hash, extendsKey): the key that carries each
	// holder's lease, then those that must outlive it. The first is also
	// ttl.lua's KEYS[1], and raise_fence.lua's (with the second, for a lock
	// hash's fence).
	leaseKeys []string
	leaseIn   leaseCarrier // what carries each holder's lease
	// extendsHash: a holder's Extend generation is kept in the extends
	// hash, which extend.lua is given last; every other kind keeps it in a
	// key that exists while the lease runs (extend.lua).
	extendsHash bool
	Handoff     handoff // what a release that frees the lock does for the next waiter
	Reentrant   bool    // a Lease in the context makes an acquisition of the same lock re-enter its hold
	// order is what release.lua does with a grantee's place in the
	// queue (its ARGV[6]); nil for the kinds that run other scripts.
	order any
}

// The orders of release.lua's ARGV[6], boxed once.
var (
	orderPass any = "0" // a grant takes the grantee out of the queue: if it lapses, the next live waiter is served
	orderKeep any = "1" // the grantee keeps the head of the queue until it releases or its registration lapses
)

// handoff is what a release that frees a lock does for the waiter next in
// line.
type handoff uint8

const (
	// handoffNone: the kind's own release script decides (a Semaphore, a
	// read hold).
	handoffNone handoff = iota
	// HandoffGrant: the release grants the lock to the next waiter and tells
	// it the fence (grant in lua/lib.lua), so that its Lock may return on
	// that message.
	HandoffGrant
	// handoffTell: the release keeps the lock for the next waiter a while
	// and tells it to take it (a RedLock's Mutex, whose members keep
	// separate queues).
	handoffTell
)

// leaseCarrier names, for extend.lua and ttl.lua, what carries a holder's
// lease.
type leaseCarrier string

const (
	leaseInState leaseCarrier = "s" // the lock's state, a string (lua/lib.lua)
	leaseInHash  leaseCarrier = "h" // the lock hash (owner id -> hold count)
	leaseInZSet  leaseCarrier = "z" // a sorted set of holders (owner id -> lapse time)
)

// leaseInRedLock is extend.lua's type of a RedLock member's lock hash, whose
// group names its extends hash last.
const leaseInRedLock = "r"

// arg returns c as a script argument. Each carrier is a constant, which an
// interface holds without allocating.
func (c leaseCarrier) arg() any {
	switch c {
	case leaseInZSet:
		return string(leaseInZSet)
	case leaseInState:
		return string(leaseInState)
	}
	return string(leaseInHash)
}

// keyNames maps the names of the scripts' headers to key suffixes.
var keyNames = map[string]string{
	"lock": "", "semaphore": "", "count": "",
	"fence": ":fence", "waiters": ":waiters", "alive": ":alive",
	"holders": ":holders", "total": ":total", "readers": ":readers", "fences": ":fences", "writers": ":writers",
	"leader": ":leader",
}

var (
	// A Mutex and a FairMutex keep the same queue, in arrival order, and
	// run the same scripts; they differ in a grant that lapses (its grantee
	// paused past it): a Mutex passes the lock to the next live waiter, a
	// FairMutex keeps it for the grantee while its registration lives.
	// The lock itself, its holder and its fence, is one string, its state.
	MutexKind = &Kind{Name: "Mutex", acquire: ScriptAcquire, release: scriptRelease,
		acquireKeys: []string{"lock", "waiters", "alive"},
		releaseKeys: []string{"lock", "waiters", "alive"},
		leaseKeys:   []string{"lock"},
		leaseIn:     leaseInState,
		Handoff:     HandoffGrant, Reentrant: true, order: orderPass}
	FairKind = &Kind{Name: "FairMutex", Space: "fair:", acquire: ScriptAcquire, release: scriptRelease,
		acquireKeys: []string{"lock", "waiters", "alive"},
		releaseKeys: []string{"lock", "waiters", "alive"},
		leaseKeys:   []string{"lock"},
		leaseIn:     leaseInState,
		Handoff:     HandoffGrant, Reentrant: true, order: orderKeep}
	SemKind = &Kind{Name: "Semaphore", Space: "sem:", acquire: ScriptSemAcquire, release: scriptSemRelease,
		acquireKeys: []string{"semaphore", "fence", "waiters", "alive", "holders", "total"},
		releaseKeys: []string{"semaphore", "waiters", "alive", "holders", "total", "fence"},
		leaseKeys:   []string{"holders", "fence", "semaphore"},
		leaseIn:     leaseInZSet}
	// The two kinds of hold of an RWMutex share its keys, scripts and
	// wake-up channel; a read hold's lease is its member of the readers set,
	// the write hold's is the lock hash.
	RWReadKind = &Kind{Name: "RWMutex", Space: "rw:", acquire: ScriptRWAcquire, release: scriptRWRelease,
		acquireKeys: []string{"lock", "fence", "waiters", "alive", "readers", "fences", "writers"},
		releaseKeys: []string{"lock", "waiters", "alive", "readers", "fences", "writers", "fence"},
		leaseKeys:   []string{"readers", "fence", "fences"},
		leaseIn:     leaseInZSet, Reentrant: true}
	RWWriteKind = &Kind{Name: "RWMutex", Space: "rw:", acquire: ScriptRWAcquire, release: scriptRWRelease,
		acquireKeys: RWReadKind.acquireKeys,
		releaseKeys: RWReadKind.releaseKeys,
		leaseKeys:   []string{"lock", "fence", "fences"},
		Handoff:     HandoffGrant, Reentrant: true}
	LatchKind = &Kind{Name: "CountDownLatch", Space: "latch:"}
	// RedMutexKind is a Mutex on a RedLock member: the scripts of its own
	// (red_acquire.lua, red_release.lua) keep no order and grant nothing, for each
	// member keeps a queue of its own: a release tells the next waiter to
	// try.
	RedMutexKind = &Kind{Name: "Mutex", acquire: ScriptRedAcquire, release: scriptRedRelease,
		acquireKeys: []string{"lock", "fence", "waiters"},
		releaseKeys: []string{"lock", "fence", "waiters"},
		leaseKeys:   []string{"lock", "fence"},
		extendsHash: true,
		Handoff:     handoffTell, Reentrant: true}
)

// Keys names everything in Redis that belongs to one lock. Every name carries
// the same {hash tag}, so they share a Redis Cluster slot and one script can
// touch them all; docs/failure-model.md lists them.
type Keys struct {
	Kind    *Kind
	Name    string // as the caller gave it
	Tag     string // prefix, namespace and {hash tag}: the stem of every key and channel
	Channel string // the stem of the wake-up channels; a Client listens on channel + ":" + its id
	// channelArg is channel as a script argument, boxed once.
	channelArg                          any
	AcquireKeys, releaseKeys, leaseKeys []string
}

// NewKeys names the keys of kind k's lock called name, and its wake-up
// channel stem. Every key and the stem are slices of one string, and the key
// lists share one array, so that a lock's names cost a few allocations, not
// one each.
func NewKeys(prefix string, k *Kind, name string) Keys {
	esc := NameEscaper.Replace(name)
	lists := [...][]string{k.acquireKeys, k.releaseKeys, k.leaseKeys}
	var names [8]string // each key's name once, in order of appearance
	n := 0
	for _, list := range lists {
		for _, kn := range list {
			if !slices.Contains(names[:n], kn) {
				names[n] = kn
				n++
			}
		}
	}
	stem := len(prefix) + len(k.Space) + len(esc) + 2
	size := stem + len(":wake") // the tag is the start of every name
	for _, kn := range names[:n] {
		size += stem + len(keyNames[kn])
	}
	var b strings.Builder
	b.Grow(size)
	var at [len(names) + 1][2]int // where each name and the channel stem are in b
	put := func(i int, suffix string) {
		at[i][0] = b.Len()
		b.WriteString(prefix)
		b.WriteString(k.Space)
		b.WriteByte('{')
		b.WriteString(esc)
		b.WriteByte('}')
		b.WriteString(suffix)
		at[i][1] = b.Len()
	}
	for i, kn := range names[:n] {
		put(i, keyNames[kn])
	}
	put(len(names), ":wake")
	all := b.String()
	cut := func(i int) string { return all[at[i][0]:at[i][1]] }
	ks := Keys{Kind: k, Name: name, Tag: all[:stem], Channel: cut(len(names))}
	ks.channelArg = ks.Channel
	// A list that begins another one is a slice of it (a Mutex's acquire
	// and lease lists begin its release list): the longest are built first.
	order := [len(lists)]int{0, 1, 2}
	for i := 1; i < len(order); i++ { // a stable insertion sort, longest first
		for j := i; j > 0 && len(lists[order[j]]) > len(lists[order[j-1]]); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	var from [len(lists)]int // the list each one is a slice of
	listed := 0
	for oi, i := range order {
		l := lists[i]
		from[i] = i
		for _, j := range order[:oi] {
			if from[j] == j && slices.Equal(l, lists[j][:len(l)]) {
				from[i] = j
				break
			}
		}
		if from[i] == i {
			listed += len(l)
		}
	}
	arr := make([]string, 0, listed)
	var built [len(lists)][]string
	for _, i := range order {
		l := lists[i]
		if from[i] != i {
			built[i] = built[from[i]][:len(l):len(l)]
			continue
		}
		start := len(arr)
		for _, kn := range l {
			arr = append(arr, cut(slices.Index(names[:n], kn)))
		}
		built[i] = arr[start:len(arr):len(arr)]
	}
	ks.AcquireKeys, ks.releaseKeys, ks.leaseKeys = built[0], built[1], built[2]
	return ks
}

// NameEscaper makes any byte string safe inside a hash tag: '{' and '}' would
// end the tag early and change the slot. '%' is escaped too, so the mapping is
// one-to-one.
var NameEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// remnantTTL is how long a name keeps the record of a call that removed its
// state: a latch's opening (latch.lua), a Semaphore's Delete of its total
// (sem_release.lua). A retry of that call (go-redis runs a request again
// when its reply is lost) finds it and answers as the first run did; retries
// come well within it.
const remnantTTL = 10 * time.Second

// remnantTTLArg is remnantTTL in milliseconds as a script argument, boxed
// once.
var remnantTTLArg any = remnantTTL.Milliseconds()

// Modes of the scripts, as their headers name them.
type (
	acquireMode string // ARGV[3] of an acquire script
	ReleaseMode string // ARGV[3] of a release script
	SemMode     string // ARGV[3] of sem_release.lua, beyond releaseLast and releaseLeave
	LatchMode   string // ARGV[1] of latch.lua
)

const (
	takeMode    acquireMode = "0" // take the lock, or register as a waiter
	reenterMode acquireMode = "1" // add a hold of an owner that has one

	ReleaseOne  ReleaseMode = "0" // one of several holds goes: the count that remains is given
	ReleaseLast ReleaseMode = "1" // the last hold goes: the lock is freed
	// ReleaseLastQueued is ReleaseLast for a hold that others are likely to
	// wait behind (it was granted): release.lua reads the state first
	// instead of trying the common case's write first, which it would only
	// have to put back. Scripts without that case take it as ReleaseLast.
	ReleaseLastQueued ReleaseMode = "4"
	ReleaseLeave      ReleaseMode = "2" // a waiter gives up: unregister it, pass the lock on if it was granted to it
	releaseEvict      ReleaseMode = "3" // as ReleaseLast, for ForceRelease: the owner's own release will say so

	SemSetTotal    SemMode = "3"
	SemAvailable   SemMode = "4"
	SemDeleteTotal SemMode = "5"
	semEvict       SemMode = "6" // as ReleaseLast, for ForceRelease: the holder's own release and renewal will say so

	LatchDown   LatchMode = "down"
	LatchSet    LatchMode = "set"
	LatchDelete LatchMode = "delete"
)

// arg returns m as a script argument. Each mode is a constant, which an
// interface holds without allocating.
func (m ReleaseMode) arg() any {
	switch m {
	case ReleaseOne:
		return string(ReleaseOne)
	case ReleaseLast:
		return string(ReleaseLast)
	case ReleaseLastQueued:
		return string(ReleaseLastQueued)
	case ReleaseLeave:
		return string(ReleaseLeave)
	case releaseEvict:
		return string(releaseEvict)
	}
	return string(m)
}

// SemWhy, as the registration of a Semaphore's acquire, does not queue the
// caller, and has an answer "not acquired" say why (AcquireResult.Sem): the
// register argument "-1" of sem_acquire.lua.
const SemWhy = -time.Millisecond

// Result codes of the release scripts and extend.lua.
const (
	CodeGone  = -1 // nobody holds the lock
	CodeOther = 0  // another owner holds the lock
	CodeDone  = 1  // release: the lock is free; extend: extended
	CodeHeld  = 2  // release: one hold given back, the lock still held
	CodeStale = 2  // extend: not extended, for a later Extend of the lease ran first
	// CodeAfter: release: the owner holds nothing, and the lock's keys show
	// that an earlier run of this release freed the lock (its reply was
	// lost): a lock's state is free with the owner's fence, or its holder
	// took the lock from that release, or was granted it by it (its link);
	// an RWMutex's or a RedLock member's fence key still holds the owner's
	// fence, which, once the lease's local deadline has passed, an expiry
	// would leave too.
	CodeAfter = 3
	// CodeEvicted: release, extend: the owner's hold was taken away by
	// ForceRelease.
	CodeEvicted = 4
)

// Replies and arguments of the scripts that are numbers or strings with a
// meaning of their own, as their headers name them.
const (
	// An acquire script's integer reply, beyond a fence (> 0): the owner's
	// hold count went up (reenterMode), or the owner holds nothing to
	// re-enter (for a Semaphore: more permits asked than its total). A wait
	// of w ms (-1: unknown) is -w - heldOffset (held_reply in lua/lib.lua).
	replyReentered = 0
	replyGone      = -1
	heldOffset     = 3

	// ttl.lua's replies other than the time left.
	ttlOther = -3 // another owner holds the lock
	ttlGone  = -2 // nobody holds it, or the owner's lease lapsed

	// tellArg is release scripts' ARGV[4] (the grant lease) that tells the
	// next waiter to try instead of granting it the lock.
	tellArg = "0"
)

// extendHow is ARGV "how" of a lease in extend.lua.
type extendHow string

const (
	extendLonger extendHow = "gt"  // lengthen the lease only: a renewal
	extendExact  extendHow = "set" // the lease lapses ttl from now: Lease.Extend
)

// arg returns h as a script argument, without allocating.
func (h extendHow) arg() any {
	if h == extendExact {
		return string(extendExact)
	}
	return string(extendLonger)
}

// FenceArg is a fence as a script argument, boxed once: as the acquire
// script's reply holds it, kept by the lease for its release, which then
// sends it without boxing it again.
type FenceArg struct{ v any }

// BoxFence makes f a FenceArg, boxing it (an allocation).
func BoxFence(f int64) FenceArg { return FenceArg{f} }

// NoFence is the FenceArg of an owner whose fence is unknown: 0.
var NoFence = FenceArg{int64(0)}

// arg returns f as a script argument; the zero FenceArg is 0.
func (f FenceArg) arg() any {
	if f.v == nil {
		return NoFence.v
	}
	return f.v
}

// AcquireResult is what an acquire script answered, decoded.
type AcquireResult struct {
	Fence     int64         // > 0 when the lock was taken
	FenceArg  FenceArg      // Fence as the reply boxed it
	Reentered bool          // the owner's hold count went up
	Gone      bool          // re-entry asked, but the owner holds nothing; for a Semaphore, more permits asked than its total
	Pttl      time.Duration // when held by another: how long until that may change, -1ms if unknown
	// Floor, when held by another, if the script tells it: every fence a
	// release grants the caller from then on is above it (fence_floor); at is
	// the server's time then, in µs.
	Floor, At int64
	// NotReplicated: the hold was granted or re-entered, but fewer replicas
	// than WithWaitReplicas asks for acknowledged it (an ErrNotReplicated).
	NotReplicated error
	// Sem, when a Semaphore's permits were not taken and the caller asked
	// why (SemWhy): the semaphore's total and use as the script saw them.
	Sem *SemTotal
	// Doubt, if not 0, is the deadline (the server's time, in ms) of a copy
	// of the request whose outcome is unknown (its reply was lost): it may
	// have run, or may still reach Redis until then. The owner's release, if
	// it comes sooner, passes it on (ReleaseArgs.Void), so that such a copy
	// takes nothing. Set with an error too.
	Doubt int64
	// Expired: the request reached Redis after its deadline, or after its
	// owner ended, and changed nothing. Acquire sends a new one; a RedLock's
	// member may answer so.
	Expired bool
}

// SemTotal is a Semaphore's total as Redis holds it, and its use.
type SemTotal struct {
	Total int64 // permits in all; 0 if Redis holds none
	Set   bool  // Total is the one SetPermits stored, not the first caller's
	Used  int64 // the permits live holders hold
	// Ahead (an acquire's answer): the permits live waiters queued before
	// the caller want, counted as far as leaves the caller no room.
	Ahead int64
}

// Acquire runs k's acquire script: one round trip, unless a copy's reply is
// lost (it is sent again, as the Redis client would) or the request reaches
// Redis after its deadline (it is sent again with a new one). If the lock is
// held and register is above zero, owner is registered as a waiter for that
// long. extra are the kind's own arguments, after the five every acquire
// script takes.
func (n *Node) Acquire(ctx context.Context, k Keys, owner string, ttl, register time.Duration, extra ...any) (AcquireResult, error) {
	var doubt int64
	for tries := 0; ; tries++ {
		dl, dlArg := n.clock.deadline()
		var rep evalReply
		switch {
		case k.Kind.order != nil && len(extra) == 0 && register == 0:
			// A Mutex's or a FairMutex's take that does not queue sends the
			// owner, the TTL and the deadline alone: Redis makes a Lua
			// string of every argument before the script runs, and the
			// script needs no others then.
			rep = n.eval(ctx, n.scripts[k.Kind.acquire], k.AcquireKeys, "", owner, msArg(ttl), dlArg)
		case k.Kind.order != nil && len(extra) == 0:
			// One that queues: the grant lease, boxed once per TTL, and the
			// channel and order, for a grant it may make (acquire.lua).
			rep = n.eval(ctx, n.scripts[k.Kind.acquire], k.AcquireKeys, "", owner, msArg(ttl), dlArg,
				string(takeMode), register.Milliseconds(), grantArg(ttl), k.channelArg, k.Kind.order)
		default:
			rep = n.eval(ctx, n.scripts[k.Kind.acquire], k.AcquireKeys, "", acquireArgs(k, owner, ttl, dlArg, takeMode, register.Milliseconds(), extra)...)
		}
		if rep.doubt {
			doubt = dl
		}
		r, err := n.acquired(k, rep)
		r.Doubt = doubt
		if err == nil && r.Expired && tries < expiredTries && ctx.Err() == nil {
			continue
		}
		return r, err
	}
}

// expiredTries is how many times an acquire that reached Redis after its
// deadline is sent again with a new one, the node's clock having learned the
// server's from the answer.
const expiredTries = 3

// Reenter runs k's acquire script to add a hold of owner, which then has
// count holds: one round trip. extra are the kind's own arguments, as for
// acquire.
func (n *Node) Reenter(ctx context.Context, k Keys, owner string, ttl time.Duration, count int, extra ...any) (AcquireResult, error) {
	_, dl := n.clock.deadline()
	r, err := n.acquired(k, n.eval(ctx, n.scripts[k.Kind.acquire], k.AcquireKeys, "", acquireArgs(k, owner, ttl, dl, reenterMode, int64(count), extra)...))
	if err == nil && r.Expired {
		// Its deadline passed on the way: the count is set again by the next
		// re-entry or release that reaches Redis; the hold is there.
		r = AcquireResult{Reentered: true}
	}
	return r, err
}

// acquireArgs are the ARGV of k's acquire script: the five every acquire
// script takes (owner, ttl, deadline, mode, and the registration or the hold
// count), then a Mutex's, FairMutex's or Election's waiter's grant lease,
// the channel stem and the order, and the kind's own arguments (an
// Election's candidate's value).
func acquireArgs(k Keys, owner string, ttl time.Duration, deadline any, mode acquireMode, n int64, extra []any) []any {
	args := append(make([]any, 0, 8+len(extra)), owner, msArg(ttl), deadline, string(mode), n)
	if k.Kind.order != nil {
		args = append(args, grantArg(ttl), k.channelArg, k.Kind.order)
	}
	return append(args, extra...)
}

// acquired decodes the reply of k's acquire script, or its error, and learns
// the server's clock from it where it tells it.
func (n *Node) acquired(k Keys, rep evalReply) (AcquireResult, error) {
	var r AcquireResult
	err := rep.err
	if err == nil {
		r, err = decodeAcquire(rep.v)
	}
	if err != nil {
		n.Failed(err)
		return AcquireResult{}, errs.Op(nil, err, "acquire %q", k.Name)
	}
	if r.At > 0 {
		n.clock.learn(r.At)
	}
	return r, nil
}

// eval runs script s with keys, then key if not empty, and args, as
// Script.Run does (EVALSHA, then EVAL if the server does not know it), copy
// by copy (send), with the command's arguments in one slice built here and
// reused by later calls once this one has its reply (go-redis, and its
// hooks, are done with a command when Process returns): the call allocates
// only what boxing the keys takes, and args can stay on the caller's stack.
func (n *Node) eval(ctx context.Context, s *redis.Script, keys []string, key string, args ...any) evalReply {
	nk := len(keys)
	if key != "" {
		nk++
	}
	p := evalArgs.Get().(*[]any)
	a := append((*p)[:0], "evalsha", shaArg(s), nk)
	for _, k := range keys {
		a = append(a, k)
	}
	if key != "" {
		a = append(a, key)
	}
	a = append(a, args...)
	r := n.send(ctx, s, a)
	clear(a)
	*p = a[:0]
	evalArgs.Put(p)
	return evalReply{r.v, refused(r.err), r.doubt, r.retried}
}

// refused says what Redis's refusal of a client that has not authenticated
// means. Redis answers a request of many arguments from such a client with
// "Protocol error: unauthenticated multibulk length", not NOAUTH, and closes
// the connection: every script call is such a request.
func refused(err error) error {
	if err == nil {
		return nil // before rerr, which escapes: no allocation on success
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return err
	}
	if msg := rerr.Error(); strings.Contains(msg, "unauthenticated") ||
		strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS") {
		return errs.Op(nil, err, "Redis refuses the client: no password or a wrong one (go-redis's Options.Username and Password)")
	}
	return err
}

// evalArgs holds argument slices for eval to reuse.
var evalArgs = sync.Pool{New: func() any {
	a := make([]any, 0, 16)
	return &a
}}

// evalReply is the reply of a script call, or its error, and what send
// knows of its copies.
type evalReply struct {
	v       any
	err     error
	doubt   bool // a copy's outcome is unknown
	retried bool // the reply follows a copy that may have run
}

// Result returns the reply and the error.
func (r evalReply) Result() (any, error) { return r.v, r.err }

// Int64 returns the reply as an integer, as redis.Cmd.Int64 does.
func (r evalReply) Int64() (int64, error) {
	if r.err != nil {
		return 0, r.err
	}
	switch v := r.v.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("redis: unexpected type=%T for Int64", r.v)
}

// noScript reports whether err is the server's answer to an EVALSHA of a
// script it does not know, also wrapped.
func noScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || strings.Contains(err.Error(), "NOSCRIPT"))
}

// shas holds each script's SHA1 as a script argument, boxed once.
var shas sync.Map // *redis.Script -> any

func shaArg(s *redis.Script) any {
	if v, ok := shas.Load(s); ok {
		return v
	}
	v, _ := shas.LoadOrStore(s, any(s.Hash()))
	return v
}

// boxed is a script argument in milliseconds computed from a duration,
// boxed once for the last duration it was asked for: an int64 above 255 in
// an interface is an allocation, and most programs lock with one TTL.
type boxed struct {
	of   func(time.Duration) time.Duration
	last atomic.Pointer[boxedArg]
}

type boxedArg struct {
	d  time.Duration
	ms any
}

func (b *boxed) arg(d time.Duration) any {
	if a := b.last.Load(); a != nil && a.d == d {
		return a.ms
	}
	a := &boxedArg{d, b.of(d).Milliseconds()}
	b.last.Store(a)
	return a.ms
}

var (
	ttlArgs   = boxed{of: func(d time.Duration) time.Duration { return d }}
	grantArgs = boxed{of: timing.GrantFor}
)

// msArg returns d in milliseconds as a script argument.
func msArg(d time.Duration) any { return ttlArgs.arg(d) }

// grantArg returns timing.GrantFor(ttl) in milliseconds as a script argument.
func grantArg(ttl time.Duration) any { return grantArgs.arg(ttl) }

// decodeAcquire decodes an acquire script's reply: an integer, or for
// "held" the time to wait, the fence floor and the server time (held_reply).
func decodeAcquire(v any) (AcquireResult, error) {
	reply := v
	switch v := v.(type) {
	case int64:
		switch {
		case v > 0:
			return AcquireResult{Fence: v, FenceArg: FenceArg{reply}}, nil
		case v == replyReentered:
			return AcquireResult{Reentered: true}, nil
		case v == replyGone:
			return AcquireResult{Gone: true}, nil
		}
		return AcquireResult{Pttl: time.Duration(-v-heldOffset) * time.Millisecond}, nil
	case []any:
		switch len(v) {
		case 2:
			// Too late, or its owner ended: nothing done.
			c, ok1 := v[0].(int64)
			at, ok2 := v[1].(int64)
			if ok1 && ok2 && c == 0 {
				return AcquireResult{Expired: true, At: at}, nil
			}
		case 3:
			c, ok1 := v[0].(int64)
			f, ok2 := v[1].(int64)
			at, ok3 := v[2].(int64)
			if ok1 && ok2 && ok3 && c <= 1-heldOffset {
				return AcquireResult{Pttl: time.Duration(-c-heldOffset) * time.Millisecond, Floor: f, At: at}, nil
			}
		case 5:
			// A Semaphore's "not acquired", with why (SemWhy).
			var n [5]int64
			ok := true
			for i, x := range v {
				n[i], ok = x.(int64)
				if !ok {
					break
				}
			}
			if ok && n[0] <= 1-heldOffset {
				return AcquireResult{Pttl: time.Duration(-n[0]-heldOffset) * time.Millisecond,
					Sem: &SemTotal{Used: n[1], Total: n[2], Ahead: n[3], Set: n[4] == 1}}, nil
			}
		}
	}
	return AcquireResult{}, fmt.Errorf("unexpected reply %v from the acquire script", v)
}

// ReleaseArgs are what a release says besides its lock.
type ReleaseArgs struct {
	Owner string
	Fence FenceArg // the owner's; NoFence if unknown
	Mode  ReleaseMode
	TTL   time.Duration // the lock's: it sets the grant lease of the waiter a freed lock goes to
	Count int           // for ReleaseOne, the holds that remain
	// Void, if not 0, is the deadline (the server's time, in ms) of an
	// acquire of Owner whose outcome is unknown (AcquireResult.Doubt): until
	// then, Redis refuses Owner's acquires, which can only be that one
	// arriving late, since the owner has ended.
	Void int64
}

// Released is what a release script answered: its result code, and whether
// the answer came from a copy sent after one whose outcome is unknown, which
// may have run first: then a code that says the owner held nothing may be
// that first copy's doing.
type Released struct {
	Code    int64
	Retried bool
}

// Release runs k's release script: one round trip, unless a copy's reply is
// lost (it is sent again, as the Redis client would). It returns the result
// code.
func (n *Node) Release(ctx context.Context, k Keys, a ReleaseArgs) (Released, error) {
	mode := a.Mode
	if mode == ReleaseLastQueued && k.Kind.order == nil {
		mode = ReleaseLast // release.lua alone tells the two apart
	}
	grant := grantArg(a.TTL)
	if k.Kind.Handoff == handoffTell {
		grant = tellArg // the next waiter is told to try, not granted the lock
	}
	var rep evalReply
	switch {
	case a.Void != 0:
		// Rare: an owner whose acquire is still out. Built the plain way.
		var args []any
		switch {
		case k.Kind == SemKind:
			args = []any{a.Owner, k.channelArg, mode.arg(), grant, a.Count, remnantTTLArg, a.Fence.arg(), a.Void}
		case k.Kind.order != nil:
			args = []any{a.Owner, k.channelArg, mode.arg(), grant, a.Fence.arg(), k.Kind.order, a.Count, a.Void}
		default:
			args = []any{a.Owner, k.channelArg, mode.arg(), grant, a.Count, a.Fence.arg(), a.Void}
		}
		rep = n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "", args...)
	case k.Kind == SemKind:
		rep = n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
			a.Owner, k.channelArg, mode.arg(), grant, a.Count, remnantTTLArg, a.Fence.arg())
	case k.Kind.order != nil && mode == ReleaseOne:
		rep = n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
			a.Owner, k.channelArg, mode.arg(), grant, a.Fence.arg(), k.Kind.order, a.Count)
	case k.Kind.order != nil:
		// release.lua reads a hold count in mode "0" alone: the others
		// do not send one (Redis makes a Lua string of every argument).
		rep = n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
			a.Owner, k.channelArg, mode.arg(), grant, a.Fence.arg(), k.Kind.order)
	default:
		rep = n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
			a.Owner, k.channelArg, mode.arg(), grant, a.Count, a.Fence.arg())
	}
	code, err := rep.Int64()
	if err != nil {
		n.Failed(err)
		return Released{}, errs.Op(nil, err, "release %q", k.Name)
	}
	return Released{Code: code, Retried: rep.retried}, nil
}

// RaiseFence runs raise_fence.lua on a RedLock's member: owner's fence on k
// there becomes at least fence. It returns a result code.
func (n *Node) RaiseFence(ctx context.Context, k Keys, owner string, fence int64, ttl time.Duration) (int64, error) {
	code, err := n.eval(ctx, n.scripts[ScriptRaiseFence], k.fenceKeys(), "", owner, strconv.FormatInt(fence, 10), msArg(ttl), k.Kind.leaseIn.arg()).Int64()
	if err != nil {
		n.Failed(err)
		return 0, errs.Op(nil, err, "raise the fence of %q", k.Name)
	}
	return code, nil
}

// Semaphore runs sem_release.lua in one of its own modes, with total as its
// argument: the new total, or the one to use when none is stored. id is the
// call's own, so that a retried Delete answers as it did. The script's
// release modes take a call marker after the semaphore's keys, which it
// never reads; these modes are sent one too, so that every call has the
// script's layout.
func (n *Node) Semaphore(ctx context.Context, k Keys, id string, mode SemMode, total int64) (int64, error) {
	v, err := n.scripts[k.Kind.release].Run(ctx, n.cmd, k.releaseKeys,
		id, k.channelArg, string(mode), 0, total, remnantTTLArg).Int64()
	if err != nil {
		return 0, errs.Op(nil, err, "semaphore %q", k.Name)
	}
	return v, nil
}

// SemTotal reads k's total as sem_acquire.lua does: the one SetPermits
// stored (its "total" key), else the first caller's (the "permits" field of
// its "semaphore" hash), 0 if neither is there. Plain reads in one round
// trip, which a replica could serve and a user allowed only to read keys may
// send. Used and Ahead are left 0.
func (n *Node) SemTotal(ctx context.Context, k Keys) (SemTotal, error) {
	var stored, first *redis.StringCmd
	_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		stored = p.Get(ctx, k.Tag+keyNames["total"])
		first = p.HGet(ctx, k.Tag, semPermitsField)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return SemTotal{}, errs.Op(nil, err, "total of semaphore %q", k.Name)
	}
	st := SemTotal{Set: true}
	for _, c := range []*redis.StringCmd{stored, first} {
		v, err := c.Int64()
		switch {
		case err == nil:
			st.Total = v
			return st, nil
		case !errors.Is(err, redis.Nil):
			return SemTotal{}, errs.Op(nil, err, "total of semaphore %q", k.Name)
		}
		st.Set = false
	}
	return st, nil
}

// semPermitsField is the field of a Semaphore's hash that holds the first
// caller's total (sem_acquire.lua).
const semPermitsField = "permits"

// ExtendItem is one lease in an extend call.
type ExtendItem struct {
	K     Keys
	Owner string
	TTL   time.Duration
	// Exact: the lease lapses ttl from now even if it would have lapsed later
	// (Lease.Extend); otherwise it is only lengthened (a renewal).
	Exact bool
	// Gen is how many Extends of the lease had been sent when this request
	// was, itself included: Redis ignores a request of an earlier generation
	// than the latest Extend it ran (codeStale), whenever it arrives.
	Gen uint32
	// Fence is the lease's fence, and Lease, if not nil, tells whether its
	// owner still holds it. A RedLock takes the lock again, for Owner and
	// with a fence at least Fence, on a member where the lock is gone and
	// free (one restarted empty), while Lease says the owner holds it. A
	// node uses neither.
	Fence int64
	Lease Holder
}

// Holder tells whether a lease is still its owner's.
type Holder interface {
	// Held reports whether the owner holds the lease: it has not ended, and
	// its owner has not begun to give it up. Once false, it stays false.
	Held() bool
}

// extendsKey names the hash in which Redis keeps, for each holder of k's
// lock, the generation of its latest Extend (extend.lua). It is named for
// each request that renews or extends a lease, not with the lock's other
// names, which every acquisition builds.
func (k *Keys) extendsKey() string { return k.Tag + ":extends" }

// MaxBatch is the most leases renewed by one script call, and by one
// pipeline. A renewal pass takes the leases due by then, not a multiple of
// maxBatch, so its last call is a partial one: at 128, 10,000 leases on one
// server take about 80 round trips a period, under one per 100 leases; each
// call keeps Redis busy for about a millisecond.
const MaxBatch = 128

// Extend runs extend.lua once over items, whose keys must all be in one
// hash slot if the node is a Cluster: one round trip. It returns a result
// code per item.
func (n *Node) Extend(ctx context.Context, items []ExtendItem) ([]int64, error) {
	ks, args := extendArgs(items)
	codes, err := n.scripts[ScriptExtend].Run(ctx, n.cmd, ks, args...).Int64Slice()
	return n.extendResult(items, codes, err)
}

// ExtendAll runs extend.lua once per call, all in one pipeline: one round
// trip per server. It returns the result codes and the error of each call.
func (n *Node) ExtendAll(ctx context.Context, calls [][]ExtendItem, rec *Record) ([][]int64, []error) {
	codes, errs := make([][]int64, len(calls)), make([]error, len(calls))
	if len(calls) == 1 && rec == nil {
		codes[0], errs[0] = n.Extend(ctx, calls[0])
		return codes, errs
	}
	run := func(eval bool, todo []int) {
		pipe := n.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(todo))
		for j, i := range todo {
			ks, args := extendArgs(calls[i])
			if eval {
				cmds[j] = n.scripts[ScriptExtend].Eval(ctx, pipe, ks, args...)
			} else {
				cmds[j] = n.scripts[ScriptExtend].EvalSha(ctx, pipe, ks, args...)
			}
		}
		var set *redis.StatusCmd
		if rec != nil && !rec.Sent {
			// The record rides with the round (on a Cluster, with the
			// batch of its own server), once.
			set, rec.Sent = pipe.Set(ctx, rec.Key, rec.Value, rec.TTL), true
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		if set != nil && set.Err() != nil {
			n.Failed(set.Err())
			rec.Err = fmt.Errorf("write %s: %w", rec.Key, set.Err())
		}
		for j, i := range todo {
			v, err := cmds[j].Int64Slice()
			codes[i], errs[i] = n.extendResult(calls[i], v, err)
		}
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	run(false, all)
	// A server that does not know the script yet (after a restart, a
	// failover or SCRIPT FLUSH) is sent its body.
	var again []int
	for i, err := range errs {
		if noScript(err) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		run(true, again)
	}
	return codes, errs
}

func extendArgs(items []ExtendItem) (ks []string, args []any) {
	nk := 0
	for _, it := range items {
		nk += len(it.K.leaseKeys) + 1
	}
	ks = make([]string, 0, nk)
	args = make([]any, 0, 6*len(items))
	for _, it := range items {
		how := extendLonger
		if it.Exact {
			how = extendExact
		}
		ks = append(ks, it.K.leaseKeys...)
		n := len(it.K.leaseKeys)
		kind := it.K.Kind.leaseIn.arg()
		if it.K.Kind.extendsHash {
			ks = append(ks, it.K.extendsKey())
			n++
			kind = leaseInRedLock
		}
		args = append(args, kind, it.Owner, it.TTL.Milliseconds(), how.arg(), it.Gen, n)
	}
	return ks, args
}

func (n *Node) extendResult(items []ExtendItem, codes []int64, err error) ([]int64, error) {
	if err != nil {
		n.Failed(err)
	}
	switch {
	case err != nil && len(items) == 1:
		return nil, errs.Op(nil, err, "extend %q", items[0].K.Name)
	case err != nil:
		return nil, errs.Op(nil, err, "extend %d leases", len(items))
	case len(codes) != len(items):
		return nil, errs.Op(nil, nil, "extend %d leases: unexpected reply %v", len(items), codes)
	}
	return codes, nil
}

// ShardOf returns the address of the server that serves channel's slot on a
// Cluster, where a shard channel must be subscribed; "" on any other node.
func (n *Node) ShardOf(ctx context.Context, channel string) (string, error) {
	cc, ok := n.rdb.(*redis.ClusterClient)
	if !ok {
		return "", nil
	}
	c, err := cc.MasterForKey(ctx, channel)
	if err != nil {
		n.Failed(err)
		return "", err
	}
	return c.Options().Addr, nil
}

// Places returns where channel is to be subscribed: on the server that
// serves it, which must confirm it.
func (n *Node) Places(ctx context.Context, channel string) (Placement, error) {
	addr, err := n.ShardOf(ctx, channel)
	if err != nil {
		return Placement{}, err
	}
	return Placement{At: []Place{{addr, n.rdb}}, Need: 1}, nil
}

// Failed notes a request to the node that failed. On a Cluster, a failure
// that a changed topology explains (a server unreachable or gone, the cluster
// down, a slot moved) makes go-redis load the slot map again, in the
// background: it does so by itself only on a MOVED reply or every minute,
// and a dead primary sends no MOVED, so without this requests would go on
// dialling it after its replica was promoted.
func (n *Node) Failed(err error) {
	if Transient(err) {
		n.Reload()
	}
}

// Reload makes go-redis load a Cluster's slot map again, in the background.
func (n *Node) Reload() {
	if cc, ok := n.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// Transient reports whether err, the failure of a request, says that Redis
// could not be reached or is changing hands (a failover, a restart, a slot
// migration), so that the request may succeed if made again shortly. A reply
// that is an ordinary error, a closed client and an ended context are not.
func Transient(err error) bool {
	var rerr redis.Error
	var nq *errs.QuorumError
	switch {
	case err == nil, errors.Is(err, redis.ErrClosed):
		return false
	case errors.As(err, &nq):
		return true // the members that did not answer may be back shortly
	case errors.As(err, &rerr):
		msg := rerr.Error()
		for _, p := range transientReplies {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, redis.ErrPoolTimeout):
		return true
	}
	var nerr *net.OpError
	if errors.As(err, &nerr) && nerr.Op == "dial" {
		return true // never sent, even if a deadline cut the dial short
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// transientReplies start the error replies of a server that cannot serve the
// request now but may shortly: its cluster is down or resharding, it is
// loading its data, it was demoted to a replica, or it lost its primary.
var transientReplies = []string{"CLUSTERDOWN ", "TRYAGAIN ", "MOVED ", "ASK ", "LOADING ", "READONLY ", "MASTERDOWN "}

// Group returns the hash slot of key on a Cluster node, where one script
// call must not span slots; 0 on any other.
func (n *Node) Group(key string) int {
	if !n.Cluster {
		return 0
	}
	return slot(key)
}

// TTL runs ttl.lua: whether owner holds its lease on k (codeDone; codeOther
// or codeGone if not) and, if it does, how long the lease has left (-1ms: no
// expiry).
func (n *Node) TTL(ctx context.Context, k Keys, owner string) (left time.Duration, code int64, err error) {
	ms, err := n.scripts[scriptTTL].Run(ctx, n.cmd, k.leaseKeys[:1], owner, k.Kind.leaseIn.arg()).Int64()
	switch {
	case err != nil:
		return 0, 0, errs.Op(nil, err, "ttl %q", k.Name)
	case ms == ttlOther:
		return 0, CodeOther, nil
	case ms == ttlGone:
		return 0, CodeGone, nil
	}
	return time.Duration(ms) * time.Millisecond, CodeDone, nil
}

// Latch runs latch.lua in mode. id is the call's own, the same in each run
// of the call, by which the latch's keys tell a retry.
func (n *Node) Latch(ctx context.Context, k Keys, id string, mode LatchMode, count int64) (int64, error) {
	v, err := n.scripts[scriptLatch].Run(ctx, n.cmd, []string{k.Tag, k.Tag + latchOpenedSuffix},
		string(mode), LatchChannel(k), count, id, remnantTTLArg).Int64()
	if err != nil {
		return 0, errs.Op(nil, err, "latch %q", k.Name)
	}
	return v, nil
}

// LatchChannel is where a latch's opening is published.
func LatchChannel(k Keys) string { return k.Tag + LatchSuffix }

const (
	LatchSuffix = ":zero"
	// latchOpenedSuffix names the record of a latch's last opening
	// (latch.lua's KEYS[2]).
	latchOpenedSuffix = ":opened"
	// latchCountField is the field of the latch's hash that holds its count.
	latchCountField = "count"
)

// Announce sets the string key to value for ttl, or removes it if ttl is 0.
func (n *Node) Announce(ctx context.Context, key, value string, ttl time.Duration) error {
	var err error
	if ttl == 0 {
		err = n.rdb.Del(ctx, key).Err()
	} else {
		err = n.rdb.Set(ctx, key, value, ttl).Err()
	}
	if err != nil {
		n.Failed(err)
		return errs.Op(nil, err, "write %s", key)
	}
	return nil
}

// Strings reads the string keys, in one pipeline (one round trip per server
// that holds them): "" for each that is missing or holds another type.
func (n *Node) Strings(ctx context.Context, keys []string) ([]string, error) {
	out := make([]string, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	pipe := n.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, c := range cmds {
		v, err := c.Result()
		switch {
		case err == nil:
			out[i] = v
		case errors.Is(err, redis.Nil) || wrongType(err):
		default:
			n.Failed(err)
			return nil, errs.Op(nil, err, "read %s", keys[i])
		}
	}
	return out, nil
}

// LatchCount reads a latch's count: 0 when it has none.
func (n *Node) LatchCount(ctx context.Context, k Keys) (int64, error) {
	s, err := n.rdb.HGet(ctx, k.Tag, latchCountField).Result()
	if wrongType(err) {
		// A latch armed by an earlier version of latch.lua, a string holding
		// its count, until a CountDown, TrySetCount or Delete makes it a
		// hash.
		s, err = n.rdb.Get(ctx, k.Tag).Result()
	}
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, errs.Op(nil, err, "count of latch %q", k.Name)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errs.Op(nil, err, "count of latch %q: %q in Redis", k.Name, s)
	}
	return v, nil
}

// wrongType reports whether err is Redis's answer to a command on a key
// that holds another type.
func wrongType(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "WRONGTYPE")
}

// Inspect runs inspect.lua over keys, for the kind inspect.lua names code:
// read-only (EVALSHA_RO), so that a user allowed only to read keys may send
// it, and a replica runs it.
func (n *Node) Inspect(ctx context.Context, keys []string, code string, limit int) (State, error) {
	v, err := n.scripts[scriptInspect].RunRO(ctx, n.rdb, keys, code, limit).Slice()
	if err != nil {
		return State{}, err
	}
	return decodeState(v)
}

// State is a lock as inspect.lua reads it.
type State struct {
	Now     int64 // the server's time, in µs
	Fence   int64 // the last fence handed out; 0 if none is kept
	Holders []Hold
	Waiters []Hold // Since set, TTL what is left of the registration
	Queued  int    // waiters registered, lapsed ones not yet dropped included
	Permits int64  // a Semaphore's total, or a latch's count
	Used    int64  // the permits a Semaphore's live holders hold
}

// Hold is a holder or a waiter as inspect.lua reads it.
type Hold struct {
	Owner string
	Holds int // a holder's hold count, at least 1
	TTL   time.Duration
	Fence int64     // a holder's fence; 0 if unknown
	Since time.Time // when a waiter joined the queue; zero if not kept
	// Read is a read hold, or a reader waiting; Permits what a Semaphore's
	// holder holds or its waiter wants.
	Read    bool
	Permits int64
}

// decodeState decodes inspect.lua's reply.
func decodeState(v []any) (State, error) {
	if len(v) != 7 {
		return State{}, fmt.Errorf("unexpected reply %v", v)
	}
	n := func(x any) int64 { i, _ := x.(int64); return i }
	text := func(x any) string { s, _ := x.(string); return s }
	rows := func(x any) [][]any {
		list, _ := x.([]any)
		out := make([][]any, 0, len(list))
		for _, r := range list {
			if row, ok := r.([]any); ok && len(row) >= 4 {
				out = append(out, row)
			}
		}
		return out
	}
	// what reads a hold's or a waiter's kind: "w" (or none) a writer, "r" a
	// reader, else a Semaphore's permits.
	what := func(h *Hold, w string) {
		switch w {
		case "", "w":
		case "r":
			h.Read = true
		default:
			h.Permits, _ = strconv.ParseInt(w, 10, 64)
		}
	}
	st := State{Now: n(v[0]), Fence: max(n(v[1]), 0), Queued: int(n(v[3])), Permits: max(n(v[5]), 0), Used: n(v[6])}
	for _, r := range rows(v[2]) {
		h := Hold{Owner: text(r[0]), Holds: int(max(n(r[1]), 1)), TTL: time.Duration(n(r[2])) * time.Millisecond, Fence: max(n(r[3]), 0)}
		if len(r) > 4 {
			what(&h, text(r[4]))
		}
		st.Holders = append(st.Holders, h)
	}
	for _, r := range rows(v[4]) {
		w := Hold{Owner: text(r[0]), TTL: time.Duration(n(r[1])) * time.Millisecond}
		if at := n(r[2]); at > 0 {
			w.Since = time.UnixMicro(at)
		}
		what(&w, text(r[3]))
		st.Waiters = append(st.Waiters, w)
	}
	return st, nil
}

// Scan passes each key that matches the glob match to each, found with SCAN
// on every primary (never KEYS, which would block Redis), until each
// returns false.
func (n *Node) Scan(ctx context.Context, match string, each func(key string) bool) error {
	servers, err := primaries(ctx, n.rdb)
	if err != nil {
		return errs.Op(nil, err, "list the primaries")
	}
	for _, srv := range servers {
		it := srv.Scan(ctx, 0, match, 1000).Iterator()
		for it.Next(ctx) {
			if !each(it.Val()) {
				return nil
			}
		}
		if err := it.Err(); err != nil {
			return errs.Op(nil, err, "SCAN %s", match)
		}
	}
	return nil
}

// primaries returns a client of each server a SCAN must cover: every
// primary of a Cluster, every shard of a Ring, else rdb itself.
func primaries(ctx context.Context, rdb redis.UniversalClient) ([]redis.Cmdable, error) {
	var (
		mu  sync.Mutex
		out []redis.Cmdable
	)
	add := func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		out = append(out, c)
		mu.Unlock()
		return nil
	}
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		if err := r.ForEachMaster(ctx, add); err != nil {
			return nil, err
		}
	case *redis.Ring:
		if err := r.ForEachShard(ctx, add); err != nil {
			return nil, err
		}
	default:
		out = append(out, rdb)
	}
	return out, nil
}

// Evict releases owner's hold on k, whose fence is fence (0 if unknown), as
// its own last release would, a freed lock going to the next waiter.
func (n *Node) Evict(ctx context.Context, k Keys, owner string, fence int64, ttl time.Duration) (int64, error) {
	switch {
	case k.Kind == SemKind:
		return n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
			owner, k.channelArg, string(semEvict), grantArg(ttl), 0, remnantTTLArg).Int64()
	case k.Kind.order != nil:
		return n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
			owner, k.channelArg, releaseEvict.arg(), grantArg(ttl), fence, k.Kind.order).Int64()
	}
	return n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
		owner, k.channelArg, releaseEvict.arg(), grantArg(ttl), 0, fence).Int64()
}

// MoveFence runs raise_fence.lua for no owner: k's fence becomes at least
// fence, whoever holds the lock.
func (n *Node) MoveFence(ctx context.Context, k Keys, fence int64, ttl time.Duration) error {
	return n.eval(ctx, n.scripts[ScriptRaiseFence], k.fenceKeys(), "", "", strconv.FormatInt(fence, 10), msArg(ttl), k.Kind.leaseIn.arg()).err
}

// InspectArgs returns what inspect.lua reads of k, which Client.Inspect
// reports: its KEYS, and its mode ("fair", "rw", "sem" or "latch"). An
// Election is read as a FairMutex: its leader record is no hold (Leader
// reads it).
func (k *Keys) InspectArgs() ([]string, string) {
	switch k.Kind {
	case LatchKind:
		return []string{k.Tag}, "latch"
	case RWReadKind, RWWriteKind:
		return k.AcquireKeys, "rw"
	case SemKind:
		return k.AcquireKeys, "sem"
	case ElectionKind:
		return k.AcquireKeys[:3], "fair"
	}
	return k.AcquireKeys, "fair"
}

// fenceKeys are raise_fence.lua's KEYS for k: its state, or its lock hash
// (or a Semaphore's hash) and fence key.
func (k *Keys) fenceKeys() []string {
	if k.Kind.leaseIn == leaseInState {
		return k.AcquireKeys[:1]
	}
	return k.AcquireKeys[:2]
}

// EvictionPolicy reads Redis's maxmemory-policy; known is false if Redis
// serves this client but will not tell (CONFIG refused: an ACL, a renamed
// command, a managed service). Redis refusing the client itself (no password
// or a wrong one: NOAUTH, WRONGPASS) is an error, and so is a Redis it
// cannot reach.
func (n *Node) EvictionPolicy(ctx context.Context) (policy string, known bool, err error) {
	v, err := n.rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	var rerr redis.Error
	switch {
	case errors.As(err, &rerr):
		// Refused: CONFIG GET alone, or every command of this client? A PING
		// tells; NOPERM means Redis knows the user, who may not PING.
		if perr := n.rdb.Ping(ctx).Err(); perr != nil && !noPerm(perr) {
			return "", false, errs.Op(nil, perr, "Redis refuses the client")
		}
		return "", false, nil
	case err != nil:
		return "", false, errs.Op(nil, err, "read maxmemory-policy")
	}
	policy, known = v["maxmemory-policy"]
	return policy, known, nil
}

// noPerm reports whether err is Redis's refusal of a command the ACL user
// may not run.
func noPerm(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOPERM")
}

// ReplicaShortfall: a node's writes wait for no replica.
func (n *Node) ReplicaShortfall(context.Context) (int, map[string]int, error) { return 0, nil, nil }

// slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, or of the whole key if it has none, modulo 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// Wake is a wake-up message, parsed: the owner id of the waiter it is for,
// and for a grant (grant in lua/lib.lua) its fence, grant lease and the
// server time it was made at, in µs; fence is 0 for any other message.
type Wake struct {
	Owner string
	Fence int64
	Lease time.Duration
	At    int64
}

// ParseWake parses a wake-up message: an owner id ("*" for every waiter), or
// an owner id, a fence, a grant lease in ms and a server time in µs,
// separated by spaces.
func ParseWake(msg string) Wake {
	owner, rest, ok := strings.Cut(msg, " ")
	if !ok {
		return Wake{Owner: msg}
	}
	f, rest, ok1 := strings.Cut(rest, " ")
	ms, at, ok2 := strings.Cut(rest, " ")
	fence, err1 := strconv.ParseInt(f, 10, 64)
	n, err2 := strconv.ParseInt(ms, 10, 64)
	t, err3 := strconv.ParseInt(at, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil || fence <= 0 || n <= 0 {
		return Wake{Owner: msg}
	}
	return Wake{Owner: owner, Fence: fence, Lease: time.Duration(n) * time.Millisecond, At: t}
}
