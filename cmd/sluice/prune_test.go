package main_test

import (
	"debug/elf"
	"testing"
)

// The release build (-tags grpcnotrace,vtprotobuf, as deploy/Dockerfile and the
// README build it) executes no text/template: template execution looks
// methods up by name (reflect's MethodByName), and a binary that can do
// that keeps every exported method of every type, reachable or not —
// rueidis' 19,000 command builders among them, 14 MB of text and 5-6 MB of
// every process's resident memory. grpc-go links such templates through
// golang.org/x/net/trace unless built with grpcnotrace; the status page
// renders through templ, which looks nothing up.
func TestReleaseBuildPrunesMethods(t *testing.T) {
	needBinary(t)
	f, err := elf.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == "text/template.(*state).evalField" {
			t.Fatalf("sluice links %s: every exported method is kept", s.Name)
		}
	}
}
