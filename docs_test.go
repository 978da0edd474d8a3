package sluice_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// blocks returns the fenced code blocks of lang in the README and docs/,
// each with the file it came from.
func blocks(t *testing.T, lang string) (out [][2]string) {
	files, _ := filepath.Glob("docs/*.md")
	files = append(files, "README.md")
	fence := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fence.FindAllStringSubmatch(string(data), -1) {
			out = append(out, [2]string{f, m[1]})
		}
	}
	return out
}

// Every YAML example in the README and docs/ is a valid policy file, or a
// valid part of one (a section with nothing to limit on its own).
func TestDocsYAMLExamplesAreValid(t *testing.T) {
	for _, b := range blocks(t, "yaml") {
		_, err := config.Parse(b[0], []byte(b[1]))
		var ps config.Problems
		if err != nil && !(errors.As(err, &ps) && len(ps) == 1 && strings.Contains(ps[0].Msg, "nothing to limit")) {
			t.Errorf("%s: an example that does not validate:\n%s\n%v", b[0], b[1], err)
		}
	}
}

// Every Go example in the README and docs/ compiles, with the few names
// the prose around it gives (a store, a context, a mux, a resolver,
// limits) declared.
func TestDocsGoExamplesCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	imports := map[string]string{
		"sluice": "github.com/sluicehq/sluice", "memstore": "github.com/sluicehq/sluice/memstore",
		"redisstore": "github.com/sluicehq/sluice/redisstore", "httplimit": "github.com/sluicehq/sluice/httplimit",
		"clientip": "github.com/sluicehq/sluice/clientip", "httpretry": "github.com/sluicehq/sluice/httpretry",
		"grpclimit": "github.com/sluicehq/sluice/grpclimit", "time": "time", "http": "net/http", "context": "context", "log": "log",
		"grpc": "google.golang.org/grpc", "guard": "github.com/sluicehq/sluice/guard",
		"pgstore": "github.com/sluicehq/sluice/pgstore",
		"pgx":     "github.com/jackc/pgx/v5", "pgxpool": "github.com/jackc/pgx/v5/pgxpool",
	}
	given := map[string]string{ // what the prose around the examples names
		"ctx": "context.Context", "store": "sluice.Store", "mux": "*http.ServeMux", "ip": "*clientip.Resolver",
		"loginLimit": "sluice.Limit", "apiLimit": "sluice.Limit", "searchLimit": "sluice.Limit", "trial": "sluice.Limit",
		"limitsOfCustomer": "func(string) []sluice.Limit",
		"addr":             "string", "creds": "grpc.DialOption",
		"pool": "*pgxpool.Pool", "accountID": "string", "projectName": "string", "errPlanLimit": "error",
	}
	var src strings.Builder
	used := map[string]bool{"context": true, "sluice": true, "http": true, "clientip": true}
	for i, b := range blocks(t, "go") {
		// Declared names, so that each can be marked used.
		body := "package p\nfunc f() {\n" + b[1] + "\n}"
		f, err := parser.ParseFile(token.NewFileSet(), b[0], body, 0)
		if err != nil {
			t.Errorf("%s: example %d does not parse: %v\n%s", b[0], i, err, b[1])
			continue
		}
		var defined []string
		ast.Inspect(f, func(n ast.Node) bool {
			if a, ok := n.(*ast.AssignStmt); ok && a.Tok == token.DEFINE {
				for _, l := range a.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name != "_" {
						defined = append(defined, id.Name)
					}
				}
			}
			if s, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := s.X.(*ast.Ident); ok && imports[id.Name] != "" {
					used[id.Name] = true
				}
			}
			return true
		})
		src.WriteString("\n// " + b[0] + "\nfunc example" + string(rune('A'+i)) + "() {\n")
		var declared []string
		for name, typ := range given {
			if strings.Contains(b[1], name) && !slices.Contains(defined, name) {
				src.WriteString("\tvar " + name + " " + typ + "\n")
				declared = append(declared, name)
				if pkg, _, ok := strings.Cut(strings.TrimLeft(typ, "*[]"), "."); ok && imports[pkg] != "" {
					used[pkg] = true
				}
			}
		}
		src.WriteString(b[1])
		for _, d := range defined {
			src.WriteString("\n\t_ = " + d)
		}
		for _, name := range declared {
			src.WriteString("\n\t_ = " + name)
		}
		src.WriteString("\n}\n")
	}
	var names []string
	for name := range used {
		names = append(names, name)
	}
	sort.Strings(names)
	var head strings.Builder
	head.WriteString("package main\n\nimport (\n")
	for _, n := range names {
		head.WriteString("\t\"" + imports[n] + "\"\n")
	}
	head.WriteString(")\n\nfunc main() {}\n")
	dir, err := os.MkdirTemp(".", "docexamples")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(head.String()+src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+dir).CombinedOutput(); err != nil {
		t.Fatalf("the docs' Go examples do not compile:\n%s\n%s", out, head.String()+src.String())
	}
}

// Every figure of the README's benchmark table is one of
// docs/performance.md's, where its command and machine are: the two never
// disagree.
func TestReadmeFiguresAreInPerformanceDoc(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	perf, err := os.ReadFile("docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	table := regexp.MustCompile(`(?m)^\| (memory store|Redis|Envoy|`+"`net/http`"+`).*$`).FindAllString(string(readme), -1)
	if len(table) < 5 {
		t.Fatalf("the README's benchmark table has %d rows", len(table))
	}
	figure := regexp.MustCompile(`\d+(\.\d+)?(–\d+(\.\d+)?)?( ?(ns|×|bytes))`)
	for _, row := range table {
		for _, f := range figure.FindAllString(row, -1) {
			num := regexp.MustCompile(`^[\d.–]+`).FindString(f)
			if !strings.Contains(string(perf), num) {
				t.Errorf("README figure %q (%s) is not in docs/performance.md", f, row)
			}
		}
	}
}
