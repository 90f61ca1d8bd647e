package dlock_test

import (
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(workerEnv); role != "" {
		os.Exit(runWorker(role))
	}
	redistest.Main(m, 5) // five servers for the RedLock example
}
