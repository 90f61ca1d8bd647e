package dlock_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(workerEnv); role != "" {
		os.Exit(runWorker(role))
	}
	goleak.VerifyTestMain(m,
		// After failed dials go-redis probes the server from a goroutine that
		// sleeps a second between tries and sees a closed pool only then.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
