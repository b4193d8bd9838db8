package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// The agent's Go memory limit follows its container's: with a memory limit
// on the container (cgroup v2 memory.max, v1 memory.limit_in_bytes), the
// runtime's soft limit is memLimitShare of it, so the collector works
// harder before the kernel's OOM killer would act (the rest is the binary's
// pages and what is not Go heap). $GOMEMLIMIT still wins; without a limit
// nothing changes.
const memLimitShare = 0.8

// cgroupRoot is where the cgroup file system is mounted.
const cgroupRoot = "/sys/fs/cgroup"

func init() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if limit, ok := containerMemLimit(cgroupRoot, "/proc/self/cgroup"); ok {
		debug.SetMemoryLimit(int64(float64(limit) * memLimitShare))
	}
}

// containerMemLimit reads this process's cgroup memory limit: the cgroup
// named in procCgroup (a /proc/PID/cgroup), else the root of root (a
// container with its own cgroup namespace sees its cgroup there). false:
// no limit, or none readable.
func containerMemLimit(root, procCgroup string) (int64, bool) {
	var dirs []string
	if b, err := os.ReadFile(procCgroup); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			// "0::/path" (v2) or "N:memory:/path" (v1)
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				continue
			}
			switch {
			case f[0] == "0" && f[1] == "":
				dirs = append(dirs, filepath.Join(root, f[2], "memory.max"))
			case strings.Contains(","+f[1]+",", ",memory,"):
				dirs = append(dirs, filepath.Join(root, "memory", f[2], "memory.limit_in_bytes"))
			}
		}
	}
	dirs = append(dirs, filepath.Join(root, "memory.max"), filepath.Join(root, "memory", "memory.limit_in_bytes"))
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		// cgroup v1 says "no limit" with a page-rounded MaxInt64.
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}
