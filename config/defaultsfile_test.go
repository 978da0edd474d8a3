package config_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// The defaults, written into a file as they are printed, change nothing:
// each is the value a file that leaves the field out gets.
func TestDefaultsAreWhatParseGives(t *testing.T) {
	const policy = "policies:\n  - name: api\n    limit: 10/s\n"
	out := string(config.Defaults())
	for _, want := range []string{"store:\n  type: memory\n  timeout: 1s\n  fail_mode: local\n", "max_bytes: 384MiB", "read_header_timeout: 5s", "proxy_timeout: 5m\n", "# every policy:\n#   key: client_ip\n#   cost: 1\n#   fail_mode: local\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the defaults lack %q:\n%s", want, out)
		}
	}
	bare, err := config.Parse("bare.yaml", []byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	// The policy's defaults, uncommented, go into its entry.
	var pol strings.Builder
	for _, line := range strings.Split(out[strings.Index(out, "# every policy:"):], "\n")[1:] {
		if rest, ok := strings.CutPrefix(line, "#   "); ok {
			pol.WriteString("    " + rest + "\n")
		}
	}
	full, err := config.Parse("full.yaml", []byte(out+policy+pol.String()))
	if err != nil {
		t.Fatalf("the printed defaults do not parse: %v\n%s", err, out)
	}
	full.Store.FailModeSet = false // written out, it is set; its value is the default's
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"store", full.Store, bare.Store}, {"listeners", full.Listeners, bare.Listeners}, {"envoy", full.Envoy, bare.Envoy},
		{"metrics", full.Metrics, bare.Metrics}, {"policy", full.Policies[0].Key, bare.Policies[0].Key},
		{"policy fail mode", full.Policies[0].FailMode, bare.Policies[0].FailMode}, {"policy cost", full.Policies[0].Cost, bare.Policies[0].Cost},
	} {
		if !reflect.DeepEqual(f.got, f.want) {
			t.Errorf("%s: the printed defaults give %+v; a file without them %+v", f.name, f.got, f.want)
		}
	}
}
