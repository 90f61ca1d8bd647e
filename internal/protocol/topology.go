package protocol

// Where a lock lives: the shard of a channel, the placement of a key, the
// slot map reloaded after a failure; and the wake-up message a release
// publishes.

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/rclient"
)

// ShardOf returns the address of the server that serves channel's slot on a
// Cluster, where a shard channel must be subscribed; "" on any other node.
func (n *Node) ShardOf(ctx context.Context, channel string) (string, error) {
	if n.c.Settings().Topology != rclient.Cluster {
		return "", nil
	}
	addr, err := n.c.ServerOf(ctx, channel)
	if err != nil {
		n.Failed(err)
		return "", err
	}
	return addr, nil
}

// Places returns where channel is to be subscribed: on the server that
// serves it, which must confirm it.
func (n *Node) Places(ctx context.Context, channel string) (Placement, error) {
	addr, err := n.ShardOf(ctx, channel)
	if err != nil {
		return Placement{}, err
	}
	return Placement{At: []Place{{addr, n.c}}, Need: 1}, nil
}

// Failed notes a request to the node that failed. On a Cluster, a failure
// that a changed topology explains (a server unreachable or gone, the cluster
// down, a slot moved) makes the Redis client load the slot map again, in the
// background: go-redis does so by itself only on a MOVED reply or every minute,
// and a dead primary sends no MOVED, so without this requests would go on
// dialling it after its replica was promoted.
func (n *Node) Failed(err error) {
	if Transient(err) {
		n.Reload()
	}
}

// Reload makes the Redis client load a Cluster's slot map again, in the
// background.
func (n *Node) Reload() { n.c.Reload() }

// Group returns the hash slot of key on a Cluster node, where one script
// call must not span slots; 0 on any other.
func (n *Node) Group(key string) int {
	if !n.Cluster {
		return 0
	}
	return slot(key)
}

// Wake is a wake-up message, parsed: the owner id of the waiter it is for,
// and for a grant (st_grant in lua/lib_state.lua, grant in lua/lib_hash.lua)
// its fence, grant lease and the server time it was made at, in µs; fence
// is 0 for any other message.
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
