// Package proc reads what a process on this Linux machine has used: its
// CPU time and its resident memory, from /proc.
package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ticks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on every
// Linux architecture Go runs on.
const ticks = 100

// CPU returns the user and system CPU time process pid has used, from
// /proc/PID/stat (fields 14 and 15), to the 10 ms the kernel counts in.
func CPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("proc: /proc/%d/stat has %d fields after the name", pid, len(fields))
	}
	var total int64
	for _, f := range fields[11:13] { // fields 14 and 15 of the whole line
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc: /proc/%d/stat: %w", pid, err)
		}
		total += n
	}
	return time.Duration(total) * time.Second / ticks, nil
}

// Resident is a process's resident memory, in bytes.
type Resident struct {
	Total int64 // VmRSS
	File  int64 // RssFile: pages of files mapped, the executable's among them
}

// Memory returns process pid's resident memory, from VmRSS and RssFile in
// /proc/PID/status.
func Memory(pid int) (Resident, error) {
	var r Resident
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return r, err
	}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		var into *int64
		switch {
		case !ok:
			continue
		case name == "VmRSS":
			into = &r.Total
		case name == "RssFile":
			into = &r.File
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return r, fmt.Errorf("proc: /proc/%d/status %s: %w", pid, name, err)
		}
		*into = kb << 10
		seen++
	}
	if seen < 2 {
		return r, fmt.Errorf("proc: /proc/%d/status lacks VmRSS or RssFile", pid)
	}
	return r, nil
}
