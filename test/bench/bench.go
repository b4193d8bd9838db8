package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/netops"
)

// side is one plugin set under test: ours (symlinks to cnibox) or the
// reference, each with its own data, cache dir, bridge and subnet so that
// they never share state in the node namespace.
type side struct {
	name     string // "ours" or "ref"
	ours     bool
	binDir   string
	dataDir  string // ours: the store dir; ref: host-local's dataDir
	cacheDir string // libcni's cache
	cni      *libcni.CNIConfig
	bridge   string
	subnet   netip.Prefix
	plugins  map[string]bool
}

// bench is one run: both sides, the results, the failures.
type bench struct {
	o        *options
	tmp      string
	sides    [2]*side // ours, ref
	refName  string
	refDir   string
	nop      string
	rsswrap  string
	vethdel  string // deletes one link in a fresh process (DEL floor)
	nopcni   string // a do-nothing CNI plugin (chain floor)
	bin      string // the private copy of the cnibox binary under test
	version  string // its `cnibox version`
	cases    []*cniCase
	stopping atomic.Bool
	failed   atomic.Int32

	lowerOnce sync.Once // the macvlan master (lower.go)
	lowerErr  error

	mu      sync.Mutex
	liveNS  map[string]bool
	nsSeq   int
	samples map[string]*sample
	sizes   *sizes
	rss     map[string][]int64 // "plugin|side" -> peak RSS of each ADD, KiB

	baseline  nftSnapshot
	jsonOut   io.Writer
	jsonFile  *os.File
	jsonLines []string
	userLog   bool // CNIBOX_LOG_FILE was set by the user: leave it alone
	warned    map[string]bool
}

func newBench(o *options, refDir, refName string, hs helpers) (*bench, error) {
	if refDir == "" {
		return nil, fmt.Errorf("no reference plugin directory handed over (%s)", refDirEnv)
	}
	for _, c := range o.conc {
		if c < 1 {
			return nil, fmt.Errorf("-c: concurrency %d must be at least 1", c)
		}
	}
	tmp, err := os.MkdirTemp("", "cnibox-bench-")
	if err != nil {
		return nil, err
	}
	b := &bench{o: o, tmp: tmp, refDir: refDir, refName: refName, nop: hs.nop, rsswrap: hs.rsswrap, vethdel: hs.vethdel, nopcni: hs.nopcni, liveNS: map[string]bool{}, jsonOut: os.Stdout}
	if o.jsonPath != "" {
		if b.jsonFile, err = os.Create(o.jsonPath); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
		b.jsonOut = b.jsonFile
	}
	// Plugins find iptables (the reference) through PATH.
	path := os.Getenv("PATH")
	for _, d := range []string{"/usr/local/sbin", "/usr/sbin", "/sbin"} {
		if !strings.Contains(":"+path+":", ":"+d+":") {
			path += ":" + d
		}
	}
	os.Setenv("PATH", path)

	ours, err := b.newSide("ours", true, "", netip.MustParsePrefix("10.234.0.0/16"))
	if err != nil {
		b.close()
		return nil, err
	}
	ref, err := b.newSide("ref", false, refDir, netip.MustParsePrefix("10.235.0.0/16"))
	if err != nil {
		b.close()
		return nil, err
	}
	b.sides = [2]*side{ours, ref}
	b.version = cniboxVersion(b.bin)
	// Every cnibox process inherits its store dir and log file, so nothing
	// reaches /var/lib/cnibox or /var/log/cnibox.
	os.Setenv("CNIBOX_DATA_DIR", ours.dataDir)
	b.userLog = os.Getenv(logEnv) != ""
	b.useLog("other", "")
	for _, c := range cniCases {
		if !o.cases[c.key] {
			continue
		}
		var missing []string
		for _, p := range c.plugins {
			for _, s := range b.sides {
				if !s.plugins[p] {
					missing = append(missing, s.name+" "+p)
				}
			}
		}
		if len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "bench: case %s skipped: no %s plugin yet\n", c.name, strings.Join(missing, ", "))
			continue
		}
		b.cases = append(b.cases, c)
	}
	return b, nil
}

// newSide makes a side's dirs; ours gets a plugin dir of symlinks made by
// `cnibox install --dir`.
func (b *bench) newSide(name string, ours bool, binDir string, subnet netip.Prefix) (*side, error) {
	s := &side{name: name, ours: ours, binDir: binDir, subnet: subnet, bridge: "cbr-" + name, plugins: map[string]bool{}}
	for _, d := range []*string{&s.dataDir, &s.cacheDir} {
		var err error
		if *d, err = os.MkdirTemp(b.tmp, name+"-"); err != nil {
			return nil, err
		}
	}
	if ours {
		// A private copy: a `make build` elsewhere during the run must not
		// change the binary under test.
		bin := filepath.Join(b.tmp, "cnibox")
		if err := copyFile(b.o.bin, bin); err != nil {
			return nil, fmt.Errorf("copy %s: %w", b.o.bin, err)
		}
		b.bin = bin
		s.binDir = filepath.Join(b.tmp, "ours-bin")
		if out, err := exec.Command(bin, "install", "--dir", s.binDir, "--target", bin).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s install --dir %s: %v\n%s", bin, s.binDir, err, out)
		}
	}
	ents, err := os.ReadDir(s.binDir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		s.plugins[e.Name()] = true
	}
	s.cni = libcni.NewCNIConfigWithCacheDir([]string{s.binDir}, s.cacheDir, nil)
	return s, nil
}

// copyFile copies src to dst with src's mode.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// fail records a failed correctness check and prints it loudly.
func (b *bench) fail(format string, args ...any) {
	b.failed.Add(1)
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(os.Stderr, "\n!!!!! CHECK FAILED: %s\n\n", msg)
}

// warnOnce prints a warning the first time key is seen.
func (b *bench) warnOnce(key, format string, args ...any) {
	b.mu.Lock()
	if b.warned == nil {
		b.warned = map[string]bool{}
	}
	seen := b.warned[key]
	b.warned[key] = true
	b.mu.Unlock()
	if !seen {
		b.logf(format, args...)
	}
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func (b *bench) vlogf(format string, args ...any) {
	if b.o.verbose {
		b.logf(format, args...)
	}
}

func (b *bench) stop() { b.stopping.Store(true) }

// run runs every selected part and prints the report; it returns the exit
// code (1 when a check failed).
func (b *bench) run() int {
	start := time.Now()
	b.logf("ours: %s -> %s; ref: %s (%s); %d pods per batch, %d rounds, concurrency %v",
		b.o.bin, b.sides[0].binDir, b.refName, b.refDir, b.o.n, b.o.rounds, b.o.conc)
	if len(b.cases) > 0 {
		b.runCNI()
	}
	if b.o.cases["scale"] && !b.stopping.Load() {
		b.runScale()
	}
	if b.o.cases["floor"] && !b.stopping.Load() {
		b.runFloor()
	}
	if b.o.cases["azure"] && !b.stopping.Load() {
		b.runAzure()
	}
	if b.o.cases["exec"] && !b.stopping.Load() {
		b.runExec()
		b.runRSS()
		b.runSizes()
	}
	b.report(time.Since(start))
	if b.stopping.Load() {
		b.logf("interrupted: the numbers above are partial")
		return 130
	}
	if n := b.failed.Load(); n > 0 {
		fmt.Fprintf(os.Stderr, "\n!!!!! %d CORRECTNESS CHECK(S) FAILED (see above) !!!!!\n", n)
		return 1
	}
	return 0
}

// newNS creates a pod namespace (untimed) and remembers it for cleanup.
func (b *bench) newNS() (name, path string, err error) {
	b.mu.Lock()
	b.nsSeq++
	name = fmt.Sprintf("cnibench-%d-%d", os.Getpid(), b.nsSeq)
	b.mu.Unlock()
	path, err = netops.CreateNamedNS(name)
	if err != nil {
		return "", "", err
	}
	b.mu.Lock()
	b.liveNS[name] = true
	b.mu.Unlock()
	// A runtime hands plugins a namespace with lo up (containerd runs the
	// loopback plugin); set it up here so CHECKs see a normal pod.
	if h, err := netops.Open(path); err == nil {
		h.SetLinkUp("lo")
		h.Close()
	}
	return name, path, nil
}

func (b *bench) deleteNS(name string) {
	if err := netops.DeleteNamedNS(name); err != nil {
		b.logf("delete namespace %s: %v", name, err)
		return
	}
	b.mu.Lock()
	delete(b.liveNS, name)
	b.mu.Unlock()
}

// containerID makes a containerd-like 64 hex digit ID.
func containerID(parts ...any) string {
	sum := sha256.Sum256([]byte(fmt.Sprint(parts...)))
	return hex.EncodeToString(sum[:])
}

// close removes every namespace and temp file the bench made.
func (b *bench) close() error {
	b.mu.Lock()
	names := make([]string, 0, len(b.liveNS))
	for n := range b.liveNS {
		names = append(names, n)
	}
	b.mu.Unlock()
	sort.Strings(names)
	var errs []string
	for _, n := range names {
		if err := netops.DeleteNamedNS(n); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if b.jsonFile != nil {
		if err := b.jsonFile.Close(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if err := os.RemoveAll(b.tmp); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// ctx returns a context for one plugin call.
func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Minute)
}
