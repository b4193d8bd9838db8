package store

import (
	"net/netip"
	"testing"
	"time"
)

// FuzzDecodeReservation: whatever bytes a damaged file holds where a
// reservation should be, decoding returns an error or a reservation, never
// panics; what encodes decodes to the same.
func FuzzDecodeReservation(f *testing.F) {
	f.Add([]byte{4, 10, 1, 0, 5}, encodeReservation(Reservation{ContainerID: "c", IfName: "eth0", Pod: "ns/p", BootID: "b",
		Subnet: netip.MustParsePrefix("10.1.0.0/24"), Created: time.Unix(1700000000, 0)}))
	f.Add([]byte{16, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}, []byte{1, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{}, []byte{9})
	f.Fuzz(func(t *testing.T, addrs, value []byte) {
		decodeAddrs(addrs)
		a, ok := netip.AddrFromSlice(addrs)
		if !ok {
			a = netip.MustParseAddr("10.1.0.5")
		}
		r, err := decodeReservation(a, "net", value)
		if err != nil {
			return
		}
		again, err := decodeReservation(a, "net", encodeReservation(r))
		if err != nil {
			t.Fatalf("re-decoding %+v: %v", r, err)
		}
		if again.ContainerID != r.ContainerID || again.IfName != r.IfName || again.Pod != r.Pod || again.BootID != r.BootID || again.Subnet != r.Subnet || !again.Created.Equal(r.Created) {
			t.Fatalf("round trip changed %+v into %+v", r, again)
		}
	})
}
