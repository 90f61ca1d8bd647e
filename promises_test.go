package dlock_test

import (
	"crypto/tls"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/clienthook"
	"github.com/dlock-go/dlock/internal/promises"
	"github.com/dlock-go/dlock/internal/rclient/goredis"
	"github.com/redis/go-redis/v9"
)

// TestPromises runs the promise-level suite on go-redis, with Clients built
// as a client module builds them (clienthook, on rclient).
func TestPromises(t *testing.T) {
	t.Parallel() // servers of its own
	promises.Run(t, dialGoRedis)
}

// TestPromisesWithoutScripts runs the promises of WithoutScripts on
// go-redis (Valkey 9.0 or later; it skips elsewhere).
func TestPromisesWithoutScripts(t *testing.T) {
	t.Parallel() // servers of its own
	promises.RunWithoutScripts(t, dialGoRedis)
}

// dialGoRedis is the promise-level suite's Dial of go-redis.
func dialGoRedis(t *testing.T, addr, password string, opts ...dlock.Option) *dlock.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: password})
	t.Cleanup(func() { _ = rdb.Close() })
	rc, err := goredis.New(rdb, false)
	if err != nil {
		t.Fatal(err)
	}
	anys := make([]any, len(opts))
	for i, o := range opts {
		anys[i] = o
	}
	c, err := clienthook.New(rc, anys...)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*dlock.Client)
}

// TestPromisesCluster runs the Cluster's promises on go-redis.
func TestPromisesCluster(t *testing.T) {
	t.Parallel() // servers of its own
	promises.RunCluster(t, func(t *testing.T, addrs []string, opts ...dlock.Option) *dlock.Client {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := dlock.New(rdb, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// TestPromisesTLS runs the TLS promises on go-redis.
func TestPromisesTLS(t *testing.T) {
	t.Parallel() // servers of its own
	promises.RunTLS(t, func(t *testing.T, addr string, cfg *tls.Config, opts ...dlock.Option) *dlock.Client {
		rdb := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: cfg})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := dlock.New(rdb, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// TestPromisesSentinel runs the Sentinel promises on go-redis.
func TestPromisesSentinel(t *testing.T) {
	t.Parallel() // servers of its own
	promises.RunSentinel(t, func(t *testing.T, addrs []string, master string, opts ...dlock.Option) *dlock.Client {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs})
		t.Cleanup(func() { _ = rdb.Close() })
		c, err := dlock.New(rdb, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}
