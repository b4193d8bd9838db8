package cniplug

import (
	"encoding/json"
	"testing"
)

// TestMayHaveLogSettings: every config from which encoding/json would read
// logFile or logLevel passes the pre-check; configs without them skip the
// decode.
func TestMayHaveLogSettings(t *testing.T) {
	for _, tc := range []struct {
		conf string
		want bool
	}{
		{`{"cniVersion":"1.0.0","name":"n","type":"bridge","logFile":"/tmp/x.log"}`, true},
		{`{"name":"n","LOGLEVEL":"debug"}`, true},      // keys match without regard to case
		{`{"name":"n","\u006cogLevel":"debug"}`, true}, // an escaped key
		{`{"cniVersion":"1.0.0","name":"n","type":"bridge","ipam":{"type":"host-local"}}`, false},
	} {
		var ls logSettings
		if err := json.Unmarshal([]byte(tc.conf), &ls); err != nil {
			t.Fatal(err)
		}
		if has := ls != (logSettings{}); has && !mayHaveLogSettings([]byte(tc.conf)) {
			t.Errorf("%s: encoding/json reads %+v but the pre-check skips it", tc.conf, ls)
		}
		if got := mayHaveLogSettings([]byte(tc.conf)); got != tc.want {
			t.Errorf("mayHaveLogSettings(%s) = %v, want %v", tc.conf, got, tc.want)
		}
	}
}
