package gocronlock_test

import (
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		os.Exit(runWorker(role))
	}
	redistest.Main(m, 1) // the examples' server
}
