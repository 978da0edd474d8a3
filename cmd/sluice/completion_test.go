package main

import (
	"bytes"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var flagLine = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// The completion script offers every flag of every command, as -h lists
// them, and completes through a real bash.
func TestCompletionCoversEveryFlag(t *testing.T) {
	cmds := map[string]func([]string, *bytes.Buffer, *bytes.Buffer) int{
		"serve": func(a []string, o, e *bytes.Buffer) int { return serve(a, o, e) },
		"proxy": func(a []string, o, e *bytes.Buffer) int { return proxyCmd(a, o, e) },
		"check": func(a []string, o, e *bytes.Buffer) int { return check(a, o, e) },
		"sim":   func(a []string, o, e *bytes.Buffer) int { return simCmd(a, o, e) },
	}
	for name, run := range cmds {
		var out, errb bytes.Buffer
		if code := run([]string{"-h"}, &out, &errb); code != 0 {
			t.Errorf("%s -h exits %d", name, code)
		}
		for _, m := range flagLine.FindAllStringSubmatch(errb.String(), -1) {
			if !slices.Contains(completionWords[name], "-"+m[1]) {
				t.Errorf("%s: -%s is not in the completion script", name, m[1])
			}
		}
		if !strings.Contains(errb.String(), "(env SLUICE_") {
			t.Errorf("%s -h names no SLUICE_ variable", name)
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	var script bytes.Buffer
	if completion([]string{"bash"}, &script, &bytes.Buffer{}) != 0 {
		t.Fatal("completion bash failed")
	}
	out, err := exec.Command(bash, "-c", script.String()+`
COMP_WORDS=(sluice serve -admin-t); COMP_CWORD=2; _sluice; echo "${COMPREPLY[@]}"`).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-admin-token -admin-token-file") {
		t.Fatalf("bash completion of 'sluice serve -admin-t': %q, %v", out, err)
	}
}
