package algorithm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algorithm"
	"github.com/sluicehq/sluice/api/shardv1"
	"github.com/sluicehq/sluice/sim"
)

// The lists that name algorithms outside package algorithm must agree
// with algorithm.Rows: adding an algorithm is its Go file, its Lua file,
// its Row and its docs, and these tests name whatever else is missing.

// rowNames returns the Rows' names in code order and their codes by name.
func rowNames(t *testing.T) ([]string, map[string]sluice.Algorithm) {
	t.Helper()
	var names []string
	codes := map[string]sluice.Algorithm{}
	for _, r := range algorithm.Rows() {
		names = append(names, r.Name)
		codes[r.Name] = r.Algorithm
	}
	return names, codes
}

// sameSet reports the names one list has and the other lacks.
func sameSet(t *testing.T, what string, got, want []string) {
	t.Helper()
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("%s lists %q, which algorithm.Rows lacks", what, g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

func TestTableRoot(t *testing.T) {
	rows := algorithm.Rows()
	for i, r := range rows {
		if r.Algorithm != sluice.Algorithm(i+1) {
			t.Errorf("row %d has code %d: codes run from 1 without a gap", i, r.Algorithm)
		}
		if r.Name != r.Algorithm.String() {
			t.Errorf("code %d: row %q, sluice %q", r.Algorithm, r.Name, r.Algorithm.String())
		}
		if a, err := sluice.ParseAlgorithm(r.Name); err != nil || a != r.Algorithm {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", r.Name, a, err, r.Algorithm)
		}
		if r.Burst != r.Algorithm.HasBurst() {
			t.Errorf("%s: row Burst %v, HasBurst %v", r.Name, r.Burst, r.Algorithm.HasBurst())
		}
		if r.Algorithm != sluice.SlidingLog {
			words := 0
			for i, w := range r.State {
				if w != "" {
					words = i + 1
				}
			}
			if words != algorithm.Words(r.Algorithm) || r.State[0] == "" {
				t.Errorf("%s: State %q, Words %d", r.Name, r.State, algorithm.Words(r.Algorithm))
			}
		}
	}
	// Every code the root names is a row.
	for c := 1; c < 256; c++ {
		a := sluice.Algorithm(c)
		if s := a.String(); s != "Algorithm("+strconv.Itoa(c)+")" && c > len(rows) {
			t.Errorf("sluice names code %d %q, which algorithm.Rows lacks", c, s)
		}
	}
	names, _ := rowNames(t)
	// ParseAlgorithm's error names every algorithm.
	_, err := sluice.ParseAlgorithm("")
	m := regexp.MustCompile(`\(want (.*)\)`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("ParseAlgorithm's error %q names no algorithms", err)
	}
	sameSet(t, "ParseAlgorithm's error", strings.FieldsFunc(strings.ReplaceAll(m[1], " or ", ","), func(r rune) bool { return r == ',' || r == ' ' }), names)
}

// luaHelpers are the scripts in redisstore/scripts that are no algorithm.
var luaHelpers = []string{"arith", "prelude", "slots", "take"}

func TestTableLua(t *testing.T) {
	names, codes := rowNames(t)
	dir := filepath.Join("..", "redisstore", "scripts")
	files, err := filepath.Glob(filepath.Join(dir, "*.lua"))
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	var algs []string
	for _, f := range files {
		if n := strings.TrimSuffix(filepath.Base(f), ".lua"); !slices.Contains(luaHelpers, n) {
			algs = append(algs, n)
		}
	}
	sameSet(t, "redisstore/scripts/<algorithm>.lua", algs, names)

	take, err := os.ReadFile(filepath.Join(dir, "take.lua"))
	if err != nil {
		t.Fatal(err)
	}
	// ALGS maps a code to the O(1) algorithm's function; LOG is the
	// sliding log's code.
	m := regexp.MustCompile(`local ALGS = \{([^}]*)\}`).FindSubmatch(take)
	if m == nil {
		t.Fatal("take.lua has no ALGS table")
	}
	var inLua []string
	for _, e := range regexp.MustCompile(`\[(\d+)\] = (\w+)`).FindAllStringSubmatch(string(m[1]), -1) {
		inLua = append(inLua, e[2])
		if c, _ := strconv.Atoi(e[1]); codes[e[2]] != sluice.Algorithm(c) {
			t.Errorf("take.lua's ALGS maps %s to %s; algorithm.Rows: %d", e[1], e[2], codes[e[2]])
		}
	}
	log := regexp.MustCompile(`local LOG = (\d+)`).FindSubmatch(take)
	if log == nil || string(log[1]) != strconv.Itoa(int(sluice.SlidingLog)) {
		t.Errorf("take.lua's LOG is not %d", sluice.SlidingLog)
	}
	sameSet(t, "take.lua's ALGS and LOG", append(inLua, "sliding_log"), names)
	// Every code a script compares alg with is a row's.
	for _, f := range files {
		b, _ := os.ReadFile(f)
		checkCodes(t, filepath.Base(f), regexp.MustCompile(`\balg\s*[=~]=\s*(\d+)`).FindAllStringSubmatch(string(b), -1))
	}
}

// checkCodes fails for every match whose group 1 holds a code no row has.
func checkCodes(t *testing.T, file string, ms [][]string) {
	t.Helper()
	n := len(algorithm.Rows())
	for _, m := range ms {
		for f := range strings.FieldsFuncSeq(m[1], func(r rune) bool { return r == ',' || r == ' ' }) {
			if c, err := strconv.Atoi(f); err != nil || c < 1 || c > n {
				t.Errorf("%s: %q compares alg with %q, which no row of algorithm.Rows has", file, m[0], f)
			}
		}
	}
}

func TestTableSQL(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "pgstore", "migrations", "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	var status []string // the codes the status function decides
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sql := string(b)
		checkCodes(t, filepath.Base(f), regexp.MustCompile(`\balg\s*=\s*(\d+)`).FindAllStringSubmatch(sql, -1))
		checkCodes(t, filepath.Base(f), regexp.MustCompile(`\balg\s+IN\s*\(([\d,\s]+)\)`).FindAllStringSubmatch(sql, -1))
		for _, c := range regexp.MustCompile(`(?s)CASE alg\b(.*?)END CASE`).FindAllStringSubmatch(sql, -1) {
			whens := regexp.MustCompile(`(?m)^\s*WHEN ([\d, ]+) THEN`).FindAllStringSubmatch(c[1], -1)
			checkCodes(t, filepath.Base(f), whens)
			if strings.Contains(sql[:strings.Index(sql, c[0])], ".status(alg int") && status == nil {
				for _, w := range whens {
					status = append(status, strings.FieldsFunc(w[1], func(r rune) bool { return r == ',' || r == ' ' })...)
				}
			}
		}
	}
	// The status function decides every O(1) algorithm; the sliding log
	// has functions of its own.
	var want []string
	for _, r := range algorithm.Rows() {
		if r.Algorithm != sluice.SlidingLog {
			want = append(want, strconv.Itoa(int(r.Algorithm)))
		}
	}
	sameSet(t, "pgstore's status function (codes)", status, want)
}

func TestTableSchema(t *testing.T) {
	names, _ := rowNames(t)
	b, err := os.ReadFile(filepath.Join("..", "config", "schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if a, ok := v["algorithm"].(map[string]any); ok {
				if e, ok := a["enum"].([]any); ok {
					n++
					var got []string
					for _, x := range e {
						got = append(got, x.(string))
					}
					sameSet(t, "config/schema.json "+path+".algorithm", got, names)
				}
			}
			for k, x := range v {
				walk(path+"."+k, x)
			}
		case []any:
			for i, x := range v {
				walk(path+"["+strconv.Itoa(i)+"]", x)
			}
		}
	}
	walk("", doc)
	if n != 2 { // a policy's limit and an Envoy domain's rate_limit
		t.Errorf("config/schema.json has %d algorithm enums, want 2", n)
	}
}

// The shard wire carries a limit's algorithm as its code, a uint32, not
// an enum of its own: there is no second list to keep. Should one appear,
// its values must be the rows'.
func TestTableShardProto(t *testing.T) {
	names, codes := rowNames(t)
	fd := shardv1.File_shard_proto
	f := (&shardv1.Batch{}).ProtoReflect().Descriptor().Fields().ByName("algorithms")
	if f == nil {
		t.Fatal("shard Batch has no algorithms field")
	}
	if f.Kind() != protoreflect.Uint32Kind {
		t.Errorf("shard Batch.algorithms is %v, not the code as uint32", f.Kind())
	}
	for i := range fd.Enums().Len() {
		e := fd.Enums().Get(i)
		if !strings.Contains(strings.ToLower(string(e.Name())), "algorithm") {
			continue
		}
		var got []string
		for j := range e.Values().Len() {
			v := e.Values().Get(j)
			name := strings.ToLower(strings.TrimPrefix(string(v.Name()), "ALGORITHM_"))
			if v.Number() == 0 {
				continue
			}
			got = append(got, name)
			if codes[name] != sluice.Algorithm(v.Number()) {
				t.Errorf("shard enum %s: %s = %d; algorithm.Rows: %d", e.Name(), v.Name(), v.Number(), codes[name])
			}
		}
		sameSet(t, "shard enum "+string(e.Name()), got, names)
	}
}

// simExcluded are the algorithms sim.All leaves out, and why.
var simExcluded = map[sluice.Algorithm]string{
	// A calendar limit's Period is a calendar unit (a minute to a month),
	// which the simulator's traffic of seconds does not validate for; a
	// caller names it in Config.Algorithms with such a limit.
	sluice.Calendar: "periods are calendar units",
}

func TestTableSim(t *testing.T) {
	var got, want []string
	for _, a := range sim.All {
		got = append(got, a.String())
	}
	for _, r := range algorithm.Rows() {
		if _, ok := simExcluded[r.Algorithm]; !ok {
			want = append(want, r.Name)
		}
	}
	sameSet(t, "sim.All", got, want)
}

func TestTableDocs(t *testing.T) {
	names, codes := rowNames(t)
	b, err := os.ReadFile(filepath.Join("..", "docs", "algorithms.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The table at the top: one row per algorithm, its state per key.
	top, _, _ := strings.Cut(string(b), "\n## ")
	var got []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(\\w+)` \\|(.*)$").FindAllStringSubmatch(top, -1) {
		got = append(got, m[1])
		cells := strings.Split(m[2], "|")
		a, ok := codes[m[1]]
		if !ok || a == sluice.SlidingLog || len(cells) < 4 {
			continue
		}
		if w := strconv.Itoa(algorithm.Words(a)) + " words"; !strings.HasPrefix(strings.TrimSpace(cells[3]), w) {
			t.Errorf("docs/algorithms.md: %s keeps %q per key; Words says %s", m[1], strings.TrimSpace(cells[3]), w)
		}
	}
	sameSet(t, "docs/algorithms.md's table", got, names)
	if !slices.Equal(got, names) {
		t.Errorf("docs/algorithms.md's table lists %q; in code order: %q", got, names)
	}
}
