package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/internal/atomicfile"
	"github.com/cnibox/cnibox/nodestate"
)

// binaryName is the name of the binary in a CNI bin dir; every role link
// points at it.
const binaryName = "cnibox"

// install is `cnibox install`.
func (o Options) install(c *ucli.Context) error {
	opts, err := installOptions(c, o)
	if err != nil {
		return err
	}
	if src := c.String("conflist"); src != "" {
		if err := o.checkInstallConflist(c, src, opts.Dir); err != nil {
			return err
		}
		name := c.String("conf-name")
		if name == "" {
			name = filepath.Base(src)
		}
		if err := checkConfDirOrder(c, c.String("conf-dir"), name); err != nil {
			return err
		}
	}
	res, err := Install(opts)
	for _, line := range res {
		fmt.Fprintln(c.App.Writer, line)
	}
	if err != nil || c.String("conflist") == "" {
		return err
	}
	var wrap func([]byte) ([]byte, error)
	if c.Bool("secondary-networks") {
		if _, wrap = o.Registry.Wrapper(); wrap == nil {
			return errors.New("install --secondary-networks: no role of this binary wraps a conflist")
		}
	}
	line, err := InstallConflistWrapped(c.String("conflist"), c.String("conf-dir"), c.String("conf-name"), wrap)
	if line != "" {
		fmt.Fprintln(c.App.Writer, line)
	}
	return err
}

// checkInstallConflist runs cnibox check over the conflist src before
// anything is installed: an error refuses the whole install (the finding is
// printed, nothing is written); warnings are printed and the install goes
// on. cnibox's roles count as present in binDir, which the install fills;
// another plugin the list names must be there already.
func (o Options) checkInstallConflist(c *ucli.Context, src, binDir string) error {
	name := c.String("conf-name")
	if name == "" {
		name = filepath.Base(src)
	}
	data, err := nodestate.ReadConf(src)
	if err != nil {
		return fmt.Errorf("read conflist: %w", err)
	}
	ck := checker{reg: o.Registry, binDirs: []string{binDir}, installing: true}
	rep := checkReport{BinDirs: ck.binDirs, Files: []checkedFile{ck.fileData(src, name, data)}}
	rep.count()
	if rep.Errors == 0 && rep.Warnings == 0 {
		return nil
	}
	if err := printConfigCheck(c.App.ErrWriter, rep); err != nil {
		return err
	}
	if rep.Errors > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("install: conflist %s not installed, nothing written: cnibox check found %d error(s); fix them and run the install again", src, rep.Errors)}
	}
	return nil
}

// installOptions turns the flags into InstallOptions.
func installOptions(c *ucli.Context, o Options) (InstallOptions, error) {
	opts := InstallOptions{Dir: c.String("dir"), Names: o.Registry.Names(), Companions: o.Registry.Companions(),
		Force: c.Bool("force"), KeepForeign: c.Bool("keep-foreign")}
	if opts.Force && opts.KeepForeign {
		return opts, errors.New("--force replaces what is not cnibox's and --keep-foreign keeps it: give one of them")
	}
	if c.String("binary") != "" && c.String("target") != "" {
		return opts, errors.New("--binary copies a binary and --target links to one: give one of them")
	}
	if t := c.String("target"); t != "" {
		abs, err := filepath.Abs(t)
		if err != nil {
			return opts, err
		}
		opts.Target = abs
		return opts, nil
	}
	opts.Binary = c.String("binary")
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return opts, fmt.Errorf("find this executable: %w", err)
		}
		opts.Binary = exe
	}
	return opts, nil
}

// InstallOptions say what Install puts into a CNI bin dir.
type InstallOptions struct {
	// Dir is the CNI bin dir.
	Dir string
	// Binary is copied to Dir/cnibox, and the role links point at the copy.
	Binary string
	// Target, when Binary is empty, is an existing binary the role links
	// point at; nothing is copied.
	Target string
	// Names are the role names to link.
	Names []string
	// Companions are the roles' other binaries (cniplug.Known.Companions),
	// copied into Dir with Binary when they sit next to it.
	Companions []string
	// Force replaces files and links that are not cnibox's.
	Force bool
	// KeepForeign leaves files and links that are not cnibox's as they
	// are, without an error: cnibox next to a primary CNI's plugins (the
	// node's bridge, portmap, ... stay theirs).
	KeepForeign bool
}

// Install copies the binary into the bin dir (see installFile) and makes
// Dir/<name> a symlink to it for each name. A link to a binary in Dir is
// relative ("cnibox"), so it resolves wherever Dir is mounted; a link to a
// Target elsewhere is that absolute path. A link that is already right is
// left alone; a file or link that is not cnibox's is replaced only with
// Force, kept without an error with KeepForeign, and is an error otherwise.
// It returns one line per file saying what it did.
func Install(o InstallOptions) ([]string, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.Dir, err)
	}
	var out []string
	target := o.Target
	if o.Binary != "" {
		target = filepath.Join(o.Dir, binaryName)
		changed, err := installFile(target, 0o755, func() (io.ReadCloser, error) { return os.Open(o.Binary) })
		if err != nil {
			return nil, fmt.Errorf("install %s as %s: %w", o.Binary, target, err)
		}
		out = append(out, fileLine(changed, target))
		// The roles' companion binaries, when they sit next to the one
		// copied: a role looks for them next to cnibox.
		for _, comp := range o.Companions {
			src := filepath.Join(filepath.Dir(o.Binary), comp)
			if src == o.Binary {
				continue
			}
			if st, err := os.Stat(src); err == nil && st.Mode().IsRegular() {
				dst := filepath.Join(o.Dir, comp)
				changed, err := installFile(dst, 0o755, func() (io.ReadCloser, error) { return os.Open(src) })
				if err != nil {
					return nil, fmt.Errorf("install %s as %s: %w", src, dst, err)
				}
				out = append(out, fileLine(changed, dst))
			}
		}
	}
	if target == "" {
		return nil, errors.New("install: neither a binary to copy nor a target to link to")
	}
	self, err := os.Stat(target)
	if err != nil {
		return out, fmt.Errorf("install target %s: %w", target, err)
	}
	link := target
	if filepath.Clean(filepath.Dir(target)) == filepath.Clean(o.Dir) {
		link = filepath.Base(target)
	}
	var errs []error
	for _, name := range o.Names {
		line, err := installLink(filepath.Join(o.Dir, name), link, self, o.Force, o.KeepForeign)
		out = append(out, line)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// installLink makes p a symlink with the text link, which resolves to the
// file self. It creates the link under a temporary name and renames it over
// p, so a runtime never sees the plugin missing.
func installLink(p, link string, self fs.FileInfo, force, keepForeign bool) (string, error) {
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "failed    " + p, err
	default:
		cur, statErr := os.Stat(p)
		ours := statErr == nil && os.SameFile(cur, self)
		old, readErr := os.Readlink(p)
		if readErr == nil && filepath.Base(old) == binaryName {
			ours = true // a link left by an earlier install of cnibox
		}
		if ours && fi.Mode()&fs.ModeSymlink != 0 && old == link {
			return fmt.Sprintf("ok        %s -> %s", p, link), nil
		}
		if !ours && keepForeign {
			return fmt.Sprintf("kept      %s (not cnibox's)", p), nil
		}
		if !ours && !force {
			return fmt.Sprintf("skipped   %s (not ours; --force replaces it)", p),
				fmt.Errorf("%s exists and is not cnibox's: remove it or rerun with --force", p)
		}
	}
	if err := atomicfile.Symlink(link, p); err != nil {
		return "failed    " + p, err
	}
	return fmt.Sprintf("linked    %s -> %s", p, link), nil
}

// InstallConflist checks that src is a network configuration list and puts
// it at dir/name the way installFile does. An empty name is src's base
// name; the name must end in .conflist, the extension runtimes read lists
// from. It returns a line saying what it did.
func InstallConflist(src, dir, name string) (string, error) {
	return InstallConflistWrapped(src, dir, name, nil)
}

// InstallConflistWrapped is InstallConflist, the list wrapped first when
// wrap is set (the role's cniplug.Known.WrapConflist: `install
// --secondary-networks`).
func InstallConflistWrapped(src, dir, name string, wrap func([]byte) ([]byte, error)) (string, error) {
	if name == "" {
		name = filepath.Base(src)
	}
	if !strings.HasSuffix(name, ".conflist") || strings.Contains(name, "/") {
		return "", fmt.Errorf("conflist name %q: use a file name ending in .conflist (runtimes read lists only from those; --conf-name sets it)", name)
	}
	data, err := nodestate.ReadConf(src)
	if err != nil {
		return "", fmt.Errorf("read conflist: %w", err)
	}
	if err := checkConflist(data); err != nil {
		return "", fmt.Errorf("conflist %s: %w", src, err)
	}
	if wrap != nil {
		if data, err = wrap(data); err != nil {
			return "", fmt.Errorf("conflist %s, --secondary-networks: %w", src, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	dst := filepath.Join(dir, name)
	changed, err := installFile(dst, 0o644, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return "", fmt.Errorf("install conflist %s as %s: %w", src, dst, err)
	}
	return fileLine(changed, dst), nil
}

// checkConflist reports what keeps data from being a network configuration
// list a runtime can load.
func checkConflist(data []byte) error {
	var l struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Plugins    []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if l.Name == "" {
		return errors.New(`"name" is missing: a list needs a network name`)
	}
	if len(l.Plugins) == 0 {
		return errors.New(`"plugins" is missing or empty: a list needs at least one plugin`)
	}
	for i, p := range l.Plugins {
		if p.Type == "" {
			return fmt.Errorf(`plugins[%d] has no "type"`, i)
		}
	}
	return nil
}

// fileLine says what installFile did with dst.
func fileLine(changed bool, dst string) string {
	if changed {
		return "installed " + dst
	}
	return "ok        " + dst
}

// installFile puts the content open returns at dst with mode, without ever
// opening dst for writing: it writes it with atomicfile (a temporary file
// in dst's directory, renamed over dst). A process
// executing the old dst keeps its file (the rename only moves the name; a
// write into a running binary fails with "text file busy"), and a reader
// sees the old file or the new one, never part of one. A regular file dst
// that already has this content and mode is left alone; changed reports
// whether dst was replaced.
func installFile(dst string, mode fs.FileMode, open func() (io.ReadCloser, error)) (changed bool, err error) {
	src, err := open()
	if err != nil {
		return false, err
	}
	same, err := sameContent(dst, mode, src)
	src.Close()
	if err != nil || same {
		return false, err
	}
	if src, err = open(); err != nil {
		return false, err
	}
	defer src.Close()
	err = atomicfile.WriteFrom(dst, mode, func(w io.Writer) error {
		_, err := io.Copy(w, src)
		return err
	})
	return err == nil, err
}

// sameContent reports whether path is a regular file with mode whose
// content is what r reads.
func sameContent(path string, mode fs.FileMode, r io.Reader) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != mode {
		return false, err // a symlink is replaced by the file itself
	}
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	a, b := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, errA := io.ReadFull(f, a)
		nb, errB := io.ReadFull(r, b)
		if na != nb || !bytes.Equal(a[:na], b[:nb]) {
			return false, nil
		}
		endA := errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF)
		endB := errors.Is(errB, io.EOF) || errors.Is(errB, io.ErrUnexpectedEOF)
		switch {
		case errA != nil && !endA:
			return false, errA
		case errB != nil && !endB:
			return false, errB
		case endA || endB:
			return endA && endB, nil
		}
	}
}
