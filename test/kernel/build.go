package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cnibox/cnibox/test/internal/flanneld"
	"github.com/cnibox/cnibox/test/internal/upstream"
)

const module = "github.com/cnibox/cnibox"

// defaultPatterns are the trees whose tests need only the kernel and the
// binary. Of test/, e2e runs without its podman tests (guestSkips), and
// test/overlay (etcd is on the disk; its control-plane tests are built
// with -tags kube only) with its flanneld cases that need WireGuard or
// IPIP.
var defaultPatterns = []string{"./netops/...", "./roles/...", "./agent/...", "./test/e2e", "./test/reliability", "./test/overlay"}

// guestSkips are the tests (a -test.skip regexp by package) that need more
// than the kernel and the binary: podman with its runtime and storage.
//
// Of test/overlay the guest runs what this machine's kernel cannot: the
// side-by-side tests with flanneld on wireguard and ipip (the other
// backends and the vxlan cluster run on the host in make test).
var guestSkips = map[string]string{"test/e2e": "^TestPodman",
	"test/overlay": "^Test(VXLAN|HostGW)"}

// diskTools are the programs some tests run that go on the disk rather
// than into the initramfs (they are large): the guest links them from
// /t/host to their paths on the host. They are Go programs linked against
// libc only, which the initramfs has for iproute2.
var diskTools = []string{"/usr/bin/etcd", "/usr/lib/cni"}

// upstreamPlugins are the reference plugins of upstream.Version that the
// side-by-side tests of test/e2e need and Debian's package (1.1.1) lacks or
// has older: built into the user's cache (test/internal/upstream) and
// copied into the disk's upstream directory, where the tests find them
// through $CNIBOX_REF_UPSTREAM.
var upstreamPlugins = []string{"bridge", "dummy", "tap"}

// selectPackages lists the packages with tests that patterns name, and
// the -test.run of those whose pattern carries one (PATTERN:REGEXP);
// patterns whose directory is missing are left out.
func selectPackages(patterns []string) ([]string, map[string]string, error) {
	var existing []string
	runs := map[string]string{} // a pattern's own -test.run, by pattern
	for _, p := range patterns {
		p, run, _ := strings.Cut(p, ":")
		dir := strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/")
		if _, err := os.Stat(dir); err == nil {
			existing = append(existing, p)
			if run != "" {
				runs[p] = run
			}
		}
	}
	pkgs, err := testPackages(existing)
	if err != nil {
		return nil, nil, err
	}
	pkgRun := map[string]string{} // by package
	for pat, run := range runs {
		ps, err := testPackages([]string{pat})
		if err != nil {
			return nil, nil, err
		}
		for _, p := range ps {
			pkgRun[p] = run
		}
	}
	return pkgs, pkgRun, nil
}

// testPackages lists the packages matching patterns that have tests;
// patterns that match nothing (a tree being moved) are left out.
func testPackages(patterns []string) ([]string, error) {
	args := append([]string{"list", "-e", "-f", "{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}"}, patterns...)
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.Bytes())
	}
	var pkgs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if p := strings.TrimSpace(sc.Text()); p != "" {
			pkgs = append(pkgs, strings.TrimPrefix(strings.TrimPrefix(p, module), "/"))
		}
	}
	return pkgs, nil
}

// testBinaryName is the file name of pkg's test binary in the image.
func testBinaryName(pkg string) string {
	if pkg == "" {
		return "root.test"
	}
	return strings.ReplaceAll(pkg, "/", "_") + ".test"
}

// buildDisk builds the test binaries and cnibox into a staging tree with a
// copy of the sources and the guest's run list, and makes an ext4 image of
// it. It returns the image and the packages in the order they run (those of
// the second pass suffixed with forwardingSuffix).
func buildDisk(o options) (string, []string, error) {
	patterns := o.pkgs
	if len(patterns) == 0 {
		patterns = defaultPatterns
	}
	pkgs, pkgRun, err := selectPackages(patterns)
	if err != nil {
		return "", nil, err
	}
	if len(pkgs) == 0 {
		return "", nil, fmt.Errorf("no packages with tests in %v", patterns)
	}
	stage := filepath.Join(o.cache, "stage")
	if err := os.RemoveAll(stage); err != nil {
		return "", nil, err
	}
	for _, d := range []string{"tests", "bin", "src"} {
		if err := os.MkdirAll(filepath.Join(stage, d), 0o755); err != nil {
			return "", nil, err
		}
	}
	env := append(os.Environ(), "CGO_ENABLED=0")
	goBuild := func(out string, args ...string) error {
		cmd := command("go", append([]string{"build", "-trimpath", "-o", out}, args...)...)
		cmd.Env = env
		return cmd.Run()
	}
	cnibox := filepath.Join(stage, "bin", "cnibox")
	if o.cnibox != "" {
		if err := copyFile(o.cnibox, cnibox, 0o755); err != nil {
			return "", nil, err
		}
	} else if err := goBuild(cnibox, "-tags", "urfave_cli_no_docs", "."); err != nil {
		return "", nil, fmt.Errorf("build cnibox: %w", err)
	}
	// The dhcp daemon, next to cnibox where `dhcp daemon` looks for it.
	if err := goBuild(filepath.Join(stage, "bin", "cnibox-dhcp"), "./cmd/cnibox-dhcp"); err != nil {
		return "", nil, fmt.Errorf("build cnibox-dhcp: %w", err)
	}
	if err := goBuild(filepath.Join(stage, "bin", "cnibox-fault"), "-tags", "faultpoints", "."); err != nil {
		return "", nil, fmt.Errorf("build cnibox-fault: %w", err)
	}
	// The overlay's tests run cnibox-agent (next to cnibox) and, beside
	// it, flanneld (test/internal/flanneld, built once into the user's
	// cache; the guest finds it through $CNIBOX_FLANNELD_DIR).
	if needsAgent(pkgs) {
		if err := goBuild(filepath.Join(stage, "bin", "cnibox-agent"), "./cmd/cnibox-agent"); err != nil {
			return "", nil, fmt.Errorf("build cnibox-agent: %w", err)
		}
		fdir, err := flanneld.Dir()
		if err != nil {
			return "", nil, err
		}
		if err := os.MkdirAll(filepath.Join(stage, "flanneld"), 0o755); err != nil {
			return "", nil, err
		}
		if err := copyFile(filepath.Join(fdir, "flanneld"), filepath.Join(stage, "flanneld", "flanneld"), 0o755); err != nil {
			return "", nil, fmt.Errorf("copy flanneld: %w", err)
		}
	}
	for _, p := range pkgs {
		cmd := command("go", "test", "-c", "-o", filepath.Join(stage, "tests", testBinaryName(p)), "./"+p)
		cmd.Env = env
		if err := cmd.Run(); err != nil {
			return "", nil, fmt.Errorf("build tests of %s: %w", p, err)
		}
	}
	for _, t := range diskTools {
		if err := copyTree(t, filepath.Join(stage, "host", t)); err != nil {
			return "", nil, fmt.Errorf("copy %s: %w", t, err)
		}
	}
	refDir, err := upstream.Plugins(upstreamPlugins...)
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(filepath.Join(stage, "upstream"), 0o755); err != nil {
		return "", nil, err
	}
	for _, p := range upstreamPlugins {
		if err := copyFile(filepath.Join(refDir, p), filepath.Join(stage, "upstream", p), 0o755); err != nil {
			return "", nil, fmt.Errorf("copy the reference %s: %w", p, err)
		}
	}

	if err := copySources(".", filepath.Join(stage, "src")); err != nil {
		return "", nil, fmt.Errorf("copy sources: %w", err)
	}
	fwd := forwardingPackages(pkgs, o.forwarding)
	for file, ps := range map[string][]string{"packages": pkgs, "packages-forwarding": fwd} {
		var list strings.Builder
		for _, p := range ps {
			dir := p
			if dir == "" {
				dir = "."
			}
			skip := guestSkip(p, file == "packages-forwarding")
			fmt.Fprintf(&list, "%s %s %s %s\n", dir, testBinaryName(p), orDash(skip), orDash(pkgRun[p]))
		}
		if err := os.WriteFile(filepath.Join(stage, file), []byte(list.String()), 0o644); err != nil {
			return "", nil, err
		}
	}
	var args strings.Builder
	if o.run != "" {
		fmt.Fprintf(&args, "-test.run=%s\n", o.run)
	}
	if o.bench != "" {
		fmt.Fprintf(&args, "-test.bench=%s\n", o.bench)
		for _, a := range strings.Fields(o.benchArgs) {
			fmt.Fprintf(&args, "%s\n", a)
		}
	}
	if err := os.WriteFile(filepath.Join(stage, "testargs"), []byte(args.String()), 0o644); err != nil {
		return "", nil, err
	}
	img := filepath.Join(o.cache, "tests.ext4")
	size, err := treeSize(stage)
	if err != nil {
		return "", nil, err
	}
	_ = os.Remove(img)
	mk := exec.Command("mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-E", "root_owner=0:0", "-d", stage, img, fmt.Sprintf("%dM", size>>20*3/2+64))
	if out, err := mk.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("mkfs.ext4: %w: %s", err, out)
	}
	order := slices.Clone(pkgs)
	for _, p := range fwd {
		order = append(order, p+forwardingSuffix)
	}
	return img, order, nil
}

// orDash is s, or "-" for none (a field of the guest's package lists).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// copySources copies the repository's files (not .git, bin, or built
// binaries) for the tests' testdata and relative paths.
func copySources(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			if rel == ".git" || rel == "bin" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if !d.Type().IsRegular() || strings.HasSuffix(rel, ".test") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return copyFile(path, filepath.Join(to, rel), info.Mode().Perm())
	})
}

// copyTree copies the file or directory from (following symlinks) to to.
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(to, strings.TrimPrefix(path, from))
		info, err := os.Stat(path)
		if err != nil {
			return err
		}
		if info.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return copyFile(path, dst, info.Mode().Perm())
	})
}

func copyFile(from, to string, mode os.FileMode) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, mode)
}

func treeSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil {
			n += info.Size() + 4096
		}
		return nil
	})
	return n, err
}

// needsAgent reports whether one of pkgs runs cnibox-agent beside flanneld
// (test/overlay, test/benchscale's wireguard row).
func needsAgent(pkgs []string) bool {
	for _, p := range pkgs {
		if strings.HasPrefix(p, "test/overlay") || p == "test/benchscale" {
			return true
		}
	}
	return false
}
