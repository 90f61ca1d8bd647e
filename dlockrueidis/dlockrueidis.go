// Package dlockrueidis runs dlock on rueidis (github.com/redis/rueidis):
// every primitive of package dlock, on a single server, a Sentinel's primary
// or a Cluster, with the same promises as on go-redis. Make the rueidis
// client as usual and hand it to New; the Client it returns is a
// *dlock.Client like any other, and lockhttp, gocronlock, otel and dlocktest
// take it as they take one made by dlock.New.
//
//	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	if err != nil {
//		return err
//	}
//	defer rc.Close()
//	c, err := dlockrueidis.New(rc)
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//
// The module is released with the core, and requires its exact version.
package dlockrueidis

import (
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/clienthook"
	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/redis/rueidis"
)

// New returns a Client on c, as dlock.New does on a go-redis client. A nil c
// is an error. WithAutoPipeline does not apply: rueidis pipelines the
// commands of concurrent callers by itself.
func New(c rueidis.Client, opts ...dlock.Option) (*dlock.Client, error) {
	if c == nil {
		return nil, errors.New("dlockrueidis: New: nil rueidis client")
	}
	return build(clienthook.New(newConn(c), anys(opts)...))
}

// NewRedLock returns a RedLock Client on nodes, as dlock.NewRedLock does:
// each node one primary (a single server's or a Sentinel's client, not a
// Cluster's), an odd number of them, at least 3.
func NewRedLock(nodes []rueidis.Client, opts ...dlock.Option) (*dlock.Client, error) {
	rcs := make([]rclient.Client, len(nodes))
	for i, n := range nodes {
		switch {
		case n == nil:
			return nil, fmt.Errorf("dlockrueidis: NewRedLock: node %d is nil", i)
		case n.Mode() == rueidis.ClientModeCluster:
			return nil, fmt.Errorf("dlockrueidis: NewRedLock: node %d is a Cluster's client: each node must be one primary", i)
		}
		for j := range i {
			if nodes[j] == n {
				return nil, fmt.Errorf("dlockrueidis: NewRedLock: nodes %d and %d are the same client", j, i)
			}
		}
		rcs[i] = newConn(n)
	}
	return build(clienthook.NewRedLock(rcs, anys(opts)...))
}

func build(c any, err error) (*dlock.Client, error) {
	if err != nil {
		return nil, err
	}
	return c.(*dlock.Client), nil
}

func anys(opts []dlock.Option) []any {
	out := make([]any, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}
