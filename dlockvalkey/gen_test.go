package dlockvalkey_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/clientgen"
)

// TestGenerated: the package's files are what go generate makes of
// dlockrueidis's now.
func TestGenerated(t *testing.T) {
	want, err := clientgen.Generate("../dlockrueidis")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range want {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s is stale: run go generate in dlockvalkey", name)
		}
	}
}
