package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "the service's HTTP address")
	policy := fs.String("policy", "", "policy name (or -domain with -descriptor)")
	key := fs.String("key", "", "the key to check under the policy")
	cost := fs.Int64("cost", 1, "events to take; 0 peeks")
	plan := fs.String("plan", "", "the plan whose limits apply, among the policy's plans")
	domain := fs.String("domain", "", "an Envoy domain, with -descriptor")
	descriptor := fs.String("descriptor", "", "an Envoy descriptor as k=v,k2=v2")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice check -policy NAME -key KEY [-cost N] [-plan P] | -domain D -descriptor k=v[,k=v]\n\nSends one check to a running service and prints the decision; exits 0 allowed, 1 denied, 2 on error.\n\nFlags:")
		fs.PrintDefaults()
	}
	if _, code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	var body []byte
	path := "/v1/check"
	switch {
	case *policy != "" && *key != "":
		body, _ = json.Marshal(map[string]any{"checks": []map[string]any{{"policy": *policy, "key": *key, "cost": *cost, "plan": *plan}}})
	case *domain != "" && *descriptor != "":
		var entries []map[string]string
		for _, kv := range strings.Split(*descriptor, ",") {
			k, v, _ := strings.Cut(kv, "=")
			entries = append(entries, map[string]string{"key": k, "value": v})
		}
		body, _ = json.Marshal(map[string]any{"domain": *domain, "descriptors": []any{map[string]any{"entries": entries}}, "hitsAddend": *cost})
		path = "/json"
	default:
		fs.Usage()
		return 2
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post("http://"+*addr+path, "application/json", bytes.NewReader(body))
	if err != nil {
		fail(stderr, "check", err)
		return 2
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 && resp.StatusCode != http.StatusTooManyRequests {
		fmt.Fprintf(stderr, "sluice check: %s: %s\n", resp.Status, out)
		return 2
	}
	var r struct {
		Allowed     bool              `json:"allowed"`
		Results     []json.RawMessage `json:"results"`
		OverallCode string            `json:"overallCode"`
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, out, "", "  "); err != nil || json.Unmarshal(out, &r) != nil ||
		path == "/v1/check" && r.Results == nil || path == "/json" && r.OverallCode == "" {
		// Not sluice's answer (a proxy's page, another service): neither
		// allowed nor denied.
		fmt.Fprintf(stderr, "sluice check: %s answered %s with what is not a decision: %.200q\n", *addr, resp.Status, out)
		return 2
	}
	fmt.Fprintln(stdout, pretty.String())
	if (path == "/v1/check" && !r.Allowed) || r.OverallCode == "OVER_LIMIT" {
		return 1
	}
	return 0
}
