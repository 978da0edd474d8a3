package config

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
)

// Defaults returns every default of the policy file as YAML: the value a
// field takes when a file leaves it out, from the same table Parse decodes
// over (`sluice config defaults` prints it). Its sections are a valid
// file's; each policy's defaults follow as comments, since a policy needs
// a name and a limit of its own.
func Defaults() []byte {
	var b strings.Builder
	b.WriteString("# sluice's defaults: a field a policy file leaves out takes its value here.\n")
	sections := []struct {
		name string
		v    any
	}{
		{"store", defaults.store}, {"listeners", defaults.listeners}, {"envoy", defaults.envoy},
		{"metrics", defaults.metrics}, {"ui", defaults.ui}, {"forward_auth", defaults.forwardAuth},
		{"reservations", defaults.reserve},
	}
	for _, s := range sections {
		b.WriteString(s.name + ":\n")
		writeFields(&b, "  ", reflect.ValueOf(s.v))
	}
	b.WriteString("# every policy:\n")
	writeFields(&b, "#   ", reflect.ValueOf(defaults.policy))
	return []byte(b.String())
}

// writeFields writes the fields of struct v that are set, one a line, by
// their yaml names.
func writeFields(b *strings.Builder, indent string, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		_, mode := fv.Interface().(sluice.FailMode) // its zero is local, a value
		if name == "" || name == "-" || fv.IsZero() && !mode {
			continue
		}
		if mode, ok := modeOnly[name]; ok {
			// A field of another mode is an error in this one: a comment.
			fmt.Fprintf(b, "%s# %s: %s   (mode %s)\n", indent, name, defaultValue(fv), mode)
			continue
		}
		fmt.Fprintf(b, "%s%s: %s\n", indent, name, defaultValue(fv))
	}
}

// modeOnly are the store's fields of one mode, and the mode.
var modeOnly = map[string]string{"sync_interval": "local-sync", "member_interval": "shard", "peer_listen": "shard"}

// defaultValue is v as a policy file writes it.
func defaultValue(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return shortDuration(x)
	case sluice.FailMode:
		return x.String()
	case byteSize:
		for _, u := range []string{"GiB", "MiB", "KiB"} {
			scale := map[string]int64{"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10}[u]
			if int64(x)%scale == 0 {
				return fmt.Sprintf("%d%s", int64(x)/scale, u)
			}
		}
		return fmt.Sprint(int64(x))
	case string:
		out, _ := yaml.Marshal(x)
		return strings.TrimSpace(string(out))
	}
	return fmt.Sprint(v.Interface())
}

// shortDuration is d without the zero units time.Duration's String
// writes: 5m, not 5m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
