package protocol

import (
	"testing"

	"github.com/dlock-go/dlock/internal/rclient/goredis"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// testNode returns a Node with the embedded scripts on a server of the
// test's own, and a go-redis client of that server.
func testNode(t *testing.T) (*Node, *redis.Client) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	c, err := goredis.New(rdb, false)
	if err != nil {
		t.Fatal(err)
	}
	return NewNode(c, &DefaultScripts), rdb
}
