// Command kernel runs the tests that touch the kernel inside a VM booted on
// Debian's stock kernel (make test-kernel): this machine's kernel is not the
// one operators run, and it may lack 802.1Q, bridge VLAN filtering, ipvlan,
// dummy, VRF or WireGuard.
//
// It builds the kernel-touching packages as static test binaries and the
// cnibox binary, writes them (with the repository's sources, for testdata,
// the host's etcd and reference plugins, and upstream's reference plugins
// that Debian's package lacks) to an ext4 disk image, packs
// busybox, bash, iproute2, nft, iptables-nft and every network module a test may touch
// into an initramfs (cached per kernel), boots the
// kernel under qemu with TCG, runs every test binary as root with -test.v,
// then those of -forwarding-pkgs again with the VM's forwarding and
// br_netfilter on (forwarding.go), streams the console and exits with the
// tests' status.
//
//	go run ./test/kernel [-kernel /boot/vmlinuz-VER] [-run REGEXP] [-bench REGEXP] [-pkgs 'PATTERN[:REGEXP] ...'] [-forwarding-pkgs 'PATTERN ...'|none]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// debs are the Debian packages the harness needs on the host.
var debs = []string{"qemu-system-x86", "linux-image-cloud-amd64", "busybox-static", "kmod", "iproute2", "nftables", "e2fsprogs",
	"bash", "etcd-server", "containernetworking-plugins"}

type options struct {
	kernel string // path of the vmlinuz to boot
	cache  string // work and cache directory
	cnibox string // prebuilt cnibox binary ("" builds one)
	pkgs   []string
	// forwarding are the package patterns of the second pass (forwarding.go)
	forwarding []string
	run        string // -test.run for every binary
	bench      string // -test.bench for every binary (make bench-fastpath)
	benchArgs  string // more test flags with it, e.g. -test.count=5
	timeout    time.Duration
	memMB      int
	smp        int
	debsOnly   bool // install the Debian packages and stop (.ci/run, before its parallel part)
}

func main() {
	var o options
	var pkgs, fwd string
	flag.StringVar(&o.kernel, "kernel", os.Getenv("KERNEL"), "kernel image to boot (default: the newest /boot/vmlinuz-*-cloud-amd64; env KERNEL)")
	flag.StringVar(&o.cache, "cache", defaultCache(), "directory for the build and the cached initramfs pieces")
	flag.StringVar(&o.cnibox, "cnibox", "", "cnibox binary to test (default: build one)")
	flag.StringVar(&pkgs, "pkgs", "", "package patterns to test, space separated (default: every package with tests under netops, roles, agent, and test/e2e, test/reliability); PATTERN:REGEXP runs only that pattern's tests matching REGEXP")
	flag.StringVar(&fwd, "forwarding-pkgs", strings.Join(forwardingPatterns, " "), "package patterns run a second time with the VM's forwarding and br_netfilter on, of those -pkgs selects (\"none\": no second pass)")
	flag.StringVar(&o.run, "run", "", "run only the tests matching this regexp (-test.run)")
	flag.StringVar(&o.bench, "bench", "", "run the benchmarks matching this regexp (-test.bench; with -run '^$' for them alone)")
	flag.StringVar(&o.benchArgs, "bench-args", "", "more flags of the test binaries with -bench, space separated (e.g. '-test.count=5 -test.benchtime=3s')")
	flag.DurationVar(&o.timeout, "timeout", 80*time.Minute, "time limit of the whole VM run")
	flag.IntVar(&o.memMB, "m", 1024, "guest memory in MiB")
	flag.IntVar(&o.smp, "smp", 2, "guest CPUs")
	flag.BoolVar(&o.debsOnly, "debs-only", false, "install the Debian packages the run needs (apt-get) and stop")
	flag.Parse()
	o.pkgs = strings.Fields(pkgs)
	if fwd != "none" {
		o.forwarding = strings.Fields(fwd)
	}
	code, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test-kernel:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func defaultCache() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "cnibox", "test-kernel")
	}
	return filepath.Join(os.TempDir(), "cnibox-test-kernel")
}

func run(o options) (int, error) {
	start := time.Now()
	if os.Geteuid() != 0 {
		return 0, fmt.Errorf("needs root (apt-get, and the tests run as root in the guest)")
	}
	if err := ensureDebs(debs); err != nil {
		return 0, err
	}
	if o.debsOnly {
		return 0, nil
	}
	if o.kernel == "" {
		k, err := newestKernel()
		if err != nil {
			return 0, err
		}
		o.kernel = k
	}
	kver := strings.TrimPrefix(filepath.Base(o.kernel), "vmlinuz-")
	if _, err := os.Stat(filepath.Join("/lib/modules", kver)); err != nil {
		return 0, fmt.Errorf("kernel %s: no modules for %q: %w", o.kernel, kver, err)
	}
	if err := os.MkdirAll(o.cache, 0o755); err != nil {
		return 0, err
	}
	initrd, err := buildInitramfs(o.cache, kver)
	if err != nil {
		return 0, fmt.Errorf("initramfs: %w", err)
	}
	disk, pkgs, err := buildDisk(o)
	if err != nil {
		return 0, fmt.Errorf("test disk: %w", err)
	}
	fmt.Printf("test-kernel: %d packages built, %s; booting %s\n", len(pkgs), time.Since(start).Round(time.Second), o.kernel)
	res, err := boot(o, initrd, disk)
	if err != nil {
		return 0, err
	}
	fmt.Printf("\ntest-kernel: guest kernel %s, %s in all\n", res.uname, time.Since(start).Round(time.Second))
	code := 0
	for _, p := range pkgs {
		dir := p
		if dir == "" {
			dir = "."
		}
		st, ok := res.status[dir]
		switch {
		case !ok:
			fmt.Printf("  %-40s did not finish\n", dir)
			code = 1
		case st != 0:
			fmt.Printf("  %-40s FAIL (exit %d) %ds\n", dir, st, res.seconds[dir])
			code = 1
		default:
			fmt.Printf("  %-40s ok %ds\n", dir, res.seconds[dir])
		}
	}
	if !res.done {
		fmt.Println("test-kernel: the guest did not finish (timeout, panic or crash)")
		code = 1
	}
	return code, nil
}

// ensureDebs installs the missing ones of names with apt-get.
func ensureDebs(names []string) error {
	var missing []string
	for _, n := range names {
		out, _ := exec.Command("dpkg-query", "-W", "-f=${Status}", n).Output()
		if !strings.HasPrefix(string(out), "install ok installed") {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	fmt.Println("test-kernel: installing", strings.Join(missing, " "))
	if err := command("apt-get", "update", "-qq").Run(); err != nil {
		return fmt.Errorf("apt-get update: %w", err)
	}
	cmd := command("apt-get", append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apt-get install %s: %w", strings.Join(missing, " "), err)
	}
	return nil
}

// command is exec.Command with the output going to the terminal.
func command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd
}

// newestKernel finds the newest /boot/vmlinuz-*-cloud-amd64.
func newestKernel() (string, error) {
	ks, _ := filepath.Glob("/boot/vmlinuz-*-cloud-amd64")
	if len(ks) == 0 {
		return "", fmt.Errorf("no /boot/vmlinuz-*-cloud-amd64 (apt-get install linux-image-cloud-amd64)")
	}
	best := ks[0]
	for _, k := range ks[1:] {
		if versionLess(best, k) {
			best = k
		}
	}
	return best, nil
}

// versionLess compares a and b as sequences of numbers and other text.
func versionLess(a, b string) bool {
	split := func(s string) []string {
		var out []string
		cur, digit := "", false
		for _, r := range s {
			d := r >= '0' && r <= '9'
			if cur != "" && d != digit {
				out, cur = append(out, cur), ""
			}
			cur, digit = cur+string(r), d
		}
		return append(out, cur)
	}
	x, y := split(a), split(b)
	for i := 0; i < len(x) && i < len(y); i++ {
		if x[i] == y[i] {
			continue
		}
		if x[i][0] >= '0' && x[i][0] <= '9' && y[i][0] >= '0' && y[i][0] <= '9' {
			if len(x[i]) != len(y[i]) {
				return len(x[i]) < len(y[i])
			}
		}
		return x[i] < y[i]
	}
	return len(x) < len(y)
}
