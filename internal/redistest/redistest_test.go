package redistest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRequirepass proves that a server started with --requirepass comes up,
// that a client from its Options authenticates and that one without the
// password is refused.
func TestRequirepass(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--requirepass", "secret")
	if srv.Password != "secret" {
		t.Fatalf("Password = %q, want %q", srv.Password, "secret")
	}
	ctx := context.Background()
	rdb := srv.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET with the password: %v", err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET with the password = %q, %v; want v", got, err)
	}

	anon := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer anon.Close()
	err := anon.Get(ctx, "k").Err()
	if err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("GET without the password: %v, want a NOAUTH error", err)
	}
}
