// Package buildinfo is what the binary knows of its own build, from the Go
// toolchain's build information: the module version (set by go install
// pkg@version, "(devel)" from a work tree), the VCS revision and whether
// the tree had uncommitted changes, and the Go version.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Info is one binary's build.
type Info struct {
	Version  string // module version, such as v1.2.0, or (devel)
	Revision string // VCS commit, or "" when not built from a repository
	Modified bool   // the work tree had uncommitted changes
	Go       string // Go version, such as go1.26.8
}

// Read returns the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(unknown)"}
	}
	i := Info{Version: bi.Main.Version, Go: bi.GoVersion}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String is the version line: "v1.2.0 (commit 1a2b3c4d5e6f, go1.26.8)",
// with ", modified" when the tree was.
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	b.WriteString(" (")
	if i.Revision != "" {
		b.WriteString("commit ")
		b.WriteString(i.Revision[:min(12, len(i.Revision))])
		if i.Modified {
			b.WriteString(", modified")
		}
		b.WriteString(", ")
	}
	b.WriteString(i.Go)
	b.WriteString(")")
	return b.String()
}
