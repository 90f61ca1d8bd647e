package protocol

import (
	"context"
	"strings"
	"time"
)

// A server's data epoch: what it says, in INFO, of whether it still has
// every key it had. Its process (run_id: a restart, with or without
// persistence, gives a new one), its replication history (master_replid: a
// promotion or a resync from another primary gives a new one), and its
// counts of the calls that drop keys wholesale (evictions, FLUSHALL,
// FLUSHDB, SWAPDB, DEBUG). Two readings that match bracket a stretch in
// which the server lost no key but by expiry or by a command naming it.
//
// It settles what a lock's keys cannot: a release sent again after its
// reply was lost that finds the lock no longer its owner's, and no trace of
// its first copy (the lock went on and its keys were rewritten or expired
// since), was freed by that first copy if the lease could not have lapsed
// yet and the server kept its data meanwhile.

// epochFields are the INFO fields an epoch is made of: any change in one is
// a change of epoch.
var epochFields = []string{
	"run_id:", "role:", "master_replid:", "evicted_keys:",
	"cmdstat_flushall:", "cmdstat_flushdb:", "cmdstat_swapdb:", "cmdstat_debug:",
}

// epochInfo is INFO of the sections that hold epochFields (Redis 7 takes
// several at once).
var epochInfo = []any{"info", "server", "replication", "stats", "commandstats"}

// dataEpoch is an epoch as a node read it: seen is when its reply came, so
// the server had that epoch then or before.
type dataEpoch struct {
	sig  string
	seen time.Time
}

// epochOf returns the epoch in INFO's reply, and false if the reply lacks
// the process's id (a server that is not Redis or Valkey). A call count is
// its "calls=" part alone: the rest changes with the time the calls took.
func epochOf(info string) (string, bool) {
	var b strings.Builder
	found := false
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimRight(line, "\r")
		for _, f := range epochFields {
			v, ok := strings.CutPrefix(line, f)
			if !ok {
				continue
			}
			if strings.HasPrefix(f, "cmdstat_") {
				v, _, _ = strings.Cut(v, ",")
			}
			found = found || f == "run_id:"
			b.WriteString(f)
			b.WriteString(v)
			b.WriteByte(';')
		}
	}
	return b.String(), found
}

// readEpoch reads the server's epoch. A Cluster's keys live on many
// servers: it has none.
func (n *Node) readEpoch(ctx context.Context) (*dataEpoch, bool) {
	if n.Cluster {
		return nil, false
	}
	v, err := n.c.Do(ctx, epochInfo...)
	info, ok := v.(string)
	if err != nil || !ok {
		return nil, false
	}
	sig, ok := epochOf(info)
	if !ok {
		return nil, false
	}
	return &dataEpoch{sig: sig, seen: time.Now()}, true
}

// watchEpoch reads the epoch and keeps it as the latest, unless it is the
// one kept already: the earliest reading of an epoch vouches for the
// longest stretch.
func (n *Node) watchEpoch(ctx context.Context) {
	e, ok := n.readEpoch(ctx)
	if !ok {
		return
	}
	for {
		cur := n.epoch.Load()
		if cur != nil && cur.sig == e.sig || n.epoch.CompareAndSwap(cur, e) {
			return
		}
	}
}

// keptData reports whether the server has kept its data since the time
// since: an epoch read before since matches one read now. A change makes
// the new epoch the latest, for the holds that begin after it.
func (n *Node) keptData(ctx context.Context, since time.Time) bool {
	before := n.epoch.Load()
	if before == nil || before.seen.After(since) {
		return false
	}
	now, ok := n.readEpoch(ctx)
	if !ok {
		return false
	}
	if now.sig != before.sig {
		n.epoch.CompareAndSwap(before, now)
		return false
	}
	return true
}

// WatchData has b read its server's data epoch, if it keeps one (a node
// that is not a Cluster's), so that KeptData can answer for what follows.
// It reads nothing for any other Backend.
func WatchData(ctx context.Context, b Backend) {
	if w, ok := b.(interface{ watchEpoch(context.Context) }); ok {
		w.watchEpoch(ctx)
	}
}

// KeptData reports whether b's server is known to have lost no key since
// the time since, but by expiry or by a command naming it: its data epoch
// read before since matches the one it reads now. It is false when that
// cannot be told (no epoch read before since, INFO refused, a Cluster, a
// RedLock).
func KeptData(ctx context.Context, b Backend, since time.Time) bool {
	if k, ok := b.(interface {
		keptData(context.Context, time.Time) bool
	}); ok {
		return k.keptData(ctx, since)
	}
	return false
}
