package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/cnibox/cnibox/internal/atomicfile"
)

const (
	// DefaultDir is where the store lives unless configured otherwise.
	DefaultDir = "/var/lib/cnibox"
	// FileName is the store's file name inside its directory.
	FileName = "cnibox.db"
	// DefaultTimeout bounds the wait for another process's lock on the store.
	DefaultTimeout = 10 * time.Second

	// EnvDataDir overrides DefaultDir (a config's dataDir overrides both).
	EnvDataDir = "CNIBOX_DATA_DIR"
	// EnvTimeout overrides DefaultTimeout, as a Go duration ("500ms", "30s").
	EnvTimeout = "CNIBOX_STORE_TIMEOUT"
)

// Errors of the store. Match them with errors.Is. ErrBusy and ErrInvalidEnv
// carry their CNI error code (11 and 4), so a role may return them as they are.
var (
	// ErrBusy: another process held the store's lock past the timeout.
	ErrBusy error = &types.Error{Code: types.ErrTryAgainLater, Msg: "the store is busy"}
	// ErrInvalidEnv: an environment variable the store reads has an unusable value.
	ErrInvalidEnv error = &types.Error{Code: types.ErrInvalidEnvironmentVariables, Msg: "invalid environment"}
	// ErrCorrupt: the store file is not a readable database.
	ErrCorrupt = errors.New("the store file is corrupt")
	// ErrTaken: an address is reserved by another owner.
	ErrTaken = errors.New("address already reserved")
	// ErrNotFound: a record that an operation needs does not exist.
	ErrNotFound = errors.New("not found")
)

// corruptFix ends the message of ErrCorrupt.
const corruptFix = "see what is wrong with `cnibox store check --data-dir DIR` and recover with `cnibox store rebuild --data-dir DIR` (DIR: the file's directory), which keeps the broken file aside and rebuilds the reservations and endpoints from the node's interfaces and namespaces"

// Store is an open store file. It holds the file's lock until Close, so keep
// it open for one call's transaction, never across an exec.
type Store struct {
	db   *bolt.DB
	path string

	// batch is the read-write transaction of a running Batch (nil outside
	// one); batchChanged records whether anything in it wrote.
	batch        *bolt.Tx
	batchChanged bool
}

// Options tune OpenWith.
type Options struct {
	// Timeout bounds the wait for the file lock. Zero means $CNIBOX_STORE_TIMEOUT
	// (read through Getenv), else DefaultTimeout.
	Timeout time.Duration
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// NoCreate makes a missing store file an error wrapping ErrNotFound
	// instead of creating it (for calls that only read or release).
	NoCreate bool
}

// Dir returns the store directory: configured (a config's dataDir) if set,
// else $CNIBOX_DATA_DIR, else DefaultDir.
func Dir(configured string) string { return DirFrom(configured, os.Getenv) }

// DirFrom is Dir with the environment read through getenv (a CNI call's
// environment may not be the process's).
func DirFrom(configured string, getenv func(string) string) string {
	if configured != "" {
		return configured
	}
	if getenv != nil {
		if d := getenv(EnvDataDir); d != "" {
			return d
		}
	}
	return DefaultDir
}

// Open opens (creating if needed) the store in dir with default options.
func Open(dir string) (*Store, error) { return OpenWith(dir, Options{}) }

// OpenWith opens (creating if needed) the store file in dir. The directory is
// created with mode 0700 and the file with 0600. A lock held by another
// process past the timeout returns an error wrapping ErrBusy; a file that is
// not a bbolt database (empty, truncated, garbage) one wrapping ErrCorrupt.
// The first open in a boot checks the whole file and sets a file torn by an
// unclean shutdown aside (see EnvSync).
func OpenWith(dir string, o Options) (*Store, error) {
	timeout, err := o.timeout()
	if err != nil {
		return nil, err
	}
	mode, err := o.syncMode()
	if err != nil {
		return nil, err
	}
	if mode == syncBoot && BootID() == "" {
		mode = syncAlways // no boot ID, no once-per-boot check: flush instead
	}
	path := filepath.Join(dir, FileName)
	deadline := time.Now().Add(timeout)
	for retried := false; ; retried = true {
		s, torn, err := open(dir, path, o, mode, deadline, timeout)
		if err == nil || torn == nil || retried || !fromEarlierBoot(path) {
			return s, err
		}
		// Torn by a crash of an earlier boot: nothing in it describes a
		// running pod. Keep it for a post-mortem and start empty.
		aside, aerr := setAsideIfSame(path, torn, deadline, timeout)
		if aerr != nil {
			return nil, fmt.Errorf("%w (and %w)", err, aerr)
		}
		if aside != "" {
			fmt.Fprintf(os.Stderr, "cnibox: %v\ncnibox: it was last checked in an earlier boot, so it was torn by an unclean shutdown; kept as %s, and the store starts empty\n", err, aside)
		}
	}
}

// open is one try of OpenWith. When the file proves corrupt, torn is its
// FileInfo (to set exactly that file aside).
func open(dir, path string, o Options, mode string, deadline time.Time, timeout time.Duration) (s *Store, torn os.FileInfo, err error) {
	f, err := openLocked(path, deadline, timeout)
	if errors.Is(err, fs.ErrNotExist) {
		if o.NoCreate {
			return nil, nil, fmt.Errorf("open store %s: %w (nothing was ever stored there)", path, ErrNotFound)
		}
		if err := create(dir, path); err != nil {
			return nil, nil, err
		}
		f, err = openLocked(path, deadline, timeout)
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open store %s: %w", path, err)
	} else if fi.Size() == 0 {
		// A file we create is complete before it appears (see create), so an
		// empty one was truncated by something else.
		f.Close()
		return nil, fi, fmt.Errorf("open store %s: %w: the file is empty; %s", path, ErrCorrupt, corruptFix)
	}
	// bbolt's default freelist (array, synced to disk) is deliberate:
	// NoFreelistSync makes every read-write open scan the whole file (10 ms
	// per call at 60k reservations, measured), and the map freelist measured
	// no faster at this size.
	db, err := openBolt(path, f, &bolt.Options{
		Timeout: timeout,
		// The lock is already ours: hand bbolt the locked file.
		OpenFile:   func(string, int, os.FileMode) (*os.File, error) { return f, nil },
		NoSync:     mode == syncBoot,
		NoGrowSync: mode == syncBoot,
	})
	if err != nil {
		// bbolt closed f. Anything but an OS error means the content is bad.
		var errno syscall.Errno
		var pe *fs.PathError
		if errors.As(err, &errno) || errors.As(err, &pe) {
			return nil, nil, fmt.Errorf("open store %s: %w", path, err)
		}
		return nil, fi, fmt.Errorf("open store %s: %w (%v); %s", path, ErrCorrupt, err, corruptFix)
	}
	s = &Store{db: db, path: path}
	if mode == syncBoot && !verifiedThisBoot(path) {
		if err := s.verify(); err != nil {
			s.Close()
			if errors.Is(err, ErrCorrupt) {
				return nil, fi, err
			}
			return nil, nil, err
		}
		markVerified(path)
	}
	return s, nil, nil
}

// openBolt is bolt.Open, with its panics on some corrupt files (a garbage
// freelist page) turned into errors.
func openBolt(path string, f *os.File, o *bolt.Options) (db *bolt.DB, err error) {
	// A truncated file leaves pages the meta page names outside the file:
	// reading them faults, which SetPanicOnFault turns into a panic.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	fi, _ := f.Stat()
	defer func() {
		if r := recover(); r != nil {
			// bbolt panicked with the file mapped: the mapping keeps the
			// open file, and so its lock, alive after Close.
			f.Close()
			unmapFile(fi)
			db, err = nil, fmt.Errorf("%v", r)
		}
	}()
	return bolt.Open(path, 0o600, o)
}

func (o Options) timeout() (time.Duration, error) {
	if o.Timeout > 0 {
		return o.Timeout, nil
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	v := getenv(EnvTimeout)
	if v == "" {
		return DefaultTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%w: %s=%q is not a positive Go duration: set it like 10s or 500ms, or unset it for the default %s", ErrInvalidEnv, EnvTimeout, v, DefaultTimeout)
	}
	return d, nil
}

// create makes a new, initialised store file at path atomically: it is built
// under a temporary name and linked into place (atomicfile's CreateNew), so
// no process ever sees a half-written file. Losing the race to another
// creator is fine.
func create(dir, path string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create store directory %s: %w", dir, err)
	}
	p, err := newFile(path, nil)
	if err != nil {
		return fmt.Errorf("create store %s: %w", path, err)
	}
	defer p.Cleanup()
	if err := p.CreateNew(); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create store %s: %w", path, err)
	}
	return nil
}

// newFile builds a new store file for path under a temporary name beside
// it: its buckets and meta, then what fill (if not nil) writes. The caller
// puts it in place (Replace or CreateNew) and calls its Cleanup.
func newFile(path string, fill func(*Store) error) (*atomicfile.Pending, error) {
	p, err := atomicfile.New(path, 0o600)
	if err != nil {
		return nil, err
	}
	db, err := bolt.Open(p.Name(), 0o600, &bolt.Options{Timeout: time.Second})
	if err == nil {
		err = db.Update(func(tx *bolt.Tx) error {
			for _, b := range [][]byte{endpointRecords.bucket, bucketIPAM} {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return initMeta(tx)
		})
		if err == nil && fill != nil {
			err = fill(&Store{db: db, path: p.Name()})
		}
		if cerr := db.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		p.Cleanup()
		return nil, err
	}
	return p, nil
}

// Close releases the store and its lock.
func (s *Store) Close() error {
	if s == nil || s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	return err
}

// Path returns the store file's path.
func (s *Store) Path() string { return s.path }

// Dir returns the directory of the store file.
func (s *Store) Dir() string { return filepath.Dir(s.path) }

// sharedKey keys an open store among a CNI call's shared values.
type sharedKey string

// SharedKey is the key under which a CNI call shares its open store of dir
// with the roles it runs in process (cniplug.Args.SetShared): a delegate that
// would open the same store uses the caller's instead (a second open in the
// same process would wait for the caller's lock), and its reads and writes
// join the caller's Batch.
func SharedKey(dir string) any { return sharedKey(filepath.Clean(dir)) }

// OpenShared returns the store of dir that the call shares (shared is the
// call's cniplug.Args.Shared), with a release that does nothing; otherwise it
// opens the store with OpenWith and release closes it.
func OpenShared(shared func(key any) any, dir string, o Options) (s *Store, release func() error, err error) {
	if shared != nil {
		if s, ok := shared(SharedKey(dir)).(*Store); ok && s.db != nil {
			return s, func() error { return nil }, nil
		}
	}
	s, err = OpenWith(dir, o)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// isCorrupt reports whether err from bbolt means the file content is bad.
func isCorrupt(err error) bool {
	return errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) ||
		errors.Is(err, berrors.ErrVersionMismatch)
}

// guard turns a bbolt panic (it panics on some corrupt pages) into ErrCorrupt.
func (s *Store) guard(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("store %s: %w (%v); %s", s.path, ErrCorrupt, r, corruptFix)
	}
}

// update runs fn in one read-write transaction; commit is skipped (rolled
// back) when fn reports that it changed nothing.
func (s *Store) update(fn func(tx *bolt.Tx) (changed bool, err error)) (err error) {
	if s.batch != nil {
		changed, err := fn(s.batch)
		s.batchChanged = s.batchChanged || changed
		return err
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer s.guard(&err)
	tx, err := s.db.Begin(true)
	if err != nil {
		return s.wrap(err)
	}
	defer func() {
		if tx.DB() != nil { // still open: fn panicked
			tx.Rollback()
		}
	}()
	changed, err := fn(tx)
	if err != nil || !changed {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return s.wrap(err)
	}
	return nil
}

// view runs fn in one read-only transaction.
func (s *Store) view(fn func(tx *bolt.Tx) error) (err error) {
	if s.batch != nil {
		return fn(s.batch)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer s.guard(&err)
	return s.db.View(fn)
}

// Batch runs fn with every read and write of s (IPAM, endpoint and other
// records) inside one read-write transaction, committed when fn returns nil
// and rolled back, keeping nothing, when it returns an error. One commit
// costs two fdatasync; a call that reserves an address and records its
// endpoint pays them once. A Batch inside a Batch joins the outer one. Keep
// fn short and free of kernel work: the store's lock is held throughout.
func (s *Store) Batch(fn func() error) (err error) {
	if s.batch != nil {
		return fn()
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer s.guard(&err)
	tx, err := s.db.Begin(true)
	if err != nil {
		return s.wrap(err)
	}
	s.batch, s.batchChanged = tx, false
	defer func() {
		s.batch = nil
		if tx.DB() != nil { // not committed: fn failed or panicked
			tx.Rollback()
		}
	}()
	if err := fn(); err != nil {
		return err
	}
	if !s.batchChanged {
		return nil
	}
	if err := tx.Commit(); err != nil {
		return s.wrap(err)
	}
	return nil
}

func (s *Store) wrap(err error) error {
	if isCorrupt(err) {
		return fmt.Errorf("store %s: %w (%v)", s.path, ErrCorrupt, err)
	}
	return fmt.Errorf("store %s: %w", s.path, err)
}
