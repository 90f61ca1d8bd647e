package dlock_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestCheckRefusedClient: against a Redis that requires a password, Check
// fails when the Redis client has none or a wrong one, as every lock does,
// and says why; with the right one it passes, and so it does for the ACL
// users of docs/acl.md, which Redis serves but does not tell its
// maxmemory-policy (CONFIG GET refused, and PING too for the on-call user).
func TestCheckRefusedClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	password := rand.Text()
	srv := redistest.Start(t, "--requirepass", password)
	admin := srv.Client(t)
	for _, tc := range []struct{ name, password, want string }{
		{"no password", "", "NOAUTH"},
		{"wrong password", password + "x", "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: tc.password})
			t.Cleanup(func() { rdb.Close() })
			c := clientOn(t, rdb)
			// Redis answers a script call of a client without a password
			// with a protocol error, not NOAUTH: the error says what it means.
			if _, err := c.Mutex("m").TryLock(ctx); err == nil || !strings.Contains(err.Error(), "Redis refuses the client: no password or a wrong one") {
				t.Fatalf("TryLock with %s: %v; want an error saying Redis refuses the client", tc.name, err)
			} else {
				t.Logf("TryLock with %s: %v", tc.name, err)
			}
			err := c.Check(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check with %s: %v; want an error saying %s", tc.name, err, tc.want)
			}
			t.Logf("Check with %s: %v", tc.name, err)
		})
	}

	if err := clientOn(t, admin).Check(ctx); err != nil {
		t.Errorf("Check with the right password: %v", err)
	}
	for _, user := range []string{"dlock", "dlock-oncall"} {
		setUser(t, admin, aclCommand(t, user, "reset"), user, password)
		if err := clientOn(t, userClient(t, srv, user, password)).Check(ctx); err != nil {
			t.Errorf("Check as the ACL user %s of %s: %v; want nil: Redis serves it, and only will not tell the policy", user, aclDoc, err)
		}
	}
	refusedOnly(t, admin, "dlock") // CONFIG GET, and nothing more
}
