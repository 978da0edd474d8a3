package redisstore_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// TestSlotHolderProcess is the child of TestKilledHolderFreesItsSlot: it
// takes the one slot of a key and holds it, renewing its lease, until it
// is killed.
func TestSlotHolderProcess(t *testing.T) {
	url := os.Getenv("SLUICE_SLOT_HOLDER")
	if url == "" {
		t.Skip("run by TestKilledHolderFreesItsSlot")
	}
	store, err := redisstore.Open(url, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &sluice.Concurrency{Slots: store, Max: 1, Lease: time.Second, FailMode: sluice.FailClosed}
	release, d, err := c.Acquire(context.Background(), "upload")
	if err != nil || release == nil {
		t.Fatalf("child: %+v, %v", d, err)
	}
	os.Stdout.WriteString("held\n")
	time.Sleep(time.Hour)
}

// TestKilledHolderFreesItsSlot: a process holding a slot keeps it past its
// lease while it lives (it renews), and once it is killed mid-request the
// slot frees itself when the lease expires: within the lease, not never.
func TestKilledHolderFreesItsSlot(t *testing.T) {
	srv := redistest.Standalone(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSlotHolderProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "SLUICE_SLOT_HOLDER="+srv.URL())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != "held" {
	}
	store, err := redisstore.Open(srv.URL(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	time.Sleep(1500 * time.Millisecond) // past one lease: only renewal keeps it
	if d, err := store.Acquire(ctx, "upload", "parent", 1, time.Minute); err != nil || d.Allowed {
		t.Fatalf("1.5s into a 1s lease of a live holder: %+v, %v; want the slot still held", d, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for {
		d, err := store.Acquire(ctx, "upload", "parent", 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			break
		}
		if time.Since(killed) > 15*time.Second {
			t.Fatal("the killed holder's slot was not freed 15s after, with a 1s lease")
		}
		time.Sleep(20 * time.Millisecond)
	}
	freed := time.Since(killed)
	t.Logf("slot freed %v after its holder was killed (lease 1s)", freed)
	if freed > 1100*time.Millisecond {
		t.Fatalf("freed %v after the kill; the lease is 1s", freed)
	}
}
