package sluice_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// Every exported name of the package is used by a test or an example
// somewhere in the module: a name nobody exercises is either untested or
// not needed.
func TestEveryExportedNameIsUsed(t *testing.T) {
	sources, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, src := range sources {
		if strings.HasSuffix(src, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, src, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	var tests strings.Builder
	filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, "_test.go") && path != "vocabulary_test.go" {
			b, _ := os.ReadFile(path)
			tests.Write(b)
		}
		return nil
	})
	own, _ := os.ReadFile("vocabulary_test.go")
	body := tests.String() + string(own[strings.Index(string(own), "// The vocabulary, used"):])
	for _, n := range names {
		if !regexp.MustCompile(`\b` + n + `\b`).MatchString(body) {
			t.Errorf("sluice.%s is used by no test or example", n)
		}
	}
	if len(names) < 50 {
		t.Fatalf("only %d exported names found", len(names))
	}
}

// The vocabulary, used: the names no other test reaches.
func TestVocabulary(t *testing.T) {
	for _, a := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.TokenBucket, sluice.LeakyBucket, sluice.GCRA, sluice.Calendar} {
		text, err := a.MarshalText()
		var back sluice.Algorithm
		if err != nil || back.UnmarshalText(text) != nil || back != a {
			t.Errorf("%v: MarshalText %q, %v; UnmarshalText gave %v", a, text, err, back)
		}
	}
	for _, m := range []sluice.FailMode{sluice.FailLocal, sluice.FailOpen, sluice.FailClosed} {
		if back, err := sluice.ParseFailMode(m.String()); err != nil || back != m {
			t.Errorf("ParseFailMode(%q) = %v, %v", m, back, err)
		}
	}
	if _, err := sluice.ParseFailMode("sideways"); err == nil {
		t.Error("ParseFailMode accepted sideways")
	}
	for _, m := range []sluice.MissingKey{sluice.MissingClientIP, sluice.MissingDeny, sluice.MissingSkip} {
		if back, err := sluice.ParseMissingKey(m.String()); err != nil || back != m {
			t.Errorf("ParseMissingKey(%q) = %v, %v", m, back, err)
		}
	}
	if _, err := sluice.ParseMissingKey("maybe"); err == nil {
		t.Error("ParseMissingKey accepted maybe")
	}
	short := sluice.Limit{Rate: 1, Period: sluice.MinPeriod / 2}
	if err := short.Validate(); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Errorf("a period under MinPeriod: %v", err)
	}
	if l, err := sluice.ParseLimit("calendar 10/minute"); err != nil || l.Period != sluice.CalendarMinute {
		t.Errorf("calendar 10/minute: %+v, %v", l, err)
	}

	late := sluice.Request{Key: "k", Limit: sluice.PerSecond(1), Cost: 1, Now: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}
	if err := late.Validate(); !errors.Is(err, sluice.ErrInvalidTime) || !sluice.IsInputError(err) {
		t.Errorf("a request in 2200: %v; want ErrInvalidTime, an input error", err)
	}
	if err := (&sluice.Request{Cost: 1}).CheckKeyAndCost(); !errors.Is(err, sluice.ErrEmptyKey) {
		t.Errorf("an empty key: %v", err)
	}
	if r := (sluice.Request{Key: "k", Force: true}); !r.Forced() {
		t.Error("a Force request is not Forced")
	}
	if r := (sluice.Request{Key: "k", Limit: sluice.Limit{CountAll: true}}); !r.Forced() {
		t.Error("a request of a count-all limit is not Forced")
	}

	closed, err := redisstore.Open("redis://127.0.0.1:1", redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	if _, err := closed.Take(context.Background(), sluice.Request{Key: "k", Limit: sluice.PerSecond(1), Cost: 1}); !errors.Is(err, sluice.ErrStoreClosed) {
		t.Errorf("a closed store: %v; want ErrStoreClosed", err)
	}

	taken := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := sluice.Request{Key: "k", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Second}, Cost: 7, Force: true}
	for _, tc := range []struct {
		charged, actual, cost int64
		force, refund, ok     bool
	}{
		{5, 5, 7, true, false, false},   // nothing to move: r as it was, less Force
		{5, 8, 3, true, false, true},    // 3 more, forced
		{5, 100, 10, true, false, true}, // past the capacity: the capacity
		{5, 2, 3, false, true, true},    // 3 back, as a refund of the take
		{5, -1, 5, false, true, true},   // a negative actual is 0
	} {
		r, ok := base.Settlement(taken, tc.charged, tc.actual)
		if ok != tc.ok || ok && (r.Cost != tc.cost || r.Force != tc.force || r.Refund.IsZero() == tc.refund) {
			t.Errorf("Settlement(%d, %d) = %+v, %v", tc.charged, tc.actual, r, ok)
		}
		if tc.refund && !r.Refund.Before(taken) {
			t.Errorf("Settlement(%d, %d): a refund of a take at %v, not before the take at %v", tc.charged, tc.actual, r.Refund, taken)
		}
	}
	// A bucket's refund names its take a little later (at most 100ms, a
	// tenth of an emission interval), so that what refilled while the take
	// travelled to the store is not counted against what it gives back.
	bucket := base
	bucket.Limit = sluice.PerSecond(10) // GCRA
	r, _ := bucket.Settlement(taken, 5, 2)
	if grace := r.Refund.Sub(taken); grace <= 0 || grace > 10*time.Millisecond {
		t.Errorf("a GCRA 10/s refund names its take %v after it; want within (0, 10ms]", grace)
	}
}

// The root package is what library users call: no runtime tricks
// (unsafe, reflect, weak, a noescape), none of the decision core's names,
// and a go doc a user reads in one sitting.
func TestRootFloor(t *testing.T) {
	sources, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range sources {
		if strings.HasSuffix(src, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), src, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			switch im.Path.Value {
			case `"unsafe"`, `"reflect"`, `"weak"`:
				t.Errorf("%s imports %s", src, im.Path.Value)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && id.Name == "noescape" {
				t.Errorf("%s names noescape", src)
			}
			return true
		})
	}
	if testing.Short() {
		return
	}
	out, err := exec.Command("go", "doc", "-all", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), "\n"); n > 450 {
		t.Errorf("go doc -all . is %d lines; want at most 450", n)
	}
	for _, name := range []string{"Guard", "GuardOptions", "Verdict", "Outcome", "Health", "InProcess", "Slots", "CheckSlot", "Closest", "NewGuard", "Check"} {
		if regexp.MustCompile(`(?m)^(type|func) ` + name + `\b`).Match(out) {
			t.Errorf("the root exports %s, the decision core's", name)
		}
	}
}
