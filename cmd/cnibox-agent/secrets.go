package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// secretEnv names the environment variables that set the etcd credentials
// when their flag is not given, so that a password need not appear in
// /proc/<pid>/cmdline (which every local user can read).
var secretEnv = map[string]string{
	"etcd-password": "CNIBOX_ETCD_PASSWORD",
	"etcd-keyfile":  "CNIBOX_ETCD_KEYFILE",
	"etcd-certfile": "CNIBOX_ETCD_CERTFILE",
	"etcd-cafile":   "CNIBOX_ETCD_CAFILE",
	"etcd-username": "CNIBOX_ETCD_USERNAME",
}

// resolveSecrets fills the etcd credentials the command line left unset:
// --etcd-password-file (the file's content, one trailing newline dropped),
// else the variables of secretEnv. A flag given on the command line wins; a
// password given both as --etcd-password and --etcd-password-file is an
// error.
func resolveSecrets(fs *flag.FlagSet, f *flags, getenv func(string) string) error {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.etcdPasswordFile != "" {
		if set["etcd-password"] {
			return fmt.Errorf("--etcd-password and --etcd-password-file both given: use one")
		}
		b, err := os.ReadFile(f.etcdPasswordFile)
		if err != nil {
			return fmt.Errorf("--etcd-password-file: %w", err)
		}
		f.etcdPassword = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		set["etcd-password"] = true
	}
	for name, env := range secretEnv {
		if set[name] {
			continue
		}
		if v := getenv(env); v != "" {
			if err := fs.Lookup(name).Value.Set(v); err != nil {
				return fmt.Errorf("$%s: %w", env, err)
			}
		}
	}
	return nil
}
