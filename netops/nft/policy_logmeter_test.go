package nft_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nflog "github.com/florianl/go-nflog/v2"
	"github.com/google/nftables"

	"github.com/cnibox/cnibox/internal/policymodel"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/netops/nstest"
)

// The lab's meter rates: per source and rule, and the node's. Lowered from
// the defaults so that two floods on this 2-core machine are far past the
// node's rate (the old shared limit, at the same rate, would be spent).
const meterTestSource, meterTestNode = 50, 1000

// TestPolicyLogMeters is issue 60's sixth finding in the kernel: a
// NetworkPolicy isolates the pod dst for ingress, denials logged
// everywhere. Two pods flood dst with denied UDP as fast as they can, so
// that the iso-in log rule meets far more of their packets than the
// node's rate; a third pod sends 20 denied datagrams during the floods,
// each after 200 more of the floods' packets were judged. The NFLOG group
// receives all 20 of the third pod's messages, and fewer of each flood's
// than it sent (its own meter held it). With one limit per rule, as
// before, the floods spend the rule's limit and the third pod's messages
// are lost but for the few that find a token between two flood packets.
// IPv4 and IPv6 (a meter per family).
func TestPolicyLogMeters(t *testing.T) {
	nstest.RequireRoot(t)
	nft.SetLogRates(t, meterTestSource, meterTestNode)
	l := labtest.New(t, 4)
	if err := l.Host.SetSysctls(netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-iptables", Value: "1"},
		netops.SysctlSetting{Key: "net.bridge.bridge-nf-call-ip6tables", Value: "1"}); err != nil {
		t.Skipf("no br_netfilter: bridged traffic never meets the forward hook (%v)", err)
	}
	dst4, dst6 := labtest.PodAddrs(3)
	must(t, l.Host.NFT().ApplyPolicy(&nft.PolicyChange{Full: true,
		Rules: &policymodel.Rules{
			Ingress: policymodel.Tiers{Isolated: "dst", NetworkPolicy: []*policymodel.Policy{
				{ID: "np/t/deny", Tier: policymodel.TierNetworkPolicy, Subject: "dst"}}},
			Log: policymodel.FlowLog{Deny: policymodel.LogScope{All: true}},
		},
		Sets: []*policymodel.Set{policymodel.NewSet("dst", policymodel.Addrs, "dst",
			policymodel.AddrElem(dst4.Addr()), policymodel.AddrElem(dst6.Addr()))},
	}))
	msgs := readLogMessages(t, l.Host.Path())
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("IPv6 %v", v6), func(t *testing.T) { testLogMeters(t, l, msgs, v6) })
	}
}

// TestPolicyLogMeterSets: the meters' sets are in the table while its
// rules log and only then (a change of the rules makes and deletes them,
// a full sync keeps them), and PolicySets does not count them as the
// model's.
func TestPolicyLogMeterSets(t *testing.T) { labtest.OnNFT(t, "lm", testPolicyLogMeterSets) }

func testPolicyLogMeterSets(t *testing.T, k *labtest.NFT) {
	h := k.Handle
	rules := func(log policymodel.FlowLog) *policymodel.Rules {
		return &policymodel.Rules{
			Ingress: policymodel.Tiers{Isolated: "dst", NetworkPolicy: []*policymodel.Policy{
				{ID: "np/t/deny", Tier: policymodel.TierNetworkPolicy, Subject: "dst"}}},
			Log: log,
		}
	}
	sets := []*policymodel.Set{policymodel.NewSet("dst", policymodel.Addrs, "dst", policymodel.AddrElem(netip.MustParseAddr("10.98.0.2")))}
	meters := func(what string, want bool) {
		t.Helper()
		got, err := connOf(t, k).GetSets(&nftables.Table{Name: nft.PolicyTable, Family: nftables.TableFamilyINet})
		must(t, err)
		n := 0
		for _, s := range got {
			if strings.HasPrefix(s.Name, "log-") {
				n++
				if !s.Dynamic {
					t.Errorf("%s: set %s is not dynamic", what, s.Name)
				}
			}
		}
		if want && n != 3 || !want && n != 0 {
			t.Errorf("%s: %d meter sets, want them %v", what, n, want)
		}
		names, err := h.PolicySets()
		must(t, err)
		if !slices.Equal(names, []string{"attached", "dst", "pending"}) {
			t.Errorf("%s: PolicySets %v, want the model's and attached, pending", what, names)
		}
	}
	deny := policymodel.FlowLog{Deny: policymodel.LogScope{All: true}}
	must(t, h.ApplyPolicy(&nft.PolicyChange{Full: true, Rules: rules(deny), Sets: sets}))
	meters("logged", true)
	must(t, h.ApplyPolicy(&nft.PolicyChange{Full: true, Rules: rules(deny), Sets: sets}))
	meters("logged, full sync again", true)
	must(t, h.ApplyPolicy(&nft.PolicyChange{Rules: rules(policymodel.FlowLog{})}))
	meters("the log off", false)
	must(t, h.ApplyPolicy(&nft.PolicyChange{Rules: rules(policymodel.FlowLog{Staged: "dst"})}))
	meters("staged policies logged", true)
	must(t, h.ApplyPolicy(&nft.PolicyChange{Full: true, Rules: rules(policymodel.FlowLog{}), Sets: sets}))
	meters("the log off, full sync", false)
}

func testLogMeters(t *testing.T, l *labtest.Lab, msgs *logMessages, v6 bool) {
	addr := func(i int) netip.Addr {
		v4, v6a := labtest.PodAddrs(i)
		if v6 {
			return v6a.Addr()
		}
		return v4.Addr()
	}
	dst, third := addr(3), addr(2)
	isoIn := func() uint64 {
		cs, err := l.Host.NFT().PolicyCounters()
		must(t, err)
		return cs["c-iso-in"].Packets
	}

	// The floods: each pod sends to dst's UDP 9 as fast as it can until
	// the test is done with them.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	var sent [2]atomic.Uint64
	for i := range 2 {
		var c *net.UDPConn
		must(t, nstest.Run(t, l.Pods[i].Path(), func() (err error) {
			c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
			return err
		}))
		wg.Go(func() {
			defer c.Close()
			payload := []byte("flood")
			for ctx.Err() == nil {
				if _, err := c.Write(payload); err == nil {
					sent[i].Add(1)
				}
			}
		})
	}
	// wait until the iso-in rule judged n more of the floods' packets
	advance := func(n uint64) {
		t.Helper()
		from, deadline := isoIn(), time.Now().Add(time.Minute)
		for isoIn() < from+n {
			if time.Now().After(deadline) {
				t.Fatalf("the floods' packets do not reach the policy table (%d sent)", sent[0].Load()+sent[1].Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	advance(2 * meterTestNode) // a rule's limit (the old one) would be spent

	// The third pod: 20 datagrams to ports 20001-20020, one each time
	// the floods' packets advanced by 200.
	var c *net.UDPConn
	must(t, nstest.Run(t, l.Pods[2].Path(), func() (err error) {
		c, err = net.ListenUDP("udp", nil)
		return err
	}))
	defer c.Close()
	const n = 20
	floodStart, windowStart := time.Now(), isoIn()
	for i := range n {
		advance(200)
		if _, err := c.WriteToUDPAddrPort([]byte("mine"), netip.AddrPortFrom(dst, uint16(20001+i))); err != nil {
			t.Fatal(err)
		}
	}
	judged, elapsed := isoIn()-windowStart, time.Since(floodStart)

	// All 20 of the third pod's messages, within a generous wait.
	got := map[uint16]bool{}
	deadline := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case m := <-msgs.ch:
			if m.src == third && m.prefix == policymodel.LogPrefix(false, "iso-in") {
				got[m.dport] = true
			}
		case <-deadline:
			t.Fatalf("the NFLOG group got %d of the third pod's %d denied datagrams during the floods (%d packets judged on iso-in while it sent, %.0f a second; the node's rate %d a second)",
				len(got), n, judged, float64(judged)/elapsed.Seconds(), meterTestNode)
		}
	}
	stop()
	wg.Wait()
	t.Logf("%d packets judged on iso-in while the third pod sent (%.0f a second); the floods sent %d and %d",
		judged, float64(judged)/elapsed.Seconds(), sent[0].Load(), sent[1].Load())
	for i := range 2 {
		if logged := msgs.from(addr(i)); logged >= sent[i].Load() {
			t.Errorf("flood %d: %d messages of %d packets sent: its meter did not hold it", i, logged, sent[i].Load())
		}
	}
}

// logMessage is one message of the flow log's NFLOG group.
type logMessage struct {
	prefix string
	src    netip.Addr
	dport  uint16
}

// logMessages reads the flow log's NFLOG group of a namespace: every
// message into ch (dropped when ch is full), counted by source.
type logMessages struct {
	ch    chan logMessage
	mu    sync.Mutex
	bySrc map[netip.Addr]uint64
}

func (m *logMessages) from(a netip.Addr) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bySrc[a]
}

// readLogMessages binds to the flow log's NFLOG group in the namespace at
// path until the test ends.
func readLogMessages(t *testing.T, path string) *logMessages {
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	nf, err := nflog.Open(&nflog.Config{Group: policymodel.FlowLogGroup, Copymode: nflog.CopyPacket, Bufsize: 128, NetNS: int(f.Fd())})
	must(t, err)
	_ = nf.Con.SetReadBuffer(4 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); nf.Close() })
	m := &logMessages{ch: make(chan logMessage, 1<<16), bySrc: map[netip.Addr]uint64{}}
	err = nf.RegisterWithErrorFunc(ctx, func(a nflog.Attribute) int {
		if a.Prefix == nil || a.Payload == nil {
			return 0
		}
		var msg logMessage
		p := *a.Payload
		switch {
		case len(p) >= 24 && p[0]>>4 == 4:
			ihl := int(p[0]&0x0f) * 4
			msg.src = netip.AddrFrom4([4]byte(p[12:16]))
			if len(p) >= ihl+4 {
				msg.dport = uint16(p[ihl+2])<<8 | uint16(p[ihl+3])
			}
		case len(p) >= 44 && p[0]>>4 == 6:
			msg.src = netip.AddrFrom16([16]byte(p[8:24]))
			msg.dport = uint16(p[42])<<8 | uint16(p[43])
		default:
			return 0
		}
		msg.prefix = *a.Prefix
		m.mu.Lock()
		m.bySrc[msg.src]++
		m.mu.Unlock()
		select {
		case m.ch <- msg:
		default:
		}
		return 0
	}, func(error) int {
		if ctx.Err() != nil {
			return 1
		}
		return 0
	})
	must(t, err)
	return m
}
