package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGenerated fails if a file under lua/gen differs from what lualink makes
// of the sources, or has no source.
func TestGenerated(t *testing.T) {
	const dir = "../protocol/lua"
	want, err := linkAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		got, err := os.ReadFile(filepath.Join(dir, genDir, name))
		if err != nil {
			t.Errorf("lua/gen/%s: %v; run go generate ./... from the module root", name, err)
			continue
		}
		if string(got) != want[name] {
			t.Errorf("lua/gen/%s is stale (first difference at line %d): it is not what internal/lualink makes of lua/%s and lua/lib.lua; run go generate ./... from the module root",
				name, firstDiff(string(got), want[name]), name)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, genDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := want[e.Name()]; !ok {
			t.Errorf("lua/gen/%s has no source lua/%s; run go generate ./... from the module root", e.Name(), e.Name())
		}
	}
}

// firstDiff returns the number of the first line where a and b differ.
func firstDiff(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}
