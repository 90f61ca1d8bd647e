package protocol

// What the Client asks beside its locks: its name record, Inspect, Locks and
// ForceRelease, and the checks of the deployment (Client.Check).

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/rclient"
)

// Announce sets the string key to value for ttl, or removes it if ttl is 0.
func (n *Node) Announce(ctx context.Context, key, value string, ttl time.Duration) error {
	var err error
	if ttl == 0 {
		_, err = n.c.Do(ctx, "del", key)
	} else {
		_, err = n.c.Do(ctx, "set", key, value, "px", ttl.Milliseconds())
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
	cmds := make([]rclient.Cmd, len(keys))
	for i, k := range keys {
		cmds[i].Args = []any{"get", k}
	}
	if err := n.c.Pipe(ctx, cmds); err != nil {
		n.Failed(err)
		return nil, errs.Op(nil, err, "read %d keys", len(keys))
	}
	for i, c := range cmds {
		v, err := c.Reply, c.Err
		switch {
		case err == nil:
			out[i], _ = v.(string)
		case wrongType(err):
		default:
			n.Failed(err)
			return nil, errs.Op(nil, err, "read %s", keys[i])
		}
	}
	return out, nil
}

// Inspect runs inspect.lua over keys, for the kind inspect.lua names code:
// read-only (EVALSHA_RO), so that a user allowed only to read keys may send
// it, and a replica runs it.
func (n *Node) Inspect(ctx context.Context, keys []string, code string, limit int) (State, error) {
	v, err := sliceOf(n.run(ctx, n.scripts[scriptInspect], true, keys, code, limit))
	if err != nil {
		kind := map[string]*Layout{"fair": MutexKind, "rw": RWReadKind, "sem": SemKind, "latch": LatchKind}[code]
		if kind == nil || len(keys) == 0 {
			return State{}, err
		}
		return State{}, n.foreignKeys(ctx, kind, keys[0], keys, err)
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
	if err := n.c.Scan(ctx, match, each); err != nil {
		return errs.Op(nil, err, "SCAN %s", match)
	}
	return nil
}

// Evict releases owner's hold on k, whose fence is fence (0 if unknown), as
// its own last release would, a freed lock going to the next waiter: for the
// kinds of release.lua a request of its own, evict.lua; for the others, a
// mode of their release script.
func (n *Node) Evict(ctx context.Context, k Keys, owner string, fence int64, ttl time.Duration) (int64, error) {
	switch {
	case k.Kind == SemKind:
		return n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
			owner, k.channelArg, string(semEvict), grantArg(ttl), 0, remnantTTLArg).Int64()
	case k.Kind.order != nil:
		return n.eval(ctx, n.scripts[scriptEvict], k.releaseKeys, "",
			owner, k.channelArg, grantArg(ttl), fence, k.Kind.order).Int64()
	}
	return n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
		owner, k.channelArg, releaseEvict.arg(), grantArg(ttl), 0, fence).Int64()
}

// MoveFence runs raise_fence.lua for no owner: k's fence becomes at least
// fence, whoever holds the lock.
func (n *Node) MoveFence(ctx context.Context, k Keys, fence int64, ttl time.Duration) error {
	return n.eval(ctx, n.scripts[ScriptRaiseFence], k.fenceKeys(), "", "", strconv.FormatInt(fence, 10), msArg(ttl), k.Kind.leaseIn.arg()).err
}

// EvictionPolicy reads Redis's maxmemory-policy; known is false if Redis
// serves this client but will not tell (CONFIG refused: an ACL, a renamed
// command, a managed service). Redis refusing the client itself (no password
// or a wrong one: NOAUTH, WRONGPASS) is an error, and so is a Redis it
// cannot reach.
func (n *Node) EvictionPolicy(ctx context.Context) (policy string, known bool, err error) {
	v, err := n.c.Do(ctx, "config", "get", "maxmemory-policy")
	switch {
	case isReply(err):
		// Refused: CONFIG GET alone, or every command of this client? A PING
		// tells; NOPERM means Redis knows the user, who may not PING.
		if _, perr := n.c.Do(ctx, "ping"); perr != nil && !noPerm(perr) {
			return "", false, errs.Op(nil, perr, "Redis refuses the client")
		}
		return "", false, nil
	case err != nil:
		return "", false, errs.Op(nil, err, "read maxmemory-policy")
	}
	policy, known = configValue(v, "maxmemory-policy")
	return policy, known, nil
}

// configValue finds name's value in CONFIG GET's reply: a map (RESP3) or
// an array of names and values (RESP2).
func configValue(v any, name string) (string, bool) {
	switch v := v.(type) {
	case map[any]any:
		s, ok := v[name].(string)
		return s, ok
	case map[string]any:
		s, ok := v[name].(string)
		return s, ok
	case map[string]string:
		s, ok := v[name]
		return s, ok
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			if k, _ := v[i].(string); k == name {
				s, ok := v[i+1].(string)
				return s, ok
			}
		}
	}
	return "", false
}

// Missing tries SPUBLISH (on channel, which has no subscriber) and, if
// subscribe is set, SSUBSCRIBE (on a connection of its own), which every
// wait needs: it returns those the server does not run (Redis before 7.0,
// or renamed away), and hidden if the ACL user may not send one, so that
// the server does not tell.
//
// Asked for all of it (subscribe, Client.Check), it also tries EVALSHA of a
// script no server knows, then EVALSHA_RO, which a server that runs scripts
// for the user answers NOSCRIPT: one that refuses both (an ACL without
// @scripting, or no Lua) is named as missing (MissingScripts). A Client's first
// use does not ask: its first script call meets the same refusal, whose
// error says the same (refused).
func (n *Node) Missing(ctx context.Context, channel string, subscribe bool) (missing []string, hidden bool, err error) {
	if missing, hidden, err = n.missingPubSub(ctx, channel, subscribe); err != nil || !subscribe {
		return missing, hidden, err
	}
	for _, cmd := range []string{"evalsha", "evalsha_ro"} {
		// A user refused EVALSHA but allowed EVALSHA_RO is one that reads
		// (docs/acl.md's on-call user): it runs the scripts it needs.
		_, err = n.c.Do(ctx, cmd, probeSHA, 0)
		switch {
		case err == nil, noScript(err):
			return missing, hidden, nil
		case noPerm(err), unknownCommand(err):
		default:
			return nil, false, errs.Op(nil, err, "%s", cmd)
		}
	}
	return append(missing, MissingScripts), hidden, nil
}

// probeSHA is the SHA1 of no script: EVALSHA of it runs nothing.
const probeSHA = "0000000000000000000000000000000000000000"

// MissingScripts is what Missing names when the server runs no script for
// the user.
const MissingScripts = "scripts (EVALSHA)"

// missingPubSub is Missing's SPUBLISH and SSUBSCRIBE.
func (n *Node) missingPubSub(ctx context.Context, channel string, subscribe bool) (missing []string, hidden bool, err error) {
	_, err = n.c.Do(ctx, "spublish", channel, "")
	switch {
	case err == nil:
	case noPerm(err):
		hidden = true
	case unknownCommand(err):
		missing = append(missing, "SPUBLISH")
	default:
		return nil, false, errs.Op(nil, err, "SPUBLISH %s", channel)
	}
	if !subscribe {
		return missing, hidden, nil
	}
	addr := ""
	if n.Cluster {
		if addr, err = n.ShardOf(ctx, channel); err != nil {
			return nil, false, errs.Op(nil, err, "find the server of %s", channel)
		}
	}
	s := n.c.Subscribe(ctx, addr, channel)
	defer s.Close()
	for {
		m, err := s.Receive(ctx, 5*time.Second)
		switch {
		case err == nil && m.Kind == "ssubscribe":
			return missing, hidden, nil
		case err == nil:
			continue
		case noPerm(err):
			return missing, true, nil
		case unknownCommand(err):
			return append(missing, "SSUBSCRIBE"), hidden, nil
		}
		return nil, false, errs.Op(nil, err, "SSUBSCRIBE %s", channel)
	}
}
