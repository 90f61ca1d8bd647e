package dlock

// The engine layer: taking leases on locks of every kind, waiting for them
// in line, re-entering them, and giving them back. It asks the protocol
// layer for each round trip, the renewer for each lease's life and the
// notifier for wake-ups; the primitives above are thin layers on it. This
// file holds what the primitives of one Client share.

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/renew"
)

// engine is what the primitives of one Client share.
type engine struct {
	backend protocol.Backend
	traits  protocol.Traits // backend's
	// The backend's capabilities beyond the requests every deployment
	// answers (protocol.Backend); nil where it lacks them (a RedLock).
	admin     protocol.Admin
	sems      protocol.Semaphores
	latches   protocol.Latches
	elections protocol.Elections
	ren       *renew.Renewer
	note      *notify.Notifier
	bg        *background
	hooks     *Hooks // nil if none
	log       *slog.Logger
	prefix    string
	closing   chan struct{} // closed when Close starts

	id string // random, unique per Client: the stem of every owner id
	// own is ":" and id: a lock's wake-up channel stem followed by it is
	// where this Client's waiters are told of grants.
	own string
	// listen is what follows a lock's wake-up channel stem in the channel
	// this Client's waiters listen on: own, or nothing where a release
	// wakes every waiter on the stem (Traits.WakeAll).
	listen string
	seq    atomic.Uint64 // makes each acquisition's owner id unique

	// usable: Redis runs what every wait needs (firstUse); unfit, if not
	// nil, says what it lacks. usableMu serializes the first uses.
	usable   atomic.Bool
	usableMu sync.Mutex
	unfit    error
	reached  atomic.Bool // a request has had its answer from Redis

	totals  semTotals // of the Semaphores it acquired, as Redis holds them
	flights flights   // its Groups' calls in flight

	// name is the Client's (WithClientName), kept in Redis at nameKey while
	// the Client is in use (announce); announced is when it was last sent
	// (Unix ns; 0: never, or the write failed).
	name, nameKey string
	announced     atomic.Int64
	recordEvery   time.Duration // recordEvery, or a test's
}

// Times of a Client's record in Redis (WithClientName).
const (
	recordTTL   = time.Minute
	recordEvery = recordTTL / 3
)

// announce writes the Client's record (its name) in the background if it is
// due (dueRecord): every attempt to acquire, a waiter's included, calls it;
// renewal rounds carry it themselves (leaseEvents.Record). So the record
// lives while the Client holds or waits for anything, and costs one write
// per recordEvery, nothing per acquisition.
func (e *engine) announce() {
	if rec := e.dueRecord(); rec != nil {
		e.recorded(rec)
	}
}

// dueRecord returns the Client's record to write if the last write was sent
// recordEvery ago or more (or failed), and counts it as sent now; nil
// otherwise.
func (e *engine) dueRecord() *protocol.Record {
	now := time.Now().UnixNano()
	last := e.announced.Load()
	if now-last < int64(e.recordEvery) || !e.announced.CompareAndSwap(last, now) {
		return nil
	}
	return &protocol.Record{Key: e.nameKey, Value: e.name, TTL: recordTTL}
}

// recorded finishes the write of rec, from dueRecord: one that went nowhere
// yet is sent in the background; one that failed is due again at once.
func (e *engine) recorded(rec *protocol.Record) {
	if !rec.Sent {
		e.bg.goDo(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rec.Err, rec.Sent = e.backend.Announce(ctx, rec.Key, rec.Value, rec.TTL), true
			e.recorded(rec)
		})
		return
	}
	if rec.Err != nil {
		e.announced.Store(0)
		e.log.Debug("dlock: writing the Client's name failed", "key", rec.Key, "err", rec.Err)
	}
}

// check looks at what Redis runs (commands), its eviction policy and, with
// WithWaitReplicas, its replicas (Client.Check). A Check that succeeds is a
// first contact (heard), as a successful acquire is.
func (e *engine) check(ctx context.Context) error {
	if err := e.commands(ctx, true); err != nil {
		return err
	}
	err := e.checkData(ctx)
	e.heard(err)
	return err
}

// commands returns an error naming the commands every wait needs that
// Redis does not run (found by trying them: SPUBLISH and, if subscribe is
// set, SSUBSCRIBE), with those the backend's requests are made of
// (protocol.Probed: scripts, if subscribe is set; a Client made with
// WithoutScripts, SET … IFEQ and DELIFEQ); it logs, and returns nil, if an
// ACL hides the answer.
func (e *engine) commands(ctx context.Context, subscribe bool) error {
	p, ok := e.backend.(protocol.Probed)
	if !ok {
		return nil
	}
	missing, hidden, err := p.Missing(ctx, e.prefix+"probe", subscribe)
	switch {
	case err != nil:
		return errs.Op(nil, err, "check")
	case slices.Contains(missing, protocol.MissingScripts):
		return errs.Op(errors.ErrUnsupported, nil, "check: Redis runs no script for this user (an ACL without @scripting, or a server without Lua): make the Client with dlock.WithoutScripts(), which sends none (it needs Valkey 9.0 or later), or allow the user @scripting")
	case len(missing) > 0 && e.traits.NoScripts:
		return errs.Op(errors.ErrUnsupported, nil, "check: Redis does not run %s, which a Client made with dlock.WithoutScripts() needs: SET … IFEQ and DELIFEQ (Valkey 9.0 or later), SPUBLISH and SSUBSCRIBE", strings.Join(missing, " or "))
	case len(missing) > 0:
		return errs.Op(errors.ErrUnsupported, nil, "check: Redis does not run %s, which dlock needs: Redis 7.0 or later, or Valkey 7.2 or later, with neither renamed", strings.Join(missing, " or "))
	case hidden:
		e.log.Info("dlock: the ACL user may not send SPUBLISH or SSUBSCRIBE on the probe channel, so Redis cannot tell whether it runs them; dlock needs both", "channel", e.prefix+"probe")
	}
	return nil
}

// checkData looks at Redis's eviction policy and replicas, and reads the
// data epoch a release sent again may need (releasedLoss).
func (e *engine) checkData(ctx context.Context) error {
	protocol.WatchData(ctx, e.backend)
	policy, known, err := e.backend.EvictionPolicy(ctx)
	switch {
	case err != nil:
		return errs.Op(nil, err, "check")
	case !known:
		e.log.Info("dlock: cannot read Redis's maxmemory-policy; it must be noeviction")
	case policy != "noeviction":
		return errs.Op(nil, nil, "check: Redis's maxmemory-policy is %q: it may evict locks and fence keys; set it to noeviction", policy)
	}
	r, ok := e.backend.(protocol.Replicated)
	if !ok {
		return nil
	}
	want, short, err := r.ReplicaShortfall(ctx)
	if err != nil {
		return errs.Op(nil, err, "check")
	}
	for addr, have := range short {
		return errs.Op(nil, nil, "check: WithWaitReplicas asks for %d replicas, but the primary %s has %d connected: every acquire will fail", want, addr, have)
	}
	return nil
}

// firstUse, the first time a call that waits or acquires is made, tries
// whether Redis runs what every wait needs (commands, without the extra
// connection SSUBSCRIBE takes): a Redis that does not fails that call, and
// every later one, with an error that says what it lacks. Then it looks at
// the rest of check in the background, and logs what it finds. A probe that
// fails on the way (Redis unreachable) is tried again by the next call.
func (e *engine) firstUse(ctx context.Context) error {
	if e.usable.Load() {
		return nil
	}
	e.usableMu.Lock()
	defer e.usableMu.Unlock()
	switch {
	case e.usable.Load():
		return nil
	case e.unfit != nil:
		return e.unfit
	}
	// The probe's answer is no first contact (heard), nor is the background
	// checkData's: whether the call rides out a failure of its own request
	// depends on the calls before it, not on a probe made for it or racing it.
	if err := e.commands(ctx, false); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			e.unfit = err
			return err
		}
		return nil // the call's own request meets what failed, or rides it out
	}
	e.usable.Store(true)
	// The id starts every owner id of this Client, as dlock ls shows them:
	// logged, it tells the people on call which process holds.
	e.log.Info("dlock: client in use", "id", e.id, "name", e.name)
	e.bg.goDo(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.checkData(ctx); err != nil {
			e.log.Warn("dlock: Redis may not keep the locks' promises", "err", err)
		}
	})
	return nil
}

// unsupported is the error of a call the backend cannot make: op on the
// lock name, if not "".
func (e *engine) unsupported(op, name string) error {
	what := e.traits.What
	if what == "" {
		what = "this deployment"
	}
	if name != "" {
		return errs.Op(errors.ErrUnsupported, nil, "%s %q on %s", op, name, what)
	}
	return errs.Op(errors.ErrUnsupported, nil, "%s on %s", op, what)
}

// newOwner returns an owner id unique across Clients and acquisitions.
func (e *engine) newOwner() string {
	var buf [64]byte
	b := append(append(buf[:0], e.id...), ':')
	return string(strconv.AppendUint(b, e.seq.Add(1), 10))
}

// closed reports whether Close has started.
func (e *engine) closed() bool {
	select {
	case <-e.closing:
		return true
	default:
		return false
	}
}
