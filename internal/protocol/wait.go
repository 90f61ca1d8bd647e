package protocol

// WAIT (WithWaitReplicas): a node whose every write that grants or lengthens
// a hold is followed, in the same pipeline on the same connection, by WAIT
// for a number of replicas, so that a failover is less likely to lose it.

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

// Replicas is WithWaitReplicas's setting: n replicas must acknowledge, within
// timeout, each write that grants or lengthens a hold.
type Replicas struct {
	N       int
	Timeout time.Duration
}

// WaitNode is a node whose acquisitions and extensions wait for replicas;
// every other request is the node's own.
type WaitNode struct {
	*Node
	wait Replicas
}

// WithWait returns n, if w asks for no replica; otherwise n wrapped so that
// every write that grants or lengthens a hold waits for w's replicas. The
// node must be one whose server for a key is known, and w's timeout at most
// half the Redis client's ReadTimeout, which bounds the reply of the
// pipeline that carries the WAIT.
func WithWait(n *Node, w Replicas) (Backend, error) {
	if w.N == 0 {
		return n, nil
	}
	st := n.c.Settings()
	if st.Topology == rclient.Sharded {
		return nil, errors.New("WAIT needs a client that knows which server holds a key: a server, a Sentinel's primary or a Cluster, not keys spread by the client (a Ring)")
	}
	read := st.ReadTimeout
	if read > 0 && w.Timeout > read/2 {
		return nil, fmt.Errorf("the timeout must be at most half the Redis client's ReadTimeout (%v), which bounds the reply that follows the WAIT", read)
	}
	return &WaitNode{Node: n, wait: w}, nil
}

// Traits: a waiter must not take a lock on a grant message, whose write no
// replica may have acknowledged: it asks again, and that acquire waits for
// them. A request may take the WAIT's timeout.
func (w *WaitNode) Traits() Traits {
	t := w.Node.Traits()
	t.GrantWake, t.Slow = false, w.wait.Timeout
	return t
}

// Acquire is node.acquire followed by WAIT.
func (w *WaitNode) Acquire(ctx context.Context, k Keys, owner string, ttl, register time.Duration, x KindArgs) (AcquireResult, error) {
	var doubt int64
	for tries := 0; ; tries++ {
		dl, dlArg := w.clock.deadline()
		r, unknown, err := w.runAcquireWaited(ctx, k, acquireArgs(k, owner, ttl, dlArg, takeMode, register.Milliseconds(), x))
		if unknown {
			doubt = dl
		}
		r.Doubt = doubt
		if err == nil && r.Expired && tries < expiredTries && ctx.Err() == nil {
			continue
		}
		return r, err
	}
}

// Reenter is node.reenter followed by WAIT.
func (w *WaitNode) Reenter(ctx context.Context, k Keys, owner string, ttl time.Duration, count int, x KindArgs) (AcquireResult, error) {
	_, dl := w.clock.deadline()
	r, _, err := w.runAcquireWaited(ctx, k, acquireArgs(k, owner, ttl, dl, reenterMode, int64(count), x))
	if err == nil && r.Expired {
		r = AcquireResult{Reentered: true}
	}
	return r, err
}

// Extend is node.extend followed by WAIT.
func (w *WaitNode) Extend(ctx context.Context, items []ExtendItem) ([]int64, error) {
	codes, errs := w.extendWaited(ctx, [][]ExtendItem{items})
	return codes[0], errs[0]
}

// ExtendAll is node.extendAll followed by WAIT. rec, if not nil, goes at the
// same time on a connection of its own: the WAIT's pipeline is the leases'
// server's, which may not be rec's.
func (w *WaitNode) ExtendAll(ctx context.Context, calls [][]ExtendItem, rec *Record) ([][]int64, []error) {
	if rec == nil {
		return w.extendWaited(ctx, calls)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rec.Err = w.Announce(ctx, rec.Key, rec.Value, rec.TTL)
	}()
	rec.Sent = true
	codes, errs := w.extendWaited(ctx, calls)
	<-done
	return codes, errs
}

// runAcquireWaited runs k's acquire script followed by WAIT, pipelined: one
// round trip. A hold it granted or re-entered that too few replicas
// acknowledged comes back with notReplicated set; the caller undoes it.
// doubt tells whether a copy's outcome is unknown.
func (w *WaitNode) runAcquireWaited(ctx context.Context, k Keys, args []any) (r AcquireResult, doubt bool, err error) {
	replies, acks, doubt, err := w.waited(ctx, k.Tag, w.scripts[k.Kind.acquire], [][]string{k.AcquireKeys}, [][]any{args})
	if replies != nil {
		v := replies[0].Reply
		if err = replies[0].Err; err == nil {
			if r, err = decodeAcquire(v); err == nil {
				err = acks.err
			}
		}
	}
	if err != nil {
		return AcquireResult{}, doubt, errs.Op(nil, w.foreign(ctx, k, err), "acquire %q", k.Name)
	}
	if r.At > 0 {
		w.clock.learn(r.At)
	}
	if r.Fence > 0 || r.Reentered {
		r.NotReplicated = acks.short()
	}
	return r, doubt, nil
}

// waited runs script once per keys and args, followed by WAIT for n.wait,
// in one pipeline on the server that owns key: one round trip, on one
// connection, so that WAIT counts the acknowledgements of those calls'
// writes. It never goes through the autopipeliner. A server that does not
// know the script yet is sent its body. If the pipeline could not be sent,
// replies is nil and err says why; otherwise each reply carries its own
// error, and the WAIT's outcome is in acks.
func (w *WaitNode) waited(ctx context.Context, key string, script *Script, keys [][]string, args [][]any) (replies []rclient.Cmd, acks waitResult, doubt bool, err error) {
	srv, err := w.c.ServerOf(ctx, key)
	if err != nil {
		w.Failed(err)
		return nil, waitResult{}, false, err
	}
	var wait rclient.Cmd
	// run sends the calls, each sent once, then WAIT, in one pipeline on
	// the server at srv; asking first if the server only imports the keys'
	// slot.
	run := func(srv string, eval, asking bool) error {
		cmds := make([]rclient.Cmd, len(keys)+1)
		for i := range keys {
			a := make([]any, 0, 3+len(keys[i])+len(args[i]))
			if eval {
				a = append(a, "eval", srcArg(script))
			} else {
				a = append(a, "evalsha", shaArg(script))
			}
			a = append(a, len(keys[i]))
			for _, key := range keys[i] {
				a = append(a, key)
			}
			cmds[i].Args = append(a, args[i]...)
		}
		cmds[len(keys)].Args = []any{"wait", w.wait.N, w.wait.Timeout.Milliseconds()}
		err := w.c.PipeAt(ctx, srv, asking, cmds)
		if err != nil {
			for i := range cmds {
				cmds[i].Err = err
			}
		}
		replies, wait = cmds[:len(keys)], cmds[len(keys)]
		return err
	}
	// once sends the calls once to srv, then, if the server does not know
	// the script, its body; and, if the slot is on its way to another
	// server, where the reply says: its keys may be there already (ASK), or
	// it has moved (MOVED). WAIT goes with them each time.
	once := func(srv string) {
		run(srv, false, false)
		if noScript(replies[0].Err) {
			run(srv, true, false) // every call is the same script on the same server
		}
		if to, ask := redirected(replies[0].Err); to != "" {
			if !ask {
				w.Reload()
			}
			// If the server it names cannot be had, the redirection is
			// the answer.
			prev, prevWait := replies, wait
			if run(to, false, ask) != nil {
				replies, wait = prev, prevWait
				return
			}
			if noScript(replies[0].Err) {
				run(to, true, ask)
			}
		}
	}
	// Sent again, as send does, while a copy fails in a way that may not
	// recur and tries are left.
	for try := 0; ; try++ {
		once(srv)
		err := replies[0].Err
		if err == nil || try >= w.retry.Max || !retryable(err) || ctx.Err() != nil {
			break
		}
		if !unsent(err) {
			doubt = true
		}
		if !sleep(ctx, backoff(w.retry, try+1)) {
			break
		}
	}
	for _, r := range replies {
		if r.Err != nil {
			w.Failed(r.Err)
			break
		}
	}
	acks = waitResult{want: w.wait}
	if acks.got, acks.err = int64Of(wait.Reply, wait.Err); acks.err != nil {
		w.Failed(acks.err)
		acks.err = errs.Op(nil, acks.err, "wait for %d replicas", w.wait.N)
	}
	if err := replies[0].Err; err != nil && !unsent(err) {
		doubt = true
	}
	return replies, acks, doubt, nil
}

// waitResult is the outcome of a WAIT.
type waitResult struct {
	want Replicas
	got  int64 // replicas that acknowledged
	err  error // the WAIT failed
}

// short returns, if fewer replicas acknowledged than were asked for, the
// error that says so; nil otherwise.
func (w waitResult) short() error {
	if w.got >= int64(w.want.N) {
		return nil
	}
	return errs.Op(errs.ErrNotReplicated, nil, "%d of %d replicas acknowledged the write within %v", w.got, w.want.N, w.want.Timeout)
}

// redirected returns, if err is a Cluster's redirection (ASK or MOVED), the
// address it names, and whether it is ASK.
func redirected(err error) (addr string, ask bool) {
	msg, ok := rclient.Reply(err)
	if !ok {
		return "", false
	}
	for _, p := range []string{"ASK ", "MOVED "} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			if _, a, ok := strings.Cut(rest, " "); ok {
				return a, p == "ASK "
			}
		}
	}
	return "", false
}

// extendWaited is extendAll followed by WAIT, on the server that owns the
// first lease's keys: every call must be for that server. A call that too few
// replicas acknowledged fails with an error matching ErrNotReplicated: the
// lease may be longer in the primary, but not in its replicas.
func (w *WaitNode) extendWaited(ctx context.Context, calls [][]ExtendItem) ([][]int64, []error) {
	codes, errs := make([][]int64, len(calls)), make([]error, len(calls))
	keys, args := make([][]string, len(calls)), make([][]any, len(calls))
	for i, items := range calls {
		keys[i], args[i] = extendArgs(items)
	}
	replies, acks, _, err := w.waited(ctx, calls[0][0].K.Tag, w.scripts[ScriptExtend], keys, args)
	for i, items := range calls {
		var v []int64
		cerr := err
		if replies != nil {
			if v, cerr = int64sOf(replies[i].Reply, replies[i].Err); cerr == nil {
				cerr = acks.err
			}
			if cerr == nil {
				cerr = acks.short()
			}
		}
		codes[i], errs[i] = w.extendResult(items, v, cerr)
	}
	return codes, errs
}

// ReplicaShortfall returns how many replicas w waits for and, for each
// primary of the node with fewer connected, its address and how many it has.
func (w *WaitNode) ReplicaShortfall(ctx context.Context) (int, map[string]int, error) {
	short := map[string]int{}
	addrs, err := w.c.Primaries(ctx)
	if err != nil {
		return w.wait.N, short, errs.Op(nil, err, "list the primaries")
	}
	for _, addr := range addrs {
		v, err := w.c.DoAt(ctx, addr, "info", "replication")
		info, _ := v.(string)
		if err != nil {
			return w.wait.N, short, errs.Op(nil, err, "INFO replication of %s", addr)
		}
		have := 0
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
				have, _ = strconv.Atoi(v)
			}
		}
		if have < w.wait.N {
			short[addr] = have
		}
	}
	return w.wait.N, short, nil
}
