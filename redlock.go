package dlock

import (
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/quorum"

	"github.com/redis/go-redis/v9"
)

// NewRedLock returns a Client whose locks are held on a majority of nodes,
// N independent Redis deployments (N odd, at least 3): the Redlock
// algorithm, with fences, renewal and waiting. Losing a minority of the
// nodes (crashed, unreachable, paused) loses no lock and blocks no Lock.
//
// Only Mutex, and MultiLock (built on it), are supported; FairMutex,
// RWMutex, Semaphore and CountDownLatch return errors matching
// errors.ErrUnsupported from every call. WithWaitReplicas is not supported:
// the nodes are meant to be primaries without failover.
//
// A Mutex on a RedLock keeps the whole Mutex contract, with these
// differences, all in "RedLock" in the package documentation: an acquire is
// two round trips (every node at once, then the fence written back to the
// majority); a release does not hand the lock to the next waiter but wakes
// it, and it acquires by majority; each request to a node is bounded by
// WithNodeTimeout. Give each node's Redis client a ReadTimeout (or
// ContextTimeoutEnabled) that is short too: a request the Client no longer
// waits for holds a connection until go-redis gives it up, and Close waits
// for it.
//
// Each node is one primary: a *redis.Client, or a FailoverClient of its own
// Sentinel deployment. The nodes must be distinct: nil (or nil pointer, or
// zero go-redis client), duplicate (the same client twice, or two clients of
// the same address and database), Cluster or Ring nodes, too few nodes or an
// even number of them are errors. NewRedLock does not contact Redis.
func NewRedLock(nodes []redis.UniversalClient, opts ...Option) (*Client, error) {
	switch {
	case len(nodes) < 3:
		return nil, fmt.Errorf("dlock: NewRedLock: %d nodes: want an odd number, at least 3", len(nodes))
	case len(nodes)%2 == 0:
		return nil, fmt.Errorf("dlock: NewRedLock: %d nodes: want an odd number, so that two majorities always share a node", len(nodes))
	}
	type addr struct {
		network, addr string
		db            int
	}
	seen := make(map[addr]int)
	for i, rdb := range nodes {
		if why := unusable(rdb); why != "" {
			return nil, fmt.Errorf("dlock: NewRedLock: node %d is %s", i, why)
		}
		switch rdb.(type) {
		case *redis.ClusterClient, *redis.Ring:
			return nil, fmt.Errorf("dlock: NewRedLock: node %d is a %T: each node must be one primary (a *redis.Client, or a FailoverClient)", i, rdb)
		}
		for j := range i {
			if nodes[j] == rdb {
				return nil, fmt.Errorf("dlock: NewRedLock: nodes %d and %d are the same client", j, i)
			}
		}
		if c, ok := rdb.(*redis.Client); ok {
			o := c.Options()
			a := addr{o.Network, o.Addr, o.DB}
			if j, dup := seen[a]; dup {
				return nil, fmt.Errorf("dlock: NewRedLock: nodes %d and %d are both %s, database %d", j, i, o.Addr, o.DB)
			}
			seen[a] = i
		}
	}
	cfg, err := defaultConfig().with(opts, true)
	if err != nil {
		return nil, err
	}
	if cfg.wait.N > 0 {
		return nil, errs.Op(errors.ErrUnsupported, nil, "NewRedLock: WithWaitReplicas")
	}
	timeout := cfg.nodeTimeout
	if timeout == 0 {
		timeout = DefaultNodeTimeout
	}
	members := make([]protocol.Backend, 0, len(nodes))
	for i, rdb := range nodes {
		m, err := protocol.NewNode(rdb, cfg.autoPipeline, cfg.scripts)
		if err != nil {
			return nil, errs.Op(nil, err, "NewRedLock: node %d: WithAutoPipeline", i)
		}
		members = append(members, m)
	}
	closing := make(chan struct{})
	return newClient(quorum.New(members, timeout, closing), cfg, "NewRedLock", closing)
}
