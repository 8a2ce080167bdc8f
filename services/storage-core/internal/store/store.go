// Package store is storage-core's log engine: named channels, each a directory of
// Kafka-layout segment files holding RecordBatch v2 frames exactly as produced, with
// sparse offset and time indexes, group-committed fsync, idempotent-producer state
// rebuilt from batch headers, torn-tail recovery and retention.
//
// Offsets here are Kafka offsets (from 0); the gRPC edge converts them to sequences
// (offset + 1).
package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/services/storage-core/internal/wal"
	"go.uber.org/zap"
)

// Options configure a Store.
type Options struct {
	// FsyncInterval > 0 acknowledges appends after the write and fsyncs in the
	// background at this interval; 0 fsyncs before every acknowledgement (group commit).
	FsyncInterval time.Duration
	// RetentionInterval is how often retention runs; 0 = 30 s; < 0 disables the loop.
	RetentionInterval time.Duration
	// Now is the clock (tests); nil = time.Now.
	Now func() time.Time
	// Metrics; nil creates unregistered ones.
	Metrics *Metrics
	// LockWait is how long Open waits for the data directory's LOCK while another
	// process holds it: a process killed with SIGKILL keeps its flock until the kernel
	// has finished tearing it down (e.g. after an fsync in progress returns), so a
	// restart right after kill -9 waits for it instead of failing. 0 = 10 s; < 0 = no wait.
	LockWait time.Duration
	// WAL turns on WAL mode (walmode.go, issue 16 step 1): appends are acknowledged
	// once the node write-ahead log, shared by all channels, is fsynced; segments are
	// fsynced in the background. Off (the default), every channel fsyncs its own
	// segment (group commit per channel). Not with FsyncInterval.
	WAL bool
	// WALFileBytes is the size WAL files roll at (WAL mode and raft mode); 0 = 64 MiB.
	WALFileBytes int64
	// CheckpointInterval is how often WAL mode and raft mode fsync segments and
	// checkpoint (RunCheckpoint, RunRaftCheckpoint); 0 = 1 s; < 0 disables the loop.
	CheckpointInterval time.Duration
	// Raft, when set, turns on raft mode (raftmode.go, issue 16 step 2): every channel
	// is a Raft group replicated on every peer. Not with WAL or FsyncInterval.
	Raft *RaftOptions
	// Cleaner sizes the log cleaner of compacted channels (cleaner.go).
	Cleaner CleanerOptions
	// minSegmentBytes overrides MinSegmentBytes (tests with tiny segments); 0 = default.
	minSegmentBytes int64
	// swapHook, when set, is called at each step of the cleaner's segment swap
	// (swapSegments' swapStep* names) with the number of segments replaced, under the
	// log's mu (crash tests).
	swapHook func(step string, segs int)
}

// minSegmentBytes is the segment_bytes lower bound Create and UpdateConfig apply.
func (s *Store) minSegmentBytes() int64 {
	if s.opts.minSegmentBytes > 0 {
		return s.opts.minSegmentBytes
	}
	return MinSegmentBytes
}

// Store holds every channel under one data directory:
//
//	<data-dir>/LOCK                  flock held while open
//	<data-dir>/channels/<name>/      meta.json + segments
//	<data-dir>/trash/                deleted channels, removed in the background
type Store struct {
	dir     string
	opts    Options
	log     *zap.Logger
	metrics *Metrics
	lock    *os.File

	// adminMu serializes Create and Delete (their file operations run under it, not
	// under mu, so lookups by appends and reads never wait for a create's fsyncs).
	adminMu sync.Mutex
	mu      sync.RWMutex
	logs    map[string]*Log
	closed  bool
	// fenced: channels whose data failed to load (corruption in the middle of a
	// segment); they answer ErrStorage naming the damage until deleted.
	fenced map[string]fencedChannel

	stop chan struct{}
	// cleaner is the log cleaner (cleaner.go); nil when off.
	cleaner *cleaner
	wg      sync.WaitGroup

	// WAL mode (walmode.go): the node write-ahead log, the checkpoint read at open,
	// and ckptMu serializing checkpoints.
	wal    *wal.WAL
	ckpt   map[uint64]checkpoint
	ckptMu sync.Mutex
	// raft: raft mode (raftmode.go), nil otherwise. raftResume: the checkpoints raft
	// mode resumes from (raftckpt.go), nil when it rebuilds the channels from the WAL.
	raft       *raftState
	raftResume map[uint64]raftCheckpoint
}

// fencedChannel is a channel that failed to load at start.
type fencedChannel struct {
	dir string
	err error
}

func (f fencedChannel) error(name string) error {
	return fmt.Errorf("%w: channel %s is fenced: its data failed to load at start (%v)", ErrStorage, name, f.err)
}

// Open opens (creating if needed) the data directory, recovers every channel and
// starts the background loops. It fails when another process holds the directory.
func Open(dir string, opts Options, log *zap.Logger) (*Store, error) {
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.RetentionInterval == 0 {
		opts.RetentionInterval = 30 * time.Second
	}
	if forceWAL && opts.FsyncInterval == 0 && opts.Raft == nil {
		opts.WAL = true // go test -tags walmode: every test in WAL mode
	}
	if opts.WAL && opts.FsyncInterval > 0 {
		return nil, fmt.Errorf("%w: WAL mode fsyncs the write-ahead log before every acknowledgement; it does not take an fsync interval", ErrInvalidArgument)
	}
	if opts.CheckpointInterval == 0 {
		opts.CheckpointInterval = time.Second
	}
	if opts.Raft != nil {
		if err := prepareRaft(&opts); err != nil {
			return nil, err
		}
	}
	s := &Store{dir: dir, opts: opts, log: log, metrics: opts.Metrics, logs: map[string]*Log{}, fenced: map[string]fencedChannel{}, stop: make(chan struct{})}
	for _, d := range []string{s.channelsDir(), s.trashDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	lf, err := lockDataDir(dir, opts.LockWait, log)
	if err != nil {
		return nil, err
	}
	s.lock = lf
	if err := os.RemoveAll(s.trashDir()); err != nil {
		log.Warn("empty trash", zap.Error(err))
	}
	_ = os.MkdirAll(s.trashDir(), 0o755)
	if opts.Raft != nil {
		ck, ok, err := readRaftCheckpoint(filepath.Join(dir, raftWALDir))
		if err == nil && !ok {
			// Rebuilding from the WAL needs all of it: once files were removed
			// below a checkpoint, only that checkpoint says where the kept
			// segments end, so the channels stay and the start is refused.
			var cut bool
			if cut, err = wal.Truncated(filepath.Join(dir, raftWALDir)); err == nil && cut {
				err = fmt.Errorf("%w: %s is missing and the WAL was truncated below it; the node cannot rebuild its channels from the WAL", ErrDataLoss, filepath.Join(dir, raftWALDir, raftCheckpointFile))
			}
		}
		if err == nil && !ok {
			err = s.resetChannels()
		}
		if err != nil {
			s.closeAll()
			return nil, err
		}
		s.raftResume = ck
	}
	if opts.WAL {
		if s.ckpt, err = readCheckpoint(s.walDir()); err != nil {
			s.closeAll()
			return nil, err
		}
	} else if err := s.checkWALDir(); err != nil {
		s.closeAll()
		return nil, err
	}
	entries, err := os.ReadDir(s.channelsDir())
	if err != nil {
		s.closeAll()
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		cdir := filepath.Join(s.channelsDir(), e.Name())
		if _, err := os.Stat(filepath.Join(cdir, metaFile)); errors.Is(err, os.ErrNotExist) {
			log.Warn("removing channel directory without meta (interrupted create)", zap.String("dir", cdir))
			_ = os.RemoveAll(cdir)
			continue
		}
		l, err := openLog(s, cdir)
		if err != nil && (errors.Is(err, ErrDataLoss) || errors.Is(err, ErrCorruptBatch)) {
			// Corrupt data: fence this channel, serve the others.
			name := e.Name()
			if m, merr := readMeta(cdir); merr == nil {
				name = m.Name
			}
			log.Error("channel fenced: its data is corrupt; fix or delete it", zap.String("channel", name), zap.String("dir", cdir), zap.Error(err))
			s.fenced[name] = fencedChannel{dir: cdir, err: err}
			continue
		}
		if err != nil {
			s.closeAll()
			return nil, fmt.Errorf("open channel dir %s: %w", cdir, err)
		}
		s.logs[l.name] = l
	}
	if opts.Raft != nil {
		if err := s.openRaft(); err != nil {
			s.closeAll()
			return nil, err
		}
	}
	if opts.Raft != nil && opts.CheckpointInterval > 0 {
		s.wg.Add(1)
		go s.loop(opts.CheckpointInterval, func() {
			if err := s.RunRaftCheckpoint(); err != nil {
				log.Error("raft checkpoint", zap.Error(err))
			}
		})
	}
	if opts.WAL {
		if err := s.openWAL(); err != nil {
			s.closeAll()
			return nil, err
		}
		if opts.CheckpointInterval > 0 {
			s.wg.Add(1)
			go s.loop(opts.CheckpointInterval, func() {
				if err := s.RunCheckpoint(); err != nil {
					log.Error("checkpoint", zap.Error(err))
				}
			})
		}
	}
	log.Info("storage opened", zap.String("dir", dir), zap.Int("channels", len(s.logs)), zap.Bool("wal", opts.WAL))
	if opts.FsyncInterval > 0 {
		s.wg.Add(1)
		go s.loop(opts.FsyncInterval, func() {
			for _, l := range s.snapshot() {
				l.syncIfDirty()
			}
		})
	}
	if opts.RetentionInterval > 0 {
		s.wg.Add(1)
		go s.loop(opts.RetentionInterval, s.RunRetention)
	}
	s.startCleaner()
	return s, nil
}

func (s *Store) channelsDir() string { return filepath.Join(s.dir, "channels") }
func (s *Store) trashDir() string    { return filepath.Join(s.dir, "trash") }
func (s *Store) nowMs() int64        { return s.opts.Now().UnixMilli() }

func (s *Store) loop(every time.Duration, fn func()) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

func (s *Store) snapshot() []*Log {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Log, 0, len(s.logs))
	for _, l := range s.logs {
		out = append(out, l)
	}
	return out
}

// RunRetention applies retention and producer-state expiry to every channel once. In
// raft mode it runs on each channel's leader only, which proposes the log start its own
// segments' time and size retention leave as a DeleteRecords entry (raftRetention) and
// the producers it expires as an expiry entry (raftExpireProducers).
func (s *Store) RunRetention() {
	now := s.nowMs()
	for _, l := range s.snapshot() {
		if s.raft != nil {
			l.raftRetention(now)
			l.raftExpireProducers(now)
			continue
		}
		l.enforceRetention(now)
	}
}

// Ready reports whether the data directory is usable.
func (s *Store) Ready() error {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if _, err := os.Stat(s.channelsDir()); err != nil {
		return fmt.Errorf("%w: %v", ErrStorage, err)
	}
	return nil
}

// Create creates a log channel. With ifNotExists an existing channel is returned with
// created=false; otherwise that is ErrExists.
func (s *Store) Create(name string, cfg ChannelConfig, ifNotExists bool) (*Log, bool, error) {
	return s.CreateKind(name, KindLog, cfg, ifNotExists)
}

// CreateKind is Create for a channel of the given kind (KindQueue: a queue's log,
// created by internal/queue). With ifNotExists an existing channel is returned as it
// is, whatever its kind.
func (s *Store) CreateKind(name string, kind Kind, cfg ChannelConfig, ifNotExists bool) (*Log, bool, error) {
	if kind != KindLog && kind != KindQueue {
		return nil, false, fmt.Errorf("%w: channel kind %d", ErrInvalidArgument, kind)
	}
	if err := channel.ValidateStored(name); err != nil {
		return nil, false, err
	}
	if err := cfg.validate(s.minSegmentBytes()); err != nil {
		return nil, false, err
	}
	if s.raft != nil {
		return s.raftCreate(name, kind, cfg, ifNotExists)
	}
	return s.createAt(name, kind, cfg, ifNotExists, s.nowMs(), 0)
}

// createAt is CreateKind after validation, with the creation time createdMs and, in
// raft mode, the channel's group id.
func (s *Store) createAt(name string, kind Kind, cfg ChannelConfig, ifNotExists bool, createdMs int64, group uint64) (*Log, bool, error) {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	s.mu.RLock()
	l, ok := s.logs[name]
	closed := s.closed
	f, isFenced := s.fenced[name]
	s.mu.RUnlock()
	if closed {
		return nil, false, ErrClosed
	}
	if isFenced {
		return nil, false, f.error(name)
	}
	if ok {
		if ifNotExists {
			return l, false, nil
		}
		return nil, false, fmt.Errorf("%w: %s", ErrExists, name)
	}
	dir := filepath.Join(s.channelsDir(), dirName(name))
	// A directory left by an interrupted create (no meta.json) may be replaced; one
	// holding a meta.json belongs to a channel (possibly another name mapping to the
	// same directory, e.g. one hashed by the older "~h~" scheme) and is never removed.
	if _, err := os.Lstat(filepath.Join(dir, metaFile)); err == nil {
		return nil, false, fmt.Errorf("%w: directory %s already holds another channel's data; refusing to replace it", ErrInternal, dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("%w: stat %s: %v", ErrStorage, dir, err)
	}
	_ = os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, false, fmt.Errorf("%w: mkdir: %v", ErrStorage, err)
	}
	seg, err := createSegment(dir, 0, createdMs)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, false, fmt.Errorf("%w: create segment: %v", ErrStorage, err)
	}
	_ = seg.close()
	m := &meta{Name: name, Config: cfg, CreatedMs: createdMs, Group: group}
	if s.wal != nil {
		m.Group = newGroupID()
	}
	if kind == KindQueue {
		m.Kind = KindQueue
	}
	if err := writeMeta(dir, m); err != nil { // fsyncs dir (segment entry too)
		_ = os.RemoveAll(dir)
		return nil, false, fmt.Errorf("%w: write meta: %v", ErrStorage, err)
	}
	if err := syncDir(s.channelsDir()); err != nil {
		_ = os.RemoveAll(dir)
		return nil, false, fmt.Errorf("%w: sync dir: %v", ErrStorage, err)
	}
	l, err = openLog(s, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, false, fmt.Errorf("%w: open: %v", ErrStorage, err)
	}
	if s.wal != nil {
		s.wal.SetFloor(l.wal.group, 0)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.close()
		return nil, false, ErrClosed
	}
	s.logs[name] = l
	s.mu.Unlock()
	s.log.Info("channel created", zap.String("channel", name))
	return l, true, nil
}

// Get returns a channel or ErrNotFound.
func (s *Store) Get(name string) (*Log, error) {
	s.mu.RLock()
	l, ok := s.logs[name]
	closed := s.closed
	f, isFenced := s.fenced[name]
	s.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if isFenced {
		return nil, f.error(name)
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return l, nil
}

// List returns channels whose names start with prefix, sorted by name.
func (s *Store) List(prefix string) []*Log {
	s.mu.RLock()
	out := make([]*Log, 0, len(s.logs))
	for n, l := range s.logs {
		if strings.HasPrefix(n, prefix) {
			out = append(out, l)
		}
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Delete removes a channel and its data. Missing: ErrNotFound unless ifExists.
func (s *Store) Delete(name string, ifExists bool) error {
	if s.raft != nil {
		return s.raftDelete(name, ifExists)
	}
	return s.deleteLocal(name, ifExists)
}

// deleteLocal is Delete on this node's files.
func (s *Store) deleteLocal(name string, ifExists bool) error {
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	l, ok := s.logs[name]
	if f, isFenced := s.fenced[name]; isFenced && !ok {
		delete(s.fenced, name)
		s.mu.Unlock()
		return s.trash(name, f.dir)
	}
	if !ok {
		s.mu.Unlock()
		if ifExists {
			return nil
		}
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	delete(s.logs, name)
	s.mu.Unlock()
	if err := l.close(); err != nil {
		s.log.Warn("close deleted channel", zap.String("channel", name), zap.Error(err))
	}
	if s.wal != nil {
		s.wal.DropGroup(l.wal.group)
	}
	return s.trash(name, l.dir)
}

// trash moves a deleted channel's directory to the trash and removes it.
func (s *Store) trash(name, dir string) error {
	trash := filepath.Join(s.trashDir(), strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.Rename(dir, trash); err != nil {
		return fmt.Errorf("%w: move to trash: %v", ErrStorage, err)
	}
	if err := syncDir(s.channelsDir()); err != nil {
		return fmt.Errorf("%w: sync dir: %v", ErrStorage, err)
	}
	if err := os.RemoveAll(trash); err != nil {
		s.log.Warn("remove deleted channel files", zap.String("dir", trash), zap.Error(err))
	}
	s.log.Info("channel deleted", zap.String("channel", name))
	return nil
}

// Close stops the background loops and closes every channel.
func (s *Store) Close() error {
	if s.raft != nil {
		s.raft.stop() // before adminMu: the metadata group's apply takes it
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	return s.closeAll()
}

func (s *Store) closeAll() error {
	var errs []error
	if s.raft != nil {
		s.raft.stop()
		if err := s.raft.w.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	closed := make(map[*Log]error, len(s.logs))
	for _, l := range s.logs {
		err := l.close()
		if err != nil {
			errs = append(errs, err)
		}
		closed[l] = err
	}
	if s.wal != nil {
		if err := s.closeWAL(closed); err != nil {
			errs = append(errs, err)
		}
	}
	if s.raft != nil && !s.raft.skipCloseCheckpoint {
		if err := s.raft.closeCheckpoint(closed); err != nil {
			errs = append(errs, err)
		}
	}
	if s.lock != nil {
		_ = syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
		_ = s.lock.Close()
	}
	return errors.Join(errs...)
}
