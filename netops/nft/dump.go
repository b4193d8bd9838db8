package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The kernel's dumps and their consistency. A dump long enough to take
// several netlink messages is read in several passes over the kernel's
// objects, and a commit between two passes leaves it inconsistent (an
// object seen twice, or not at all): nf_tables then marks the messages
// NLM_F_DUMP_INTR. The netlink package the nftables library rides on
// passes the flag on and says nothing, so this package's own dumps go
// through dump, which reads them again until they come whole, and every
// dump, the library's too, through consistently, which reads it again
// while the ruleset's generation changed under it.
//
// A set's elements are dumped with no such flag (Linux 6.18), and
// a set's hash table that grows or shrinks while a dump walks it (the
// kernel resizes it later, off the commit that filled it) reorders the
// walk with no commit at all: the walk starts again within a message
// (elements seen twice), or the next message skips as many elements as
// were sent in an order that is no more (elements seen twice, and as many
// not seen). So dumpFamilyElems reads under consistently and reads again
// when an element came twice: a dump with no repeat and no commit within
// it missed nothing (a set holds one element per key).

// errDumpInterrupted is a dump the kernel said was interrupted, every try.
var errDumpInterrupted = errors.New("the kernel's dump was interrupted by changes every time it was read")

// dumpTries is how many times an interrupted dump is read (backing off from
// dumpPause, doubling up to 50 ms, so a burst of commits can pass).
const (
	dumpTries = 12
	dumpPause = 200 * time.Microsecond
)

// dump executes the dump request m on the handle's raw socket and returns
// its messages, read again while the kernel marks them interrupted.
func (h *Handle) dump(m mdnetlink.Message) ([]mdnetlink.Message, error) {
	pause := dumpPause
	for try := 1; ; try++ {
		msgs, err := h.nfRaw.Execute(m)
		if err != nil || !interrupted(msgs) {
			return msgs, err
		}
		if try == dumpTries {
			return nil, fmt.Errorf("%w (%d tries)", errDumpInterrupted, dumpTries)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// interrupted reports whether the kernel marked any of a dump's messages
// as read across a change.
func interrupted(msgs []mdnetlink.Message) bool {
	for _, m := range msgs {
		if m.Header.Flags&mdnetlink.DumpInterrupted != 0 {
			return true
		}
	}
	return false
}

// consistently runs read, a dump through the nftables library (which
// drops the interrupted flag) or one the kernel does not flag, and runs
// it again while the ruleset's generation changed while it ran (a commit
// fell within it, and a dump of several messages may then be
// inconsistent; nft(8) checks its cache against the generation in the
// same way; barrier makes sure no commit that began before was still
// changing objects) or read says errDumpInterrupted. It gives up like
// dump.
func consistently[T any](h *Handle, read func() (T, error)) (T, error) {
	pause := dumpPause
	for try := 1; ; try++ {
		before, err := h.genID()
		if err == nil {
			err = h.barrier()
		}
		if err != nil {
			var zero T
			return zero, err
		}
		v, err := read()
		if err != nil && !errors.Is(err, errDumpInterrupted) {
			return v, err
		}
		if err == nil {
			after, err := h.genID()
			if err != nil || after == before {
				return v, err
			}
		}
		if try == dumpTries {
			var zero T
			return zero, fmt.Errorf("%w (%d tries)", errDumpInterrupted, dumpTries)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// barrier returns once no commit is under way in the handle's namespace.
// The generation changes as a commit begins, and the commit changes the
// objects after it, under nf_tables' commit mutex: a read that began after
// the generation did could still see half of that commit. A batch is
// applied under the same mutex, in the sendmsg that sends it (netlink's
// kernel side runs in the sender's call), so once an empty batch is sent,
// any commit that held the mutex has ended. An empty batch commits
// nothing, answers nothing and leaves the generation as it is.
func (h *Handle) barrier() error {
	if _, err := h.nfRaw.SendMessages(inBatch(nil)); err != nil {
		return fmt.Errorf("wait for the commits under way: %w", err)
	}
	return nil
}

// genID is the ruleset's generation (NFT_MSG_GETGEN), which every commit
// changes.
func (h *Handle) genID() (uint32, error) {
	msgs, err := h.nfRaw.Execute(mdnetlink.Message{
		Header: mdnetlink.Header{Type: mdnetlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN), Flags: mdnetlink.Request},
		Data:   nfgenmsg(unix.AF_UNSPEC, 0),
	})
	if err != nil {
		return 0, fmt.Errorf("get the ruleset's generation: %w", err)
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := mdnetlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return 0, fmt.Errorf("get the ruleset's generation: %w", err)
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32(), nil
			}
		}
		if err := ad.Err(); err != nil {
			return 0, fmt.Errorf("get the ruleset's generation: %w", err)
		}
	}
	return 0, errors.New("get the ruleset's generation: the kernel's answer has no NFTA_GEN_ID")
}

// noRepeats passes on a dump of a set's elements through the nftables
// library, or errDumpInterrupted when a key came twice (see above).
func noRepeats(elems []nftables.SetElement, err error) ([]nftables.SetElement, error) {
	if err != nil {
		return nil, err
	}
	seen := newKeysSeen(len(elems))
	for _, e := range elems {
		if seen.repeat(e.Key, e.IntervalEnd) {
			return nil, errDumpInterrupted
		}
	}
	return elems, nil
}

// keysSeen notes the keys of a dump of elements by their hash (no copy
// of each key: a dump is up to some 100,000 elements). Two keys with one
// hash look like a repeat, and the dump is read again, with another seed.
type keysSeen struct {
	seed maphash.Seed
	m    map[uint64]struct{}
}

func newKeysSeen(n int) *keysSeen {
	return &keysSeen{seed: maphash.MakeSeed(), m: make(map[uint64]struct{}, n)}
}

// repeat notes key (an interval's end apart from a start at the same key)
// and reports whether it was seen before.
func (k *keysSeen) repeat(key []byte, end bool) bool {
	h := maphash.Bytes(k.seed, key)
	if end {
		h = ^h
	}
	if _, ok := k.m[h]; ok {
		return true
	}
	k.m[h] = struct{}{}
	return false
}
