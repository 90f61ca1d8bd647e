package miniredis_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) {
	redistest.Main(m, 0) // goleak after the run
}
