package snmp

import "testing"

// TestValue reads a counter by its protocol and name, not by its place.
func TestValue(t *testing.T) {
	const text = "Ip: Forwarding DefaultTTL FragCreates\nIp: 1 64 7\nTcp: RtoAlgorithm ActiveOpens InSegs\nTcp: 1 200 12345\n"
	for _, c := range []struct {
		proto, name string
		want        int64
	}{{"Ip", "FragCreates", 7}, {"Tcp", "InSegs", 12345}, {"Tcp", "ActiveOpens", 200}} {
		if got, err := Value(text, c.proto, c.name); err != nil || got != c.want {
			t.Errorf("Value(%s %s) = %d, %v; want %d", c.proto, c.name, got, err, c.want)
		}
	}
	if _, err := Value(text, "Udp", "InDatagrams"); err == nil {
		t.Error("a protocol that is not there gave a value")
	}
	if _, err := Value(text, "Tcp", "OutRsts"); err == nil {
		t.Error("a counter that is not there gave a value")
	}
}
