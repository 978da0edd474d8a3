package rotated_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/rotated"
)

// A file's steps through a rotation: each Read answers the file as it is,
// or the last good value with the failure that kept it; the first failure
// of a run is logged, and its end, and nothing else; each failed Read is
// counted.
func TestFileThroughARotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if _, err := rotated.Open(path, "token file", rotated.Text, nil); err == nil || !strings.Contains(err.Error(), "token file") {
		t.Fatalf("Open of a missing file: %v; want an error naming it", err)
	}
	os.WriteFile(path, []byte("first\n"), 0o600)
	var logged logbuf.Buffer
	f, err := rotated.Open(path, "token file", rotated.Text, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		write   string // "-": remove the file
		want    string
		failing bool
	}{
		{"", "first", false}, // unchanged: not written
		{"  second \n", "second", false},
		{"\n", "second", true}, // emptied: the last good one
		{"-", "second", true},  // removed
		{"third", "third", false},
		{"third", "third", false},
	} {
		switch step.write {
		case "":
		case "-":
			os.Remove(path)
		default:
			os.WriteFile(path, []byte(step.write), 0o600)
		}
		got, err := f.Read()
		if got != step.want || (err != nil) != step.failing || f.Last() != step.want {
			t.Fatalf("after writing %q: Read %q, %v; Last %q; want %q, failing %v", step.write, got, err, f.Last(), step.want, step.failing)
		}
	}
	if f.Failures() != 2 {
		t.Fatalf("%d failed reads counted; want 2", f.Failures())
	}
	if log := logged.String(); strings.Count(log, "level=WARN") != 1 || strings.Count(log, "token file read again") != 1 || strings.Count(log, "\n") != 2 {
		t.Fatalf("want one warning and one line of its end; logged:\n%s", log)
	}
}
