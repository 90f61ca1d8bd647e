package dlock_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// header is what a script's header says it takes: the name of each KEYS and
// ARGV entry, in order, and how many of each every request must pass: the
// entries after them say "(... only)" or "(optional...)", for only some
// requests pass them (an Election's, a lock hash's, a take that queues).
type header struct {
	keys, args       []string
	minKeys, minArgs int
}

var headerLine = regexp.MustCompile(`^-- (KEYS|ARGV)\[(\d+)\]\s+(\w+):( \((?:[^)]* only|optional[^)]*)\))?`)

// readHeaders reads the header of every script under internal/protocol/lua/
// but the libraries (lib_*.lua).
func readHeaders(t *testing.T) map[string]header {
	t.Helper()
	files, err := filepath.Glob("internal/protocol/lua/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	hs := map[string]header{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".lua")
		if strings.HasPrefix(name, "lib_") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var h header
		for _, line := range strings.Split(string(src), "\n") {
			m := headerLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			i, _ := strconv.Atoi(m[2])
			list, least := &h.keys, &h.minKeys
			if m[1] == "ARGV" {
				list, least = &h.args, &h.minArgs
			}
			if i != len(*list)+1 {
				t.Errorf("%s: %s[%d] out of order", f, m[1], i)
			}
			*list = append(*list, m[3])
			if m[4] == "" {
				if *least < len(*list)-1 {
					t.Errorf("%s: %s[%d] follows an entry only some kinds pass", f, m[1], i)
				}
				*least = len(*list)
			}
		}
		hs[name] = h
	}
	return hs
}

// scriptCall is one script request as the client sent it.
type scriptCall struct {
	sha        string
	keys, args []string
}

// scriptRecorder is a go-redis hook that records every script request.
type scriptRecorder struct {
	mu    sync.Mutex
	calls []scriptCall
}

func (r *scriptRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *scriptRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			r.record(cmd)
		}
		return next(ctx, cmds)
	}
}
func (r *scriptRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(cmd)
		return next(ctx, cmd)
	}
}

func (r *scriptRecorder) record(cmd redis.Cmder) {
	a := cmd.Args()
	var sha string
	switch cmd.Name() {
	case "evalsha", "evalsha_ro":
		sha = fmt.Sprint(a[1])
	case "eval", "eval_ro":
		sum := sha1.Sum([]byte(fmt.Sprint(a[1])))
		sha = hex.EncodeToString(sum[:])
	default:
		return
	}
	n, _ := strconv.Atoi(fmt.Sprint(a[2]))
	c := scriptCall{sha: sha}
	for _, v := range a[3 : 3+n] {
		c.keys = append(c.keys, fmt.Sprint(v))
	}
	for _, v := range a[3+n:] {
		c.args = append(c.args, fmt.Sprint(v))
	}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

// suffixes are the key suffixes a header's key name may stand for, after the
// lock's tag: the key that carries a lease is the lock hash or a sorted set
// of holders, by kind.
func suffixes(name string) []string {
	switch name {
	case "lock", "semaphore", "count":
		return []string{""}
	case "lease":
		return []string{"", ":readers", ":holders"}
	}
	return []string{":" + name}
}

// TestScriptHeaders: every script request the Client sends has the KEYS and
// ARGV its script's header lists, each key the one the header names: the
// key lists of every kind match their scripts.
func TestScriptHeaders(t *testing.T) {
	t.Parallel()
	redistest.Full(t, "a RedLock's nodes")
	headers := readHeaders(t)
	var rec scriptRecorder
	c, rdb, _ := newClient(t, dlock.WithTTL(time.Second))
	rdb.AddHook(&rec)
	other := clientOn(t, rdb)
	exerciseScripts(t, c, other)
	exerciseElection(t, c, other)
	// With a result TTL, Do reads the result before it runs fn.
	if _, _, err := c.Group("grp", dlock.WithResultTTL(time.Second)).Do(context.Background(), "k", func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	// raise_fence runs on the nodes of a RedLock.
	_, nodes := redLockNodes(t, 3)
	for _, n := range nodes {
		n.AddHook(&rec)
	}
	rl := redLockOn(t, nodes, dlock.WithNodeTimeout(time.Second)) // headers, not timeouts, are what this checks
	ctx := context.Background()
	// inspect, for every kind, and ForceRelease's scripts, of a Mutex and
	// of an Election (whose leader record is a key more).
	for _, kind := range dlock.Kinds {
		if _, err := c.Inspect(ctx, kind, "m"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Mutex("m").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Election("e").Campaign(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	for kind, name := range map[dlock.Kind]string{dlock.KindMutex: "m", dlock.KindElection: "e"} {
		if ev, err := c.ForceRelease(ctx, kind, name); err != nil || len(ev.Evicted) != 1 {
			t.Fatalf("ForceRelease %s %q: %+v, %v", kind, name, ev, err)
		}
	}
	for range 3 {
		if err := rl.Mutex("headers").Do(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// The release of an owner whose acquire's reply was lost, which records
	// it until that request's deadline.
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	loadScripts(t, srv.Client(t))
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = prdb.Close() })
	prdb.AddHook(&rec)
	pc := clientOn(t, prdb)
	for _, op := range []string{"acquire", "rw_acquire", "sem_acquire"} {
		in := dropOnce(t, p, op)
		var l *dlock.Lease
		var err error
		switch op {
		case "acquire":
			l, err = pc.Mutex("void").Lock(ctx)
		case "rw_acquire":
			l, err = pc.RWMutex("void").Lock(ctx)
		default:
			l, err = pc.Semaphore("void", 1).Acquire(ctx, 1)
		}
		checkHit(t, in)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// And a waiter's giving up after its acquire's reply was lost: its
	// Client's Close waits for the unregistration.
	l, err := pc.Mutex("void").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := dlock.New(prdb)
	if err != nil {
		t.Fatal(err)
	}
	in := dropOnce(t, p, "acquire")
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if _, err := waiter.Mutex("void").Lock(wctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("a waiter that gave up: %v", err)
	}
	cancel()
	checkHit(t, in)
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	rec.mu.Lock()
	calls := rec.calls
	rec.mu.Unlock()
	seen := map[string]bool{}
	for _, call := range calls {
		var name string
		for n := range headers {
			if dlock.ScriptHash(n) == call.sha {
				name = n
			}
		}
		if name == "" {
			t.Errorf("a script request of no script under internal/protocol/lua/: %v", call)
			continue
		}
		seen[name] = true
		h := headers[name]
		switch name {
		case "extend":
			checkExtend(t, h, call)
			continue
		case "inspect":
			checkInspect(t, h, call)
			continue
		}
		if len(call.keys) < h.minKeys || len(call.keys) > len(h.keys) || len(call.args) < h.minArgs || len(call.args) > len(h.args) {
			t.Errorf("%s: sent %d KEYS and %d ARGV, its header lists %d (%v) and %d (%v), of which %d and %d for every request",
				name, len(call.keys), len(call.args), len(h.keys), h.keys, len(h.args), h.args, h.minKeys, h.minArgs)
			continue
		}
		if len(call.keys) == len(h.keys) {
			seen[name+" (all KEYS)"] = true
		}
		if len(call.args) == len(h.args) {
			seen[name+" (all ARGV)"] = true
		}
		tag := call.keys[0][:strings.IndexByte(call.keys[0], '}')+1]
		for i, k := range call.keys {
			ok := false
			for _, s := range suffixes(h.keys[i]) {
				ok = ok || k == tag+s
			}
			if !ok {
				t.Errorf("%s: KEYS[%d] is %q, its header names %s", name, i+1, k, h.keys[i])
			}
		}
	}
	for name, h := range headers {
		if !seen[name] {
			t.Errorf("no request ran %s.lua", name)
		}
		if len(h.keys) > h.minKeys && !seen[name+" (all KEYS)"] {
			t.Errorf("no request ran %s.lua with every KEYS its header lists", name)
		}
		if len(h.args) > h.minArgs && !seen[name+" (all ARGV)"] {
			t.Errorf("no request ran %s.lua with every ARGV its header lists", name)
		}
	}
}

// checkExtend checks an extend.lua request: groups of six ARGV, each
// naming how many KEYS its lease has, which add up to the KEYS sent, and
// each group's keys sharing one tag, an extends hash last for a RedLock
// member's lock (type "r") alone: the other kinds keep the generation in a
// key that exists while the lease runs.
func checkExtend(t *testing.T, h header, call scriptCall) {
	t.Helper()
	if len(call.args)%6 != 0 || len(call.args) == 0 {
		t.Errorf("extend: %d ARGV, not groups of six", len(call.args))
		return
	}
	k := 0
	for g := 0; g < len(call.args); g += 6 {
		n, err := strconv.Atoi(call.args[g+5])
		state, red := call.args[g] == "s", call.args[g] == "r"
		if err != nil || n < 1 || (!state && n < 2) || k+n > len(call.keys) {
			t.Errorf("extend: group %d names %q keys; %d sent", g/6, call.args[g+5], len(call.keys))
			return
		}
		if _, err := strconv.ParseInt(call.args[g+4], 10, 64); err != nil {
			t.Errorf("extend: group %d's generation %q is not an integer", g/6, call.args[g+4])
		}
		tag := call.keys[k][:strings.IndexByte(call.keys[k], '}')+1]
		for _, key := range call.keys[k : k+n] {
			if !strings.HasPrefix(key, tag) {
				t.Errorf("extend: group %d mixes locks: %v", g/6, call.keys[k:k+n])
			}
		}
		if last := call.keys[k+n-1]; red != strings.HasSuffix(last, "}:extends") {
			t.Errorf("extend: group %d (type %q) ends with %q", g/6, call.args[g], last)
		}
		k += n
	}
	if k != len(call.keys) {
		t.Errorf("extend: groups name %d keys, %d sent", k, len(call.keys))
	}
	_ = h
}

// inspectKeys are the suffixes of the keys inspect.lua takes, after the
// lock's tag, by the kind its header names.
var inspectKeys = map[string][]string{
	"fair":  {"", ":waiters", ":alive"},
	"rw":    {"", ":fence", ":waiters", ":alive", ":readers", ":fences", ":writers"},
	"sem":   {"", ":fence", ":waiters", ":alive", ":holders", ":total"},
	"latch": {""},
}

// checkInspect checks an inspect.lua request: the ARGV its header lists,
// and the keys its header lists for the kind ARGV[1] names.
func checkInspect(t *testing.T, h header, call scriptCall) {
	t.Helper()
	if len(call.args) != len(h.args) {
		t.Errorf("inspect: %d ARGV, its header lists %d (%v)", len(call.args), len(h.args), h.args)
		return
	}
	want, ok := inspectKeys[call.args[0]]
	if !ok || len(call.keys) != len(want) {
		t.Errorf("inspect %q: KEYS %v", call.args[0], call.keys)
		return
	}
	tag := call.keys[0][:strings.IndexByte(call.keys[0], '}')+1]
	for i, k := range call.keys {
		if k != tag+want[i] {
			t.Errorf("inspect %q: KEYS[%d] is %q, want %q", call.args[0], i+1, k, tag+want[i])
		}
	}
}

// exerciseScripts runs every script of the package, in every mode the
// client uses, through c (and other, which contends): take, re-enter (for
// the kinds that re-enter), give back one hold, read the TTL, extend, renew,
// register and give up as a waiter, give back the last hold; the
// Semaphore's own modes; the latch's.
func exerciseScripts(t *testing.T, c, other *dlock.Client) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	type lockFunc func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error)
	mutex := func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.Mutex("m").Lock(ctx) }
	fair := func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.FairMutex("f").Lock(ctx) }
	write := func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("r").Lock(ctx) }
	read := func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("r").RLock(ctx) }
	sem := func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
		return c.Semaphore("s", 2).Acquire(ctx, 1)
	}
	sem2 := func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
		return c.Semaphore("s", 2).Acquire(ctx, 2)
	}
	// For each: the lock, and an acquisition that must wait while it is held.
	for _, pair := range [][2]lockFunc{{mutex, mutex}, {fair, fair}, {write, write}, {read, write}, {sem, sem2}} {
		lock, contend := pair[0], pair[1]
		l, err := lock(ctx, c)
		must(err)
		lctx, cancel := l.Context(ctx)
		inner, err := lock(lctx, c) // a re-entry, or for a Semaphore another permit
		must(err)
		must(inner.Unlock(ctx))
		cancel()
		_, err = l.TTL(ctx)
		must(err)
		must(l.Extend(ctx, time.Second))
		time.Sleep(700 * time.Millisecond) // a renewal, a third of the TTL in
		wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		if _, err := contend(wctx, other); err == nil {
			t.Fatal("a second holder")
		}
		wcancel()
		must(l.Unlock(ctx))
	}
	s := c.Semaphore("s", 1)
	must(s.SetPermits(ctx, 2))
	_, err := s.Available(ctx)
	must(err)
	_, err = s.Delete(ctx)
	must(err)
	latch := c.CountDownLatch("l")
	_, err = latch.TrySetCount(ctx, 1)
	must(err)
	must(latch.CountDown(ctx))
	_, err = latch.Delete(ctx)
	must(err)
}
