package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestEtcdSecretsOffTheCommandLine: the etcd password comes from a file or
// the environment, so it need not be in /proc/<pid>/cmdline; the TLS key
// path from the environment; a flag on the command line wins.
func TestEtcdSecretsOffTheCommandLine(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := parseFlags([]string{"--etcd-password-file", pw}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.etcdPassword != "s3cret" {
		t.Errorf("password from --etcd-password-file = %q, want s3cret", f.etcdPassword)
	}
	if _, err := parseFlags([]string{"--etcd-password-file", pw, "--etcd-password", "x"}, io.Discard); err == nil {
		t.Error("--etcd-password with --etcd-password-file: no error")
	}
	t.Setenv("CNIBOX_ETCD_PASSWORD", "fromenv")
	t.Setenv("CNIBOX_ETCD_KEYFILE", "/etc/etcd/key.pem")
	f, err = parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.etcdPassword != "fromenv" || f.etcdKeyfile != "/etc/etcd/key.pem" {
		t.Errorf("from the environment: password %q keyfile %q", f.etcdPassword, f.etcdKeyfile)
	}
	f, err = parseFlags([]string{"--etcd-password", "flag"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.etcdPassword != "flag" {
		t.Errorf("flag and environment: password %q, want the flag's", f.etcdPassword)
	}
}
