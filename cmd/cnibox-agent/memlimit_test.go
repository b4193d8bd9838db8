package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The container's memory limit is found where the kernel shows it: cgroup
// v2 in the process's own cgroup or at the root of a cgroup namespace,
// cgroup v1 under the memory controller; "max" and v1's page-rounded
// MaxInt64 are no limit.
func TestContainerMemLimit(t *testing.T) {
	write := func(t *testing.T, path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, cgroup string
		files        map[string]string
		want         int64
		ok           bool
	}{
		{"v2 own cgroup", "0::/kubepods/pod1/ctr\n", map[string]string{"kubepods/pod1/ctr/memory.max": "52428800\n", "memory.max": "max\n"}, 52428800, true},
		{"v2 namespace root", "0::/\n", map[string]string{"memory.max": "52428800\n"}, 52428800, true},
		{"v2 no limit", "0::/kubepods/pod1/ctr\n", map[string]string{"kubepods/pod1/ctr/memory.max": "max\n"}, 0, false},
		{"v1", "12:memory:/kubepods/ctr\n3:cpu,cpuacct:/kubepods/ctr\n", map[string]string{"memory/kubepods/ctr/memory.limit_in_bytes": "67108864\n"}, 67108864, true},
		{"v1 no limit", "12:memory:/kubepods/ctr\n", map[string]string{"memory/kubepods/ctr/memory.limit_in_bytes": "9223372036854771712\n"}, 0, false},
		{"nothing mounted", "0::/x\n", nil, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for p, s := range c.files {
				write(t, filepath.Join(root, p), s)
			}
			pc := filepath.Join(t.TempDir(), "cgroup")
			write(t, pc, c.cgroup)
			got, ok := containerMemLimit(root, pc)
			if got != c.want || ok != c.ok {
				t.Errorf("containerMemLimit = %d, %v; want %d, %v", got, ok, c.want, c.ok)
			}
		})
	}
}
