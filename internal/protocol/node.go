package protocol

// The node: one deployment's Backend. Each request names its
// script, builds the KEYS and ARGV that script's header (lua/*.lua) lists,
// and decodes the reply into Go values. Nothing here waits, retries or keeps
// state: the layers above decide what a reply means for a lease.

import (
	"context"
	"sync/atomic"

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
func (n *Node) Traits() Traits { return Traits{CtxAware: n.ctxAware, GrantWake: true} }

// A node answers every request, and runs every kind.
var (
	_ Semaphores = (*Node)(nil)
	_ Latches    = (*Node)(nil)
	_ Elections  = (*Node)(nil)
	_ Admin      = (*Node)(nil)
	_ Sharded    = (*Node)(nil)
	_ Replicated = (*WaitNode)(nil)
)
