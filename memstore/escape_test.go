package memstore_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"strings"
	"testing"
)

// TakeInto keeps neither of its pointers, as its doc promises: a caller's
// Request and Decision stay on the caller's stack. The compiler's own
// analysis of TakeInto says that d does not escape and that req does not
// either, only what it points to (the key's bytes and the zone).
func TestTakeIntoKeepsNeitherPointer(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the package to read its escape analysis")
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "memstore.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := map[string]string{} // parameter: its position as the compiler writes it
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "TakeInto" && fn.Recv != nil {
			for _, p := range fn.Type.Params.List {
				for _, n := range p.Names {
					pos := fset.Position(n.Pos())
					at[n.Name] = fmt.Sprintf("memstore.go:%d:%d: ", pos.Line, pos.Column)
				}
			}
		}
	}
	if at["req"] == "" || at["d"] == "" {
		t.Fatalf("no TakeInto(ctx, req, d) in memstore.go: %v", at)
	}
	out, err := exec.Command("go", "build", "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	said := map[string]string{}
	for line := range strings.SplitSeq(string(out), "\n") {
		for name, pos := range at {
			if i := strings.Index(line, pos); i >= 0 {
				said[name] = line[i+len(pos):]
			}
		}
	}
	if got := said["d"]; got != "d does not escape" {
		t.Errorf("escape analysis of TakeInto's d: %q, want %q", got, "d does not escape")
	}
	if got := said["req"]; got != "req does not escape" && got != "leaking param content: req" {
		t.Errorf("escape analysis of TakeInto's req: %q, want it not to escape (its content may)", got)
	}
}
