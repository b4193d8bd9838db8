package chain

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// call is one call of a chained role on network n for container c, eth0,
// with its store in dir.
func call(cmd, dir string, prev types.Result) *cniplug.Args {
	conf := &cniplug.NetConf{}
	conf.Name, conf.Type, conf.PluginConf.PrevResult = "n", "bandwidth", prev
	return &cniplug.Args{
		Command: cmd, ContainerID: "c", IfName: "eth0", Conf: conf,
		StdinData: []byte(`{"name":"n","dataDir":` + strconv.Quote(dir) + `}`),
		Getenv:    func(string) string { return "" },
	}
}

func TestAddCheck(t *testing.T) {
	bad := cniplug.Errorf(types.ErrInvalidNetworkConfig, `config field "x": bad`)
	prev := &current.Result{CNIVersion: "1.0.0", Interfaces: []*current.Interface{{Name: "eth0", Sandbox: "/ns"}}}
	for _, tc := range []struct {
		name     string
		parseErr error
		prev     types.Result
		wantCode uint // 0: the verb runs
	}{
		{"parsed and chained", nil, prev, 0},
		{"parse error first", bad, nil, types.ErrInvalidNetworkConfig},
		{"no prevResult", nil, nil, types.ErrInvalidNetworkConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parse := func(*cniplug.Args) (string, error) { return "conf", tc.parseErr }
			var ran int
			add := func(_ context.Context, _ *cniplug.Args, c string, p *current.Result) (types.Result, error) {
				if c != "conf" || len(p.Interfaces) != 1 {
					t.Errorf("ADD got %q and %+v, want the parsed config and prevResult", c, p)
				}
				ran++
				return p, nil
			}
			check := func(_ context.Context, _ *cniplug.Args, c string, p *current.Result) error {
				ran++
				return nil
			}
			_, aerr := Add(context.Background(), call("ADD", t.TempDir(), tc.prev), parse, add)
			cerr := Check(context.Background(), call("CHECK", t.TempDir(), tc.prev), parse, check)
			for _, err := range []error{aerr, cerr} {
				if code := cniplug.CodeOf(err); (err == nil) != (tc.wantCode == 0) || (err != nil && code != tc.wantCode) {
					t.Errorf("err %v (code %d), want code %d", err, code, tc.wantCode)
				}
				if tc.parseErr != nil && !errors.Is(err, tc.parseErr) {
					t.Errorf("err %v, want the parse error itself", err)
				}
			}
			if want := map[bool]int{true: 2, false: 0}[tc.wantCode == 0]; ran != want {
				t.Errorf("the verbs ran %d times, want %d", ran, want)
			}
		})
	}
}

// testRec is a chained role's record, as a role declares its kind.
type testRec struct {
	Network     string    `json:"network"`
	ContainerID string    `json:"containerID"`
	IfName      string    `json:"ifName"`
	MTU         int       `json:"mtu,omitempty"`
	MAC         string    `json:"mac,omitempty"`
	Created     time.Time `json:"created"`
	BootID      string    `json:"bootID,omitempty"`
}

var testKind = store.Kind[testRec]{Bucket: "chaintest", What: "test record", Head: func(r *testRec) (store.Attachment, *time.Time, *string) {
	return store.Attachment{Network: r.Network, ContainerID: r.ContainerID, IfName: r.IfName}, &r.Created, &r.BootID
}}

var tuning = Records[testRec]{Kind: &testKind}

func get(t *testing.T, a *cniplug.Args) (testRec, bool) {
	t.Helper()
	rec, found, err := tuning.lookup(a)
	if err != nil {
		t.Fatal(err)
	}
	return rec, found
}

// TestRemember: the record is written, a repeated ADD merges, and the undo
// puts back what was there (or nothing).
func TestRemember(t *testing.T) {
	dir := t.TempDir()
	a := call("ADD", dir, nil)
	if _, found := get(t, a); found {
		t.Fatal("a record before any ADD")
	}
	first := testRec{Network: "n", ContainerID: "c", IfName: "eth0", MTU: 1500}
	var undo cniplug.Undo
	old, err := tuning.Remember(a, first, nil, &undo)
	if err != nil || old.MTU != 0 {
		t.Fatalf("first Remember: old %+v, err %v; want none", old, err)
	}
	if rec, found := get(t, a); !found || rec.MTU != 1500 {
		t.Fatalf("after Remember: %+v, %v", rec, found)
	}
	undo.Run()
	if _, found := get(t, a); found {
		t.Fatal("the undo of a first Remember must remove the record")
	}

	undo = cniplug.Undo{}
	if _, err := tuning.Remember(a, first, nil, &undo); err != nil {
		t.Fatal(err)
	}
	undo.Discard()
	keepOld := func(old, now testRec) testRec { old.MAC = now.MAC; return old }
	old, err = tuning.Remember(a, testRec{Network: "n", ContainerID: "c", IfName: "eth0", MTU: 9000, MAC: "02:00:00:00:00:01"}, keepOld, &undo)
	if err != nil || old.MTU != 1500 {
		t.Fatalf("repeated Remember: old %+v, err %v; want the first record", old, err)
	}
	if rec, _ := get(t, a); rec.MTU != 1500 || rec.MAC != "02:00:00:00:00:01" {
		t.Fatalf("merged record %+v, want MTU 1500 kept and the MAC added", rec)
	}
	undo.Run()
	if rec, _ := get(t, a); rec.MTU != 1500 || rec.MAC != "" {
		t.Fatalf("after the undo: %+v, want the first record back", rec)
	}
}

// TestDel: teardown gets the record; the record is removed after it, kept
// when it fails; without a store nothing is created. Twice is fine.
func TestDel(t *testing.T) {
	dir := t.TempDir()
	a := call("DEL", dir+"/never", nil)
	var saw []bool
	teardown := func(_ context.Context, _ *cniplug.Args, rec testRec, found bool) error {
		saw = append(saw, found)
		return nil
	}
	withTeardown := func(f func(context.Context, *cniplug.Args, testRec, bool) error) *Records[testRec] {
		k := tuning
		k.Teardown, k.AfterDel = f, "test/del/after-record"
		return &k
	}
	if err := withTeardown(teardown).Del(context.Background(), a); err != nil || len(saw) != 1 || saw[0] {
		t.Fatalf("DEL without a store: err %v, teardown saw %v", err, saw)
	}
	if st, err := OpenRecords(a); st != nil || err != nil {
		t.Fatalf("OpenRecords of a store never created: %v, %v; want nil, nil", st, err)
	}

	a = call("DEL", dir, nil)
	var undo cniplug.Undo
	if _, err := tuning.Remember(a, testRec{Network: "n", ContainerID: "c", IfName: "eth0", MTU: 1500}, nil, &undo); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	failing := func(context.Context, *cniplug.Args, testRec, bool) error { return boom }
	if err := withTeardown(failing).Del(context.Background(), a); !errors.Is(err, boom) {
		t.Fatalf("DEL with a failing teardown: %v, want it", err)
	}
	if _, found := get(t, a); !found {
		t.Fatal("a failed teardown must keep the record for the next DEL")
	}
	saw = nil
	for range 2 {
		if err := withTeardown(teardown).Del(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
	if len(saw) != 2 || !saw[0] || saw[1] {
		t.Fatalf("teardown saw found = %v, want [true false]", saw)
	}
	if _, found := get(t, a); found {
		t.Fatal("the record is left after DEL")
	}
}
