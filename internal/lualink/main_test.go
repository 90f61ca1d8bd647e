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
			t.Errorf("lua/gen/%s is stale (first difference at line %d): it is not what internal/lualink makes of lua/%s and the libraries it names; run go generate ./... from the module root",
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

// TestLink: a script gets the functions it calls of the libraries it names,
// and those they call, in the libraries' order, each in front of the first
// section that needs it; a script or library that would run another
// function than meant, or none, is refused.
func TestLink(t *testing.T) {
	libs := map[string]string{
		"lib_a.lua": "-- a\n\nlocal function one()\n  return 1\nend\n\nlocal function two()\n  return one() + 1\nend\n\nlocal function unused()\nend\n",
		"lib_b.lua": "-- b\n\nlocal function three()\n  return two() + 1\nend\n",
		"lib_c.lua": "-- c\n\nlocal function early()\n  return three()\nend\n",
	}
	for _, tc := range []struct {
		name, src, want, err string
		libs                 map[string]string // libs if nil
	}{
		{name: "only what it calls",
			src:  "-- libraries: lib_a.lua lib_b.lua\nreturn two()",
			want: "local function one()\n  return 1\nend\n\nlocal function two()\n  return one() + 1\nend\n\n-- libraries: lib_a.lua lib_b.lua\nreturn two()\n"},
		{name: "by section",
			src:  "-- libraries: lib_a.lua lib_b.lua\nif x then return one() end\n" + libMark + "\nreturn three()",
			want: "local function one()\n  return 1\nend\n\n-- libraries: lib_a.lua lib_b.lua\nif x then return one() end\nlocal function two()\n  return one() + 1\nend\n\nlocal function three()\n  return two() + 1\nend\n\nreturn three()\n"},
		{name: "no libraries", src: "return 1", want: "return 1\n"},
		{name: "a library not named", src: "-- libraries: lib_a.lua\nreturn three()", err: "calls three of lib_b.lua"},
		{name: "no line", src: "return one()", err: "calls one of lib_a.lua"},
		{name: "libraries out of order", src: "-- libraries: lib_b.lua lib_a.lua\nreturn three()", err: "lib_b.lua's three calls two"},
		{name: "a library missing its own", src: "-- libraries: lib_c.lua\nreturn early()", err: "lib_c.lua's early calls three"},
		{name: "what is not linked may call what is not", src: "-- libraries: lib_a.lua lib_c.lua\nreturn one()",
			want: "local function one()\n  return 1\nend\n\n-- libraries: lib_a.lua lib_c.lua\nreturn one()\n"},
		{name: "no such library", src: "-- libraries: lib_a.lua lib_x.lua\nreturn one()", err: "no library lib_x.lua"},
		{name: "defined twice", src: "-- libraries: lib_a.lua\nreturn one()", err: "both define two",
			libs: map[string]string{"lib_a.lua": libs["lib_a.lua"], "lib_d.lua": "local function two()\nend\n"}},
		{name: "twice", src: "-- libraries: lib_a.lua lib_a.lua\nreturn one()", err: "named twice"},
		{name: "shadowed", src: "-- libraries: lib_a.lua\nlocal function one()\n  return 0\nend\nreturn two()", err: "defines one"},
		{name: "its own of an unnamed library's name", src: "-- libraries: lib_a.lua\nlocal function three()\n  return 0\nend\nreturn three() + one()",
			want: "local function one()\n  return 1\nend\n\n-- libraries: lib_a.lua\nlocal function three()\n  return 0\nend\nreturn three() + one()\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := tc.libs
			if ls == nil {
				ls = libs
			}
			uses, err := libraries(tc.src, ls)
			var got string
			if err == nil {
				got, err = link(uses, ls, tc.src)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("linked:\n%q\nwant:\n%q", got, tc.want)
			}
		})
	}
}
