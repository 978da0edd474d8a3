package main_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/freeport"
	"github.com/sluicehq/sluice/internal/logbuf"
)

// The sluice binary under test, built once for the package, and the
// helpers that run it: both test tiers use them.

// binary is the sluice binary's path; empty with -short, which does not
// build it (needBinary).
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "sluice-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "sluice")
	// -buildvcs=true: the binary names its commit, as a release's does,
	// whatever GOFLAGS says here; -tags grpcnotrace,vtprotobuf, as
	// deploy/Dockerfile builds it (TestReleaseBuildPrunesMethods).
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-tags", "grpcnotrace,vtprotobuf", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building sluice: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running sluice process.
type proc struct {
	cmd               *exec.Cmd
	http, grpc, admin string
	out               *logbuf.Buffer
	exited            chan struct{} // closed when a process of startBinary exits
	exitErr           error         // cmd.Wait's, once exited is closed
}

// wait waits for a process of startBinary to exit and returns how.
func (p *proc) wait() error {
	<-p.exited
	return p.exitErr
}

// needBinary skips t with -short, which does not build the binary.
func needBinary(t *testing.T) {
	t.Helper()
	if binary == "" {
		t.Skip("runs the sluice binary, which -short does not build")
	}
}

// start runs `sluice serve` with args and waits until it answers /healthz
// and has announced itself.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	needBinary(t)
	return startBinary(t, binary, env, args...)
}

// proxyProc is a `sluice proxy` started for a test.
type proxyProc struct {
	cmd       *exec.Cmd
	addr, ops string // its listener and its metrics listener
	out       *logbuf.Buffer
}

// startProxy starts `sluice proxy` of the policy file in front of
// upstream, with env added to its environment, and returns once it
// accepts connections.
func startProxy(t *testing.T, file, upstream string, env ...string) *proxyProc {
	t.Helper()
	needBinary(t)
	p := &proxyProc{addr: freeport.Addr(t), ops: freeport.Addr(t), out: &logbuf.Buffer{}}
	p.cmd = exec.Command(binary, "proxy", "-config", file, "-upstream", upstream, "-listen", p.addr, "-metrics", p.ops)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		if t.Failed() {
			t.Logf("sluice proxy output:\n%s", p.out)
		}
	})
	waitFor(t, func() bool {
		c, err := net.Dial("tcp", p.addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return p
}

// startBinary is start with the sluice binary bin. Its listeners bind
// port 0 and their addresses are read from the startup record: a port
// picked free beforehand can be taken by another test's process before
// sluice binds it.
func startBinary(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{out: &logbuf.Buffer{}}
	args = append([]string{"serve", "-http", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-admin", "127.0.0.1:0"}, args...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() { p.exitErr = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.wait()
		if t.Failed() {
			t.Logf("sluice output:\n%s", p.out)
		}
	})
	// Serving and announced: the record comes once the config file is
	// watched, so a test's change to it from here on is seen.
	for {
		if m := startRecord.FindStringSubmatch(p.out.String()); m != nil {
			p.http, p.grpc, p.admin = m[1], m[2], m[3]
			break
		}
		select {
		case <-p.exited:
			t.Fatalf("sluice exited before serving:\n%s", p.out)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if resp, err := http.Get("http://" + p.http + "/healthz"); err != nil {
		t.Fatalf("sluice announced %s and does not answer /healthz: %v", p.http, err)
	} else {
		resp.Body.Close()
	}
	return p
}

// startRecord finds the addresses in the startup record, logged as text
// or as JSON.
var startRecord = regexp.MustCompile(`sluice serving.*?\bhttp[=":]+([^\s",]+).*?\bgrpc[=":]+([^\s",]+).*?\badmin[=":]+([^\s",]*)`)

// adminCall sends one admin API call with token and a JSON body, and
// returns its status and body.
// metric returns the value of series (its name and labels as /metrics
// writes them) on the server at addr, 0 when it has none.
func metric(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+]+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	var n float64
	fmt.Sscan(string(m[1]), &n)
	return n
}

func adminCall(t *testing.T, addr, token, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type checkResp struct {
	Allowed bool `json:"allowed"`
	Results []struct {
		Allowed    bool   `json:"allowed"`
		Remaining  int64  `json:"remaining"`
		Limit      string `json:"limit"`
		FailedOpen bool   `json:"failed_open"`
	} `json:"results"`
}

func postCheck(t *testing.T, addr, policy, key string) (int, checkResp) {
	t.Helper()
	body := fmt.Sprintf(`{"checks":[{"policy":%q,"key":%q}]}`, policy, key)
	resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r checkResp
	json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
