package dlock

import (
	"errors"
	"fmt"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/quorum"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/dlock-go/dlock/internal/rclient/goredis"

	"github.com/redis/go-redis/v9"
)

// NewRedLock returns a Client whose locks are held on a majority of nodes,
// independent Redis primaries (an odd number, at least 3), so that losing a
// minority of them loses no lock and blocks no Lock. Only Mutex and MultiLock
// are supported (the other primitives' calls return errors.ErrUnsupported);
// waiters are not served in order, and WithWaitReplicas is an error.
//
// Each node is one primary: a *redis.Client, plain or Sentinel's. Nil,
// duplicate (the same client, or the same address and database), Cluster and
// Ring nodes are errors. Give each a short ReadTimeout: Close waits for
// requests that a node has not answered. NewRedLock does not contact Redis.
// See docs/failure-model.md for what a majority promises.
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
	members := make([]rclient.Client, len(nodes))
	for i, rdb := range nodes {
		if members[i], err = goredis.New(rdb, cfg.autoPipeline); err != nil {
			return nil, errs.Op(nil, err, "NewRedLock: node %d: WithAutoPipeline", i)
		}
	}
	return newRedLockOn(members, cfg)
}

// newRedLockOn returns a RedLock Client on the Redis clients of its
// members, configured by cfg.
func newRedLockOn(nodes []rclient.Client, cfg config) (*Client, error) {
	if cfg.wait.N > 0 {
		return nil, errs.Op(errors.ErrUnsupported, nil, "NewRedLock: WithWaitReplicas")
	}
	if cfg.noScripts {
		// Its members' Mutex (red_acquire.lua) has no plain form yet.
		return nil, errs.Op(errors.ErrUnsupported, nil, "NewRedLock: WithoutScripts")
	}
	timeout := cfg.nodeTimeout
	if timeout == 0 {
		timeout = DefaultNodeTimeout
	}
	members := make([]quorum.Member, len(nodes))
	for i, rc := range nodes {
		members[i] = protocol.NewNode(rc, cfg.scripts)
	}
	closing := make(chan struct{})
	return newClient(quorum.New(members, timeout, closing), cfg, "NewRedLock", closing)
}
