// Command storage-core serves tributary.storage.v1: named channel logs on local disk.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tributary/tributary/libs/flagenv"
	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/obs"
	"github.com/tributary/tributary/services/storage-core/internal/server"
	"github.com/tributary/tributary/services/storage-core/internal/store"
	"go.uber.org/zap"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "check-replicas" {
		flagenv.Exit("storage-core check-replicas", checkReplicas(os.Args[2:]))
	}
	obs.TuneDataPathGC()
	flagenv.Exit("storage-core", run())
}

// dirList is a repeatable --data-dir flag.
type dirList []string

func (d *dirList) String() string     { return fmt.Sprint(*d) }
func (d *dirList) Set(v string) error { *d = append(*d, v); return nil }

// checkReplicas is "storage-core check-replicas --data-dir A --data-dir B ...": it
// compares the replicas' channels (store.CheckReplicas), prints each channel's
// compared range and every difference, and fails when there is one.
func checkReplicas(args []string) error {
	var dirs dirList
	fs := flag.NewFlagSet("storage-core check-replicas", flag.ContinueOnError)
	fs.Var(&dirs, "data-dir", "data directory of one replica (of a stopped node), given once per replica, at least twice")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rep, err := store.CheckReplicas(dirs)
	if err != nil {
		return err
	}
	for _, c := range rep.Channels {
		fmt.Printf("%s: offsets [%d, %d) compared, %d batches, %d bytes\n", c.Channel, c.From, c.To, c.Batches, c.Bytes)
	}
	for _, d := range rep.Diffs {
		fmt.Printf("%s: %s differs from %s at offset %d: %s\n", d.Channel, dirs[d.Replica], dirs[d.Ref], d.Offset, d.What)
	}
	if n := len(rep.Diffs); n > 0 {
		return fmt.Errorf("%d differences between the replicas", n)
	}
	return nil
}

func run() error {
	var cfg server.Config
	fs := flag.NewFlagSet("storage-core", flag.ContinueOnError)
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", "127.0.0.1:7400", "gRPC listen address (host:port; port 0 picks one)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:7401", "HTTP listen address for /metrics /healthz /readyz")
	fs.StringVar(&cfg.DataDir, "data-dir", "./run/data/storage", "data directory")
	fs.StringVar(&cfg.Fsync, "fsync", "always", "always (fsync before ack, group commit) or interval=<duration>")
	grpcx.RegisterServerFlags(fs, &cfg.Security)
	fs.BoolVar(&cfg.WAL, "wal", false, "node write-ahead log: appends of all channels share one fsync, segments are fsynced in the background (needs --fsync=always)")
	fs.Int64Var(&cfg.WALFileBytes, "wal-file-bytes", 64<<20, "with --wal or in raft mode: size at which a write-ahead log file is closed and a new one started (at least 1 MiB)")
	fs.Uint64Var(&cfg.NodeID, "node-id", 0, "raft mode (with --peers): this node's id; every channel is replicated on every peer (off: 0)")
	fs.StringVar(&cfg.Peers, "peers", "", "raft mode: every node of the cluster as id=host:port (its --grpc-addr), comma-separated, this one included")
	peerSec := grpcx.RegisterClientFlags(fs, "peer")
	fs.IntVar(&cfg.Cleaner.Threads, "cleaner-threads", 1, "log cleaner threads: compacted channels cleaned at once (0: off)")
	fs.Int64Var(&cfg.Cleaner.DedupeBufferBytes, "cleaner-dedupe-buffer-bytes", 128<<20, "memory of the log cleaner's key maps, shared by its threads, in bytes (at least 1 MiB a thread)")
	fs.Float64Var(&cfg.Cleaner.IOBytesPerSecond, "cleaner-io-bytes-per-second", 0, "log cleaner reads and writes, all threads together, in bytes per second (0: no limit)")
	fs.DurationVar(&cfg.Cleaner.Backoff, "cleaner-backoff", 15*time.Second, "pause of the log cleaner when no compacted channel is due")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := flagenv.Parse(fs, "storage-core", os.Args[1:]); err != nil {
		return err
	}
	cfg.PeerSecurity = peerSec.For("peer")
	if cfg.Cleaner.Threads == 0 {
		cfg.Cleaner.Threads = -1 // store.CleanerOptions: < 0 is off
	}
	log, err := obs.NewLogger("storage-core", *level)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	srv, err := server.New(cfg, log)
	if err != nil {
		log.Error("start failed", zap.Error(err))
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return srv.Run(ctx)
}
