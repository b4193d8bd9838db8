package benchnode

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Mem is a process's memory in KiB as /proc/PID/status gives it.
type Mem struct {
	RSS  int // VmRSS
	HWM  int // VmHWM: the peak of RSS
	Anon int // RssAnon: its own pages
	File int // RssFile: the binary's and other files' pages, shared
}

// ReadMem reads /proc/pid/status (zeros if the process is gone).
func ReadMem(pid int) Mem {
	var m Mem
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			fmt.Sscan(f[1], &m.RSS)
		case "VmHWM:":
			fmt.Sscan(f[1], &m.HWM)
		case "RssAnon:":
			fmt.Sscan(f[1], &m.Anon)
		case "RssFile:":
			fmt.Sscan(f[1], &m.File)
		}
	}
	return m
}

// PSS is the process's proportional set size in KiB (shared pages divided
// among their users), from /proc/pid/smaps_rollup.
func PSS(pid int) int {
	pss := 0
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
				fmt.Sscan(f[1], &pss)
			}
		}
	}
	return pss
}

// StatCPU is the user and system time of the process so far, from
// /proc/pid/stat (in USER_HZ ticks: 10 ms steps).
func StatCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) <= 13 {
		return 0
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// ThreadCPU is the time the process's live threads have spent on a CPU, in
// nanoseconds (the first field of each /proc/pid/task/*/schedstat).
func ThreadCPU(pid int) time.Duration {
	var cpu time.Duration
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	for _, t := range tasks {
		if b, err := os.ReadFile(t); err == nil {
			var ns int64
			fmt.Sscan(string(b), &ns)
			cpu += time.Duration(ns)
		}
	}
	return cpu
}
