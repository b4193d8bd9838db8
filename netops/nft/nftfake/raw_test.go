package nftfake_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/netops/nft/nftfake"
	"github.com/cnibox/cnibox/netops/nstest"
)

// Raw messages, as netops/nft sends them beside google/nftables' builder.

func rawMsg(typ int, flags mdnetlink.HeaderFlags, as ...mdnetlink.Attribute) mdnetlink.Message {
	b, err := mdnetlink.MarshalAttributes(as)
	if err != nil {
		panic(err)
	}
	return mdnetlink.Message{
		Header: mdnetlink.Header{Type: mdnetlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | typ), Flags: mdnetlink.Request | flags},
		Data:   append([]byte{unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0}, b...),
	}
}

func cs(s string) []byte { return append([]byte(s), 0) }

func nested(typ uint16, as ...mdnetlink.Attribute) mdnetlink.Attribute {
	b, _ := mdnetlink.MarshalAttributes(as)
	return mdnetlink.Attribute{Type: typ | mdnetlink.Nested, Data: b}
}

// elemMsg is a set element message of set s of table diff for key, with
// a timeout (ms) when timeout > 0.
func elemMsg(typ int, flags mdnetlink.HeaderFlags, table, set string, key []byte, timeout uint64) mdnetlink.Message {
	elem := []mdnetlink.Attribute{nested(unix.NFTA_SET_ELEM_KEY, mdnetlink.Attribute{Type: unix.NFTA_DATA_VALUE, Data: key})}
	if timeout > 0 {
		elem = append(elem, mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_TIMEOUT, Data: binary.BigEndian.AppendUint64(nil, timeout)})
	}
	return rawMsg(typ, flags,
		mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: cs(table)},
		mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: cs(set)},
		nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS, nested(1, elem...)))
}

// batch sends msgs (each with the ack flag) in one batch and collects
// their acks, as netops/nft's sendBatch does.
func batch(c *mdnetlink.Conn, msgs ...mdnetlink.Message) error {
	hdr := func(t int) mdnetlink.Message {
		return mdnetlink.Message{Header: mdnetlink.Header{Type: mdnetlink.HeaderType(t), Flags: mdnetlink.Request},
			Data: []byte{0, 0, 0, unix.NFNL_SUBSYS_NFTABLES}}
	}
	all := append(append([]mdnetlink.Message{hdr(unix.NFNL_MSG_BATCH_BEGIN)}, msgs...), hdr(unix.NFNL_MSG_BATCH_END))
	if _, err := c.SendMessages(all); err != nil {
		return err
	}
	var errs []error
	for range msgs {
		if _, err := c.Receive(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// gen reads the generation with GETGEN.
func gen(t *testing.T, c *mdnetlink.Conn) uint32 {
	msgs, err := c.Execute(mdnetlink.Message{Header: mdnetlink.Header{Type: unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN, Flags: mdnetlink.Request},
		Data: []byte{0, 0, 0, 0}})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("GETGEN: %v, %d messages", err, len(msgs))
	}
	ad, err := mdnetlink.NewAttributeDecoder(msgs[0].Data[4:])
	if err != nil {
		t.Fatal(err)
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		if ad.Type() == unix.NFTA_GEN_ID {
			return ad.Uint32()
		}
	}
	t.Fatal("GETGEN: no NFTA_GEN_ID")
	return 0
}

var (
	k1    = []byte{10, 0, 0, 1}
	k2    = []byte{10, 0, 0, 2}
	k9    = []byte{10, 0, 0, 9} // in no set
	tmoKw = mdnetlink.Acknowledge | mdnetlink.Create
)

// destroyMissing is what DESTROYSETELEM says of a missing set or table:
// it ignores missing elements only.
const destroyMissing = unix.ENOENT

// rawSteps are raw batches (and single gets) compared on both kernels.
var rawSteps = []struct {
	name string
	want unix.Errno // 0: ok
	do   func(c *mdnetlink.Conn) error
}{
	{"NEWSET without NLM_F_CREATE asserts a missing set", unix.ENOENT, func(c *mdnetlink.Conn) error {
		return batch(c, rawMsg(unix.NFT_MSG_NEWSET, mdnetlink.Acknowledge,
			mdnetlink.Attribute{Type: unix.NFTA_SET_TABLE, Data: cs("diff")}, mdnetlink.Attribute{Type: unix.NFTA_SET_NAME, Data: cs("nope")},
			mdnetlink.Attribute{Type: unix.NFTA_SET_KEY_TYPE, Data: []byte{0, 0, 0, 7}}, mdnetlink.Attribute{Type: unix.NFTA_SET_KEY_LEN, Data: []byte{0, 0, 0, 4}},
			mdnetlink.Attribute{Type: unix.NFTA_SET_ID, Data: []byte{0, 0, 0, 77}}))
	}},
	{"elements with and without a timeout", 0, func(c *mdnetlink.Conn) error {
		return batch(c, elemMsg(unix.NFT_MSG_NEWSETELEM, tmoKw, "diff", "tmo", k1, 3600_000), elemMsg(unix.NFT_MSG_NEWSETELEM, tmoKw, "diff", "tmo", k2, 0))
	}},
	{"a timeout updated (no NLM_F_EXCL)", 0, func(c *mdnetlink.Conn) error {
		return batch(c, elemMsg(unix.NFT_MSG_NEWSETELEM, tmoKw, "diff", "tmo", k2, 7200_000))
	}},
	{"EEXIST: the element again with NLM_F_EXCL", unix.EEXIST, func(c *mdnetlink.Conn) error {
		return batch(c, elemMsg(unix.NFT_MSG_NEWSETELEM, tmoKw|mdnetlink.Excl, "diff", "tmo", k2, 0))
	}},
	{"EINVAL: a timeout in a set without the flag", unix.EINVAL, func(c *mdnetlink.Conn) error {
		return batch(c, elemMsg(unix.NFT_MSG_NEWSETELEM, tmoKw, "diff", "addrs", k1, 1000))
	}},
	{"a single get of an element", 0, func(c *mdnetlink.Conn) error {
		_, err := c.Execute(elemMsg(unix.NFT_MSG_GETSETELEM, 0, "diff", "tmo", k1, 0))
		return err
	}},
	{"ENOENT: a single get of a missing element", unix.ENOENT, func(c *mdnetlink.Conn) error {
		_, err := c.Execute(elemMsg(unix.NFT_MSG_GETSETELEM, 0, "diff", "addrs", k9, 0))
		return err
	}},
	{"ENOENT: a single get of a missing chain", unix.ENOENT, func(c *mdnetlink.Conn) error {
		_, err := c.Execute(rawMsg(unix.NFT_MSG_GETCHAIN, 0,
			mdnetlink.Attribute{Type: unix.NFTA_CHAIN_TABLE, Data: cs("diff")}, mdnetlink.Attribute{Type: unix.NFTA_CHAIN_NAME, Data: cs("nope")}))
		return err
	}},
	{"DESTROYSETELEM: a missing element is no error", 0, func(c *mdnetlink.Conn) error {
		return batch(c, elemMsg(0x1e, mdnetlink.Acknowledge, "diff", "addrs", k9, 0), elemMsg(0x1e, mdnetlink.Acknowledge, "diff", "tmo", k1, 0))
	}},
	{"DESTROYSETELEM: a missing set", destroyMissing, func(c *mdnetlink.Conn) error {
		return batch(c, elemMsg(0x1e, mdnetlink.Acknowledge, "diff", "nope", k2, 0))
	}},
	{"DESTROYSETELEM: a missing table", destroyMissing, func(c *mdnetlink.Conn) error {
		return batch(c, elemMsg(0x1e, mdnetlink.Acknowledge, "nope", "nope", k2, 0))
	}},
	{"ENOENT: DELSETELEM of a missing element", unix.ENOENT, func(c *mdnetlink.Conn) error {
		// k9, in no set: k1 is gone only where DESTROYSETELEM is (6.3 on)
		return batch(c, elemMsg(unix.NFT_MSG_DELSETELEM, mdnetlink.Acknowledge, "diff", "tmo", k9, 0))
	}},
	{"an empty batch (netops/nft's barrier): nothing answered, the generation stays", 0, func(c *mdnetlink.Conn) error {
		return batch(c) // (an answer would fail the next step's GETGEN: a sequence it did not ask for)
	}},
	{"ENOENT: a set element dump of a missing set", unix.ENOENT, func(c *mdnetlink.Conn) error {
		_, err := c.Execute(rawMsg(unix.NFT_MSG_GETSETELEM, mdnetlink.Dump,
			mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: cs("diff")}, mdnetlink.Attribute{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: cs("nope")}))
		return err
	}},
}

// TestDifferentialRaw: netops/nft's raw requests (DESTROYSETELEM, element
// timeouts, single gets, NEWSET as an assertion) give the same errors and
// leave the same tables on the kernel and the fake, and each committed
// batch that changes something starts one generation on both.
func TestDifferentialRaw(t *testing.T) {
	ns := nstest.NewNS(t, "nftr")
	f, err := os.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kc, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	kr, err := mdnetlink.Dial(unix.NETLINK_NETFILTER, &mdnetlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	major, minor := kernelRelease(t)
	k := nftfake.New().Release(major, minor) // the fake as the kernel it is compared with
	fc, _ := k.Conn()
	fr := nltest.Dial(k.Dial())
	for _, s := range steps[:3] { // the table, its sets and elements
		if err := s.do(kc); err != nil {
			t.Fatal(err)
		}
		if err := s.do(fc); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range rawSteps {
		kg, fg := gen(t, kr), gen(t, fr)
		ke, fe := errText(s.do(kr)), errText(s.do(fr))
		want := "ok"
		if s.want != 0 {
			want = s.want.Error()
		}
		if strings.HasPrefix(s.name, "DESTROY") && (major < 6 || major == 6 && minor < 3) {
			want = unix.EINVAL.Error() // DESTROY* came with 6.3
		}
		if ke != want {
			t.Errorf("%s: the kernel says %s, the test expects %s", s.name, ke, want)
		}
		if ke != fe {
			t.Errorf("%s: the kernel says %s, the fake %s", s.name, ke, fe)
		}
		if kd, fd := gen(t, kr)-kg, gen(t, fr)-fg; kd != fd {
			t.Errorf("%s: the kernel's generation moved %d, the fake's %d", s.name, kd, fd)
		}
		if kd, fd := dump(t, kc), dump(t, fc); kd != fd {
			t.Errorf("after %s:\nkernel:\n%s\nfake:\n%s", s.name, kd, fd)
		}
	}
	if err := k.Err(); err != nil {
		t.Error(err)
	}
}

// kernelRelease is the running kernel's major and minor version.
func kernelRelease(t *testing.T) (major, minor int) {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", unix.ByteSliceToString(u.Release[:]), err)
	}
	return major, minor
}
