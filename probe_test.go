package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestServerWithoutShardedPubSub: on a server that does not run SPUBLISH
// (Redis before 7.0, or renamed away), Check and the first Lock fail with
// an error naming it, and the Lock writes nothing; one without SSUBSCRIBE
// fails Check. Found by trying the commands, not by the version.
func TestServerWithoutShardedPubSub(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, cmd := range []string{"SPUBLISH", "SSUBSCRIBE"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, "--rename-command", cmd, "")
			rdb := srv.Client(t)
			c := clientOn(t, rdb)
			err := c.Check(ctx)
			if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), cmd) {
				t.Fatalf("Check: %v, want ErrUnsupported naming %s", err, cmd)
			}
			if cmd != "SPUBLISH" {
				return
			}
			_, err = c.Mutex("m").Lock(ctx)
			if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), cmd) {
				t.Fatalf("Lock: %v, want ErrUnsupported naming %s", err, cmd)
			}
			if _, err := c.Mutex("m").TryLock(ctx); !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("a second TryLock: %v, want the same refusal", err)
			}
			if n := rdb.DBSize(ctx).Val(); n != 0 {
				t.Fatalf("%d keys written, want none", n)
			}
		})
	}
}

// TestProbeHiddenByACL: a user whose ACL forbids the probe's channel (but
// not the locks') cannot learn whether Redis runs SPUBLISH: Check passes
// and locks work, as they do.
func TestProbeHiddenByACL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	if err := admin.Do(ctx, "acl", "setuser", "locks", "on", ">pw", "~dlock:*", "&dlock:{*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	o := srv.Options()
	o.Username, o.Password = "locks", "pw"
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	c := clientOn(t, rdb)
	if err := c.Check(ctx); err != nil {
		t.Fatalf("Check: %v, want nil: the ACL hides the answer", err)
	}
	l, err := c.Mutex("m").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
