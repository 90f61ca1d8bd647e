package dlocktest_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) {
	// Examples cannot skip: with no server installed and the skip asked
	// for, none of the package's tests or examples runs.
	if os.Getenv(dlocktest.SkipEnv) == "1" && !serverInstalled() {
		fmt.Println("dlocktest: no server installed and", dlocktest.SkipEnv+"=1: skipping the package")
		os.Exit(0)
	}
	redistest.Main(m, 0) // examples start their own servers; goleak after the run
}

func serverInstalled() bool {
	name := os.Getenv(dlocktest.ServerEnv)
	if name == "" {
		name = "redis-server"
	}
	_, err := exec.LookPath(name)
	return err == nil
}
