package netops

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Traffic control (tc) for the bandwidth role: a token bucket filter (tbf)
// as the root qdisc of a link, ifb devices, and the ingress qdisc with a u32
// match-all filter whose mirred action redirects a link's incoming packets
// to an ifb, where a tbf shapes them.

// TBFLatency is how long a packet may wait in a tbf queue, as in the
// reference bandwidth plugin: the queue holds the burst plus this much
// traffic at the rate.
const TBFLatency = 25 * time.Millisecond

const (
	tbfHandle     = 0x10000    // 1:0
	ingressHandle = 0xffff0000 // ffff:0
	// maxBufferNS is the longest bucket the kernel keeps (it caps the
	// buffer at ~0U nanoseconds).
	maxBufferNS = math.MaxUint32
	nsPerTick   = 64 // PSCHED_SHIFT 6
)

// TBF is a token bucket filter as the kernel keeps it.
type TBF struct {
	Rate   uint64 // bytes per second
	Buffer uint32 // bucket size in scheduler ticks (the burst at Rate)
	Limit  uint32 // queue length in bytes
}

// NewTBF computes the tbf that shapes to rate bytes per second with a burst
// of burst bytes, the way tc and the reference plugin do. A bucket longer
// than the kernel keeps (about 4.29 s at the rate) is capped to that, and a
// limit beyond 32 bits to the largest one, so the result is what the kernel
// reports back.
func NewTBF(rate, burst uint64) TBF {
	if rate == 0 {
		return TBF{}
	}
	usec := float64(burst) * float64(netlink.TIME_UNITS_PER_SEC) / float64(rate)
	ticks := usec * netlink.TickInUsec()
	maxTicks := float64(maxBufferNS / nsPerTick)
	if ticks > maxTicks {
		ticks = maxTicks
	}
	limit := float64(rate)*TBFLatency.Seconds() + float64(burst)
	if limit > math.MaxUint32 {
		limit = math.MaxUint32
	}
	return TBF{Rate: rate, Buffer: uint32(ticks), Limit: uint32(limit)}
}

// EnsureRootTBF makes t the root qdisc (handle 1:) of the link called name,
// replacing whatever root qdisc it had.
func (h *Handle) EnsureRootTBF(name string, t TBF) error {
	if t.Rate == 0 {
		return fmt.Errorf("tbf on %q: zero rate", name)
	}
	err := h.withLinkIndex(name, func(idx int) error {
		return h.nlh.QdiscReplace(&netlink.Tbf{
			QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: tbfHandle, Parent: netlink.HANDLE_ROOT},
			Rate:       t.Rate, Buffer: t.Buffer, Limit: t.Limit,
		})
	})
	if err != nil {
		return fmt.Errorf("tbf on %q in %s: %w", name, h.where(), classify(err))
	}
	return nil
}

// RootTBF returns the root qdisc of the link called name when it is a tbf;
// found is false when the root qdisc is something else. The error wraps
// ErrNotFound when there is no such link.
func (h *Handle) RootTBF(name string) (t TBF, found bool, err error) {
	q, err := h.getQdisc(name, netlink.HANDLE_ROOT)
	if err != nil || q.kind != "tbf" {
		return TBF{}, false, err
	}
	return q.tbf, true, nil
}

// DeleteRootTBF removes the root qdisc of the link called name when it is a
// tbf (the link falls back to its default qdisc). A missing link or another
// root qdisc is not an error.
func (h *Handle) DeleteRootTBF(name string) error {
	return h.deleteQdisc(name, netlink.HANDLE_ROOT, "tbf", func(q qdiscInfo) netlink.Qdisc {
		return &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: q.ifindex, Handle: q.handle, Parent: netlink.HANDLE_ROOT}}
	})
}

// EnsureIfb makes sure an ifb device called name exists and is up, created
// with the given MTU (0 = kernel default); created reports whether it was
// made now. A link of another kind with that name is an error wrapping
// ErrExists.
func (h *Handle) EnsureIfb(name string, mtu int) (l Link, created bool, err error) {
	if err := checkIfName("ensure ifb", name); err != nil {
		return Link{}, false, err
	}
	l, err = h.LinkByName(name)
	switch {
	case err == nil && l.Kind != "ifb":
		return Link{}, false, fmt.Errorf("ensure ifb %q in %s: a %q link has that name: %w", name, h.where(), l.Kind, ErrExists)
	case err == nil && !l.Up:
		if err := h.SetLinkUp(name); err != nil {
			return Link{}, false, err
		}
		l.Up = true
		return l, false, nil
	case err == nil:
		return l, false, nil
	case !errors.Is(err, ErrNotFound):
		return Link{}, false, fmt.Errorf("ensure ifb %q: %w", name, err)
	}
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Change, msg.Flags = unix.IFF_UP, unix.IFF_UP
	attrs := []nl.NetlinkRequestData{nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name))}
	if mtu > 0 {
		attrs = append(attrs, nl.NewRtAttr(unix.IFLA_MTU, u32(mtu)))
	}
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("ifb"))
	attrs = append(attrs, info)
	l, echoed, err := h.createLink(msg, attrs...)
	if err != nil {
		return Link{}, false, fmt.Errorf("create ifb %q in %s: %w", name, h.where(), kindErr("ifb", err))
	}
	if !echoed {
		l, err = h.LinkByName(name)
		return l, err == nil, err
	}
	return l, true, nil
}

// EnsureIngressRedirect makes every packet that arrives on the link called
// name go out of the link called to instead: an ingress qdisc (ffff:) on
// name with a u32 match-all filter whose mirred action redirects to to's
// egress. An existing redirect to to is kept; one to another device is
// replaced.
func (h *Handle) EnsureIngressRedirect(name, to string) error {
	what := fmt.Sprintf("redirect ingress of %q to %q in %s", name, to, h.where())
	target, _, err := h.linkIndex(to)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	q, err := h.getQdisc(name, netlink.HANDLE_INGRESS)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case q.kind == "":
		if err := h.nlh.QdiscAdd(&netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: q.ifindex, Handle: ingressHandle, Parent: netlink.HANDLE_INGRESS}}); err != nil {
			return fmt.Errorf("%s: add ingress qdisc: %w", what, classify(err))
		}
	case q.kind != "ingress":
		return fmt.Errorf("%s: the ingress qdisc is %q: %w", what, q.kind, ErrExists)
	default:
		have, err := h.redirects(q.ifindex)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for _, f := range have {
			if f.to == target {
				return nil
			}
		}
		for _, f := range have {
			if err := h.nlh.FilterDel(f.filter); err != nil && !isNotFound(err) {
				return fmt.Errorf("%s: delete old redirect: %w", what, classify(err))
			}
		}
	}
	filter := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: q.ifindex, Parent: ingressHandle, Priority: 1, Protocol: unix.ETH_P_ALL,
		},
		Actions: []netlink.Action{netlink.NewMirredAction(target)},
	}
	if err := h.nlh.FilterAdd(filter); err != nil {
		return fmt.Errorf("%s: add filter: %w", what, classify(err))
	}
	return nil
}

// IngressRedirect returns the ifindex that packets arriving on the link
// called name are redirected to by a mirred filter on its ingress qdisc;
// found is false when there is none.
func (h *Handle) IngressRedirect(name string) (to int, found bool, err error) {
	q, err := h.getQdisc(name, netlink.HANDLE_INGRESS)
	if err != nil || q.kind != "ingress" {
		return 0, false, err
	}
	rs, err := h.redirects(q.ifindex)
	if err != nil || len(rs) == 0 {
		return 0, false, err
	}
	return rs[0].to, true, nil
}

// DeleteIngressQdisc removes the ingress qdisc of the link called name and
// with it its filters. A missing link or qdisc is not an error.
func (h *Handle) DeleteIngressQdisc(name string) error {
	return h.deleteQdisc(name, netlink.HANDLE_INGRESS, "ingress", func(q qdiscInfo) netlink.Qdisc {
		return &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: q.ifindex, Handle: ingressHandle, Parent: netlink.HANDLE_INGRESS}}
	})
}

// deleteQdisc removes the qdisc at parent of the link called name when it is
// of kind, deleting the one qdisc(q) describes. A missing link or qdisc, or
// one of another kind, is not an error.
func (h *Handle) deleteQdisc(name string, parent uint32, kind string, qdisc func(q qdiscInfo) netlink.Qdisc) error {
	q, err := h.getQdisc(name, parent)
	if isNotFound(err) || (err == nil && q.kind != kind) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := h.nlh.QdiscDel(qdisc(q)); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s qdisc of %q in %s: %w", kind, name, h.where(), classify(err))
	}
	return nil
}

// redirect is a mirred filter on an ingress qdisc.
type redirect struct {
	filter netlink.Filter
	to     int
}

// redirects lists the u32 filters with a mirred redirect on the ingress
// qdisc of the link with index idx.
func (h *Handle) redirects(idx int) ([]redirect, error) {
	fs, err := retryDump(func() ([]netlink.Filter, error) {
		return h.nlh.FilterList(indexOnly(idx), ingressHandle)
	})
	if err != nil {
		return nil, fmt.Errorf("list ingress filters of link %d in %s: %w", idx, h.where(), classify(err))
	}
	var out []redirect
	for _, f := range fs {
		u, ok := f.(*netlink.U32)
		if !ok {
			continue
		}
		for _, a := range u.Actions {
			if m, ok := a.(*netlink.MirredAction); ok && m.MirredAction == netlink.TCA_EGRESS_REDIR {
				out = append(out, redirect{filter: f, to: m.Ifindex})
			}
		}
	}
	return out, nil
}

// qdiscInfo is what getQdisc reports about one qdisc.
type qdiscInfo struct {
	ifindex int // set whenever the link exists
	handle  uint32
	kind    string
	tbf     TBF
}

// getQdisc asks the kernel for the qdisc at parent (HANDLE_ROOT or
// HANDLE_INGRESS) of the link called name, without a dump of every qdisc of
// the namespace. When there is no qdisc there, kind is "". The error wraps
// ErrNotFound when the link is missing.
func (h *Handle) getQdisc(name string, parent uint32) (qdiscInfo, error) {
	var q qdiscInfo
	err := h.withLinkIndex(name, func(idx int) error {
		q = qdiscInfo{ifindex: idx}
		// The kernel answers a single-qdisc get like a change: to the
		// RTNLGRP_TC group, and to the asker only with NLM_F_ECHO. It sends
		// nothing for a built-in qdisc (noop, noqueue); the ack ends the wait.
		req := nl.NewNetlinkRequest(unix.RTM_GETQDISC, unix.NLM_F_ACK|unix.NLM_F_ECHO)
		req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(idx), Parent: parent})
		msgs, err := h.rtExec(req, unix.RTM_NEWQDISC)
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil // the link exists (ENODEV otherwise), the qdisc does not
		case err != nil:
			return err
		case len(msgs) == 0:
			return nil
		}
		if err := parseQdisc(msgs[0], &q); err != nil {
			return err
		}
		if q.kind == "noop" {
			// What an ingress queue keeps once its qdisc is deleted.
			q.kind = ""
		}
		return nil
	})
	if err != nil {
		return qdiscInfo{}, fmt.Errorf("get qdisc of %q in %s: %w", name, h.where(), classify(err))
	}
	return q, nil
}

// parseQdisc decodes an RTM_NEWQDISC message: the kind, and the parameters
// of a tbf.
func parseQdisc(m []byte, q *qdiscInfo) error {
	if len(m) < nl.SizeofTcMsg {
		return fmt.Errorf("short RTM_NEWQDISC message (%d bytes)", len(m))
	}
	q.handle = nl.DeserializeTcMsg(m).Handle
	attrs, err := nl.ParseRouteAttr(m[nl.SizeofTcMsg:])
	if err != nil {
		return fmt.Errorf("parse RTM_NEWQDISC: %w", err)
	}
	var opts []byte
	for _, a := range attrs {
		switch a.Attr.Type & nlaTypeMask {
		case nl.TCA_KIND:
			q.kind = unix.ByteSliceToString(a.Value)
		case nl.TCA_OPTIONS:
			opts = a.Value
		}
	}
	if q.kind != "tbf" || opts == nil {
		return nil
	}
	data, err := nl.ParseRouteAttr(opts)
	if err != nil {
		return fmt.Errorf("parse tbf options: %w", err)
	}
	for _, d := range data {
		switch d.Attr.Type & nlaTypeMask {
		case nl.TCA_TBF_PARMS:
			if len(d.Value) < nl.SizeofTcTbfQopt {
				return fmt.Errorf("short tbf parameters (%d bytes)", len(d.Value))
			}
			p := nl.DeserializeTcTbfQopt(d.Value)
			if q.tbf.Rate == 0 {
				q.tbf.Rate = uint64(p.Rate.Rate)
			}
			q.tbf.Buffer, q.tbf.Limit = p.Buffer, p.Limit
		case nl.TCA_TBF_RATE64:
			if len(d.Value) >= 8 {
				q.tbf.Rate = nl.NativeEndian().Uint64(d.Value)
			}
		}
	}
	return nil
}
