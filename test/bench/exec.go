package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

const (
	execGroup = "exec of one call (VERSION)"
	rssGroup  = "peak RSS of one ADD (KiB)"
	sizeGroup = "size of everything installed"
)

// execPlugin runs a plugin binary the way libcni's RawExec does (stdin from
// a buffer, stdout and stderr to buffers) and returns the wall time from
// start to reaped, and stdout.
func execPlugin(path string, env []string, stdin []byte) (time.Duration, []byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(path)
	cmd.Env = env
	cmd.Stdin = bytes.NewBuffer(stdin)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		msg := strings.TrimSpace(stdout.String() + " " + stderr.String())
		return d, stdout.Bytes(), fmt.Errorf("%s: %w: %s", filepath.Base(path), err, msg)
	}
	return d, stdout.Bytes(), nil
}

// execRSS runs a plugin through the RSS wrapper and returns its stdout and
// peak RSS in KiB.
func (b *bench) execRSS(path string, env []string, stdin []byte) (int64, []byte, error) {
	if b.rsswrap == "" {
		return 0, nil, fmt.Errorf("no RSS wrapper (its build failed)")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(b.rsswrap, path)
	cmd.Env = env
	cmd.Stdin = bytes.NewBuffer(stdin)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	errText := stderr.String()
	var kib int64 = -1
	if i := strings.LastIndex(errText, rssMarker); i >= 0 {
		fmt.Sscan(errText[i+len(rssMarker):], &kib)
		errText = errText[:i]
	}
	if err != nil {
		return kib, stdout.Bytes(), fmt.Errorf("%s: %w: %s", filepath.Base(path), err, strings.TrimSpace(stdout.String()+" "+errText))
	}
	if kib < 0 {
		return kib, stdout.Bytes(), fmt.Errorf("%s: the RSS wrapper reported nothing", filepath.Base(path))
	}
	return kib, stdout.Bytes(), nil
}

// recordRSS keeps one peak RSS (KiB).
func (b *bench) recordRSS(plugin, side string, kib int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rss == nil {
		b.rss = map[string][]int64{}
	}
	b.rss[plugin+"|"+side] = append(b.rss[plugin+"|"+side], kib)
}

// rssMedian returns the median peak RSS (KiB) of a plugin on a side, or -1.
func (b *bench) rssMedian(plugin, side string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := append([]int64(nil), b.rss[plugin+"|"+side]...)
	if len(v) == 0 {
		return -1
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return v[len(v)/2]
}

// runExec times CNI_COMMAND=VERSION of every plugin both sides have (in
// the enabled cases), alternating ours and the reference, next to the floors
// of exec'ing /bin/true and a static Go binary that does nothing.
func (b *bench) runExec() {
	b.useLog("other", "")
	type target struct{ mode, side, path string }
	var targets []target
	for _, p := range b.execPlugins() {
		for _, s := range b.sides {
			targets = append(targets, target{p, s.name, filepath.Join(s.binDir, p)})
		}
	}
	targets = append(targets, target{"/bin/true", floorSide, "/bin/true"})
	if b.nop != "" {
		targets = append(targets, target{"static Go binary doing nothing", floorSide, b.nop})
	}
	env := append(os.Environ(), "CNI_COMMAND=VERSION")
	stdin := []byte(`{"cniVersion":"1.0.0"}`)
	b.logf("exec cost: %d runs of %d binaries", b.o.execRuns, len(targets))
	for i := 0; i < b.o.execRuns && !b.stopping.Load(); i++ {
		for _, t := range targets {
			d, out, err := execPlugin(t.path, env, stdin)
			if err == nil && t.side != floorSide && !bytes.Contains(out, []byte("supportedVersions")) {
				err = fmt.Errorf("VERSION printed %q", out)
			}
			b.recordOne(execGroup, t.mode, "VERSION", t.side, d, err)
			if err != nil && i == 0 {
				b.fail("exec %s: %v", t.path, err)
			}
		}
	}
}

// execPlugins are the plugin types of the enabled cases, or bridge and
// host-local when only exec is asked for.
func (b *bench) execPlugins() []string {
	seen := map[string]bool{}
	var out []string
	cases := b.cases
	if len(cases) == 0 {
		cases = cniCases[:1]
	}
	for _, c := range cases {
		for _, p := range c.plugins {
			if !seen[p] && b.sides[0].plugins[p] && b.sides[1].plugins[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// runRSS execs the plugins of the largest enabled case directly (libcni
// hides the process) for a few ADDs per side and records each process's
// peak RSS from wait4's rusage. The reference bridge's number covers the
// host-local it execs too (the kernel folds waited-for children's peak into
// their parent's). DEL follows, directly too, and the usual checks.
func (b *bench) runRSS() {
	c := cniCases[0]
	if len(b.cases) > 0 {
		c = b.cases[len(b.cases)-1]
	}
	// The floor leaves its own masquerade chain: compare with now.
	if snap, err := takeNFT(); err == nil {
		b.baseline = snap
	}
	for i := 0; i < b.o.rssRuns && !b.stopping.Load(); i++ {
		for _, s := range b.sides {
			b.rssOnce(c, s, i)
		}
		// The measurement's floor: the wrapper's own peak.
		for _, f := range []string{"/bin/true", b.nop} {
			if f == "" {
				continue
			}
			if kib, _, err := b.execRSS(f, os.Environ(), nil); err == nil {
				b.recordRSS(rssFloorName(f), floorSide, kib)
			}
		}
	}
}

func rssFloorName(path string) string {
	if path == "/bin/true" {
		return "floor: wrapper + /bin/true"
	}
	return "floor: wrapper + static Go binary doing nothing"
}

func (b *bench) rssOnce(c *cniCase, s *side, i int) {
	what := fmt.Sprintf("peak RSS %s %s run %d", c.name, s.name, i)
	nsName, nsPath, err := b.newNS()
	if err != nil {
		b.fail("%s: create pod namespace: %v", what, err)
		return
	}
	defer b.deleteNS(nsName)
	id := containerID("rss", os.Getpid(), i, s.name)
	cniArgs := "IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=rss-" + fmt.Sprint(i) + ";K8S_POD_INFRA_CONTAINER_ID=" + id
	env := func(cmd string) []string {
		return append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID="+id, "CNI_NETNS="+nsPath,
			"CNI_IFNAME=eth0", "CNI_ARGS="+cniArgs, "CNI_PATH="+s.binDir)
	}
	confs := c.pluginConfs(s, b.o.n)
	var prev json.RawMessage
	var added []int
	for j, pc := range confs {
		conf := b.injectConf(pc, c.cniVersion(), prev, 25000+i)
		typ := pc["type"].(string)
		kib, out, err := b.execRSS(filepath.Join(s.binDir, typ), env("ADD"), conf)
		if err != nil {
			b.fail("%s: ADD %s: %v", what, typ, err)
			break
		}
		added = append(added, j)
		b.recordRSS(typ, s.name, kib)
		prev = out
	}
	for k := len(added) - 1; k >= 0; k-- {
		pc := confs[added[k]]
		typ := pc["type"].(string)
		if _, _, err := execPlugin(filepath.Join(s.binDir, typ), env("DEL"), b.injectConf(pc, c.cniVersion(), prev, 25000+i)); err != nil {
			b.fail("%s: DEL %s: %v", what, typ, err)
		}
	}
	b.checkClean(what, s, c, nil)
}

// injectConf builds a plugin's stdin like libcni: the network's name and
// cniVersion, the previous result, the capability args it asks for.
func (b *bench) injectConf(pc map[string]any, version string, prev json.RawMessage, hostPort int) []byte {
	m := map[string]any{}
	for k, v := range pc {
		m[k] = v
	}
	m["name"] = netName
	m["cniVersion"] = version
	if prev != nil {
		m["prevResult"] = prev
	}
	if caps, ok := pc["capabilities"].(map[string]bool); ok && caps["portMappings"] {
		m["runtimeConfig"] = map[string]any{"portMappings": []map[string]any{
			{"hostPort": hostPort, "containerPort": 80, "protocol": "tcp"},
		}}
	}
	bs, _ := json.Marshal(m)
	return bs
}

// sizes of everything installed: cnibox plus its symlinks, against the sum
// of the reference directory's files.
type sizes struct {
	ours, ref           int64
	oursFiles, refFiles int
}

func (b *bench) runSizes() {
	var sz sizes
	if st, err := os.Stat(b.bin); err == nil {
		sz.ours, sz.oursFiles = st.Size(), 1
	}
	ents, _ := os.ReadDir(b.sides[0].binDir)
	for _, e := range ents {
		if st, err := os.Lstat(filepath.Join(b.sides[0].binDir, e.Name())); err == nil {
			sz.ours += st.Size()
			sz.oursFiles++
		}
	}
	filepath.WalkDir(b.refDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			sz.ref += st.Size()
			sz.refFiles++
		}
		return nil
	})
	b.sizes = &sz
}

// median of a sorted copy.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
