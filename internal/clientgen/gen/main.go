// Command gen writes dlockvalkey's files from dlockrueidis's (package
// clientgen). Run by go generate in dlockvalkey.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/dlock-go/dlock/internal/clientgen"
)

func main() {
	files, err := clientgen.Generate(filepath.Join("..", "dlockrueidis"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientgen:", err)
		os.Exit(1)
	}
	for name, b := range files {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "clientgen:", err)
			os.Exit(1)
		}
	}
}
