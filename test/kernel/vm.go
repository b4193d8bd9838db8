package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// Console markers the guest's /init prints and the host parses.
const (
	markPrefix = "CNIBOX-TEST-KERNEL-"
	markUname  = "CNIBOX-TEST-KERNEL-UNAME"
	markStatus = "CNIBOX-TEST-KERNEL-STATUS"
	markDone   = "CNIBOX-TEST-KERNEL-DONE"
)

// initScript is the guest's /init (busybox sh): the mounts a test may need,
// every module in load order, then every test binary from the disk, each in
// its package's source directory, as make test runs them; then the second
// pass (forwarding.go).
const initScript = `#!/bin/busybox sh
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /run /tmp /t /root /var
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin LD_LIBRARY_PATH=/lib/x86_64-linux-gnu HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /dev/net
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
ln -s /run /var/run
mkdir -p /run/netns
while read -r cmd path opts; do
	insmod "$path" $opts 2>/dev/null
done < /modules
[ -c /dev/net/tun ] || mknod /dev/net/tun c 10 200
ip link set lo up
echo "` + markUname + ` $(uname -r)"
for i in 1 2 3 4 5 6 7 8 9 10; do [ -b /dev/vda ] && break; sleep 0.5; done
if ! mount -t ext4 /dev/vda /t; then
	echo "` + markDone + `"
	poweroff -f
fi
for t in /usr/bin/etcd /usr/lib/cni; do
	[ -e "/t/host$t" ] && mkdir -p "$(dirname $t)" && ln -s "/t/host$t" "$t"
done
# Under TCG every call is several times slower, so 200 concurrent plugin
# processes wait for the store's lock longer than its 10 s default: the
# tests' deadline is generous here too (tests of the timeout set their own).
export CNIBOX_STORE_TIMEOUT=60s
# A package's time limit: test/reliability took over 20 minutes here with the
# host busy; the VM's own -timeout bounds the whole run.
# flanneld's iptables mode runs iptables, iptables-save and iptables-restore
# by those names (Debian's alternatives; the multi-call binary answers to
# each).
for n in iptables ip6tables iptables-save ip6tables-save iptables-restore ip6tables-restore; do ln -s /usr/sbin/iptables-nft /usr/sbin/$n; done
[ -d /t/flanneld ] && export CNIBOX_FLANNELD_DIR=/t/flanneld
export CNIBOX_TEST_KERNEL=1 CNIBOX_BIN=/t/bin/cnibox CNIBOX_FAULT_BIN=/t/bin/cnibox-fault CNIBOX_REF_UPSTREAM=/t/upstream
args=$(cat /t/testargs)
# runpkgs LIST [SUFFIX]: every test binary of LIST (a line each: its
# directory, its binary, a -test.skip and a -test.run of its own, "-" for
# none; its own run wins over -run's), its status reported as the
# package's directory followed by SUFFIX.
runpkgs() {
	while read -r dir bin skip run; do
		[ "$skip" = - ] && skip=
		[ "$run" = - ] && run=
		echo "=== package $dir$2${run:+ (-run $run)}"
		start=$(date +%s)
		(cd "/t/src/$dir" && "/t/tests/$bin" -test.v -test.count=1 -test.timeout=45m ${skip:+"-test.skip=$skip"} $args ${run:+"-test.run=$run"} < /dev/null 2>&1)
		rc=$?
		echo "` + markStatus + ` $dir$2 $rc $(($(date +%s) - start))"
	done < "$1"
}
runpkgs /t/packages
` + forwardingScript + `sync
echo "` + markDone + `"
poweroff -f
`

// result is what the guest reported on its console.
type result struct {
	uname   string
	status  map[string]int // exit status by package directory ("." for the root)
	seconds map[string]int // run time by package directory
	done    bool
}

// boot runs the kernel under qemu (TCG: no nested virtualization here),
// copies its console to stdout and parses the markers.
func boot(o options, initrd, disk string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64",
		"-accel", "tcg", "-cpu", "max", "-m", strconv.Itoa(o.memMB), "-smp", strconv.Itoa(o.smp),
		"-nographic", "-no-reboot", "-nic", "none",
		"-kernel", o.kernel, "-initrd", initrd,
		"-drive", "file="+disk+",format=raw,if=virtio",
		"-append", "console=ttyS0 quiet panic=-1 oops=panic")
	cmd.Stdin = nil
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	if err := cmd.Start(); err != nil {
		return result{}, fmt.Errorf("start qemu: %w", err)
	}
	res := parseConsole(out, os.Stdout)
	if err := cmd.Wait(); err != nil && !res.done {
		fmt.Fprintf(os.Stderr, "test-kernel: qemu: %v\n", err)
	}
	return res, nil
}

// parseConsole copies the console to w line by line and collects the
// markers.
func parseConsole(r io.Reader, w io.Writer) result {
	res := result{status: map[string]int{}, seconds: map[string]int{}}
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		line = strings.ReplaceAll(line, "\r", "")
		if line != "" {
			io.WriteString(w, line)
			var f []string
			if i := strings.Index(line, markPrefix); i >= 0 { // after any terminal escapes
				f = strings.Fields(line[i:])
			}
			switch {
			case len(f) == 2 && f[0] == markUname:
				res.uname = f[1]
			case len(f) == 4 && f[0] == markStatus:
				if n, err := strconv.Atoi(f[2]); err == nil {
					res.status[f[1]] = n
				}
				if n, err := strconv.Atoi(f[3]); err == nil {
					res.seconds[f[1]] = n
				}
			case len(f) == 1 && f[0] == markDone:
				res.done = true
			}
		}
		if err != nil {
			return res
		}
	}
}
