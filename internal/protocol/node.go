package protocol

// The node: one deployment's Backend. Each request names its
// script, builds the KEYS and ARGV that script's header (lua/*.lua) lists,
// and decodes the reply into Go values. Nothing here waits, retries or keeps
// state: the layers above decide what a reply means for a lease.

import (
	"sync/atomic"

	"github.com/dlock-go/dlock/internal/rclient"
)

// Node is a Redis deployment that holds locks: a server, a Sentinel's
// primary or a Cluster, reached through its Redis client (rclient). A
// Client runs on one node; a lock is on the server that owns its keys,
// which the Redis client finds for a Cluster.
type Node struct {
	c rclient.Client
	// ctxAware: c gives up a request at its context's deadline by itself.
	ctxAware bool
	// Cluster: keys of different hash slots may live on different servers,
	// so one script call must not span slots.
	Cluster bool
	// scripts are the scripts the node runs: defaultScripts, unless a
	// test's Client asked for others.
	scripts *ScriptSet
	// retry is how the node sends an acquire or a release again (send.go);
	// clock dates their deadlines.
	retry rclient.Retry
	clock serverClock
	// epoch is the latest reading of the server's data epoch (epoch.go).
	epoch atomic.Pointer[dataEpoch]
}

// NewNode returns the node that c reaches, running scripts.
func NewNode(c rclient.Client, scripts *ScriptSet) *Node {
	s := c.Settings()
	return &Node{c: c, ctxAware: s.CtxAware, Cluster: s.Topology != rclient.Single, scripts: scripts, retry: s.Retry}
}

// Settle waits for what the Redis client sends on behalf of requests that
// have returned.
func (n *Node) Settle() { n.c.Settle() }

// Traits: a node's requests give up at their context's end if its Redis
// client does so (ctxAware), and its waiters may take a lock on a grant
// message.
func (n *Node) Traits() Traits { return Traits{CtxAware: n.ctxAware, GrantWake: true} }

// A node answers every request, and runs every kind.
var (
	_ Semaphores = (*Node)(nil)
	_ Latches    = (*Node)(nil)
	_ Elections  = (*Node)(nil)
	_ Groups     = (*Node)(nil)
	_ Admin      = (*Node)(nil)
	_ Sharded    = (*Node)(nil)
	_ Probed     = (*Node)(nil)
	_ Replicated = (*WaitNode)(nil)
)
