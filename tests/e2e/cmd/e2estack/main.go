// Command e2estack starts a throwaway Tributary stack the way the end-to-end tests do
// (own data dir, database and cluster id, free ports), prints its endpoints and log
// directory, and runs until SIGINT/SIGTERM, then cleans up. Handy for poking a stack
// with kcat or grpcurl while debugging a test.
//
// Run from tests/e2e: go run ./cmd/e2estack [-gateways 2] [-fsync always]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

func main() {
	gateways := flag.Int("gateways", 1, "kafka-gateway replicas")
	fsync := flag.String("fsync", "always", "storage-core --fsync")
	level := flag.String("log-level", "info", "log level of every process")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := testenv.Check(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "e2estack:", err)
		os.Exit(1)
	}
	defer stack.RemoveBinaries()
	s, err := stack.Start(ctx, stack.Options{Gateways: *gateways, Fsync: *fsync, LogLevel: *level})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2estack:", err)
		os.Exit(1)
	}
	fmt.Printf("storage-core grpc %s\ncoordinator grpc %s\nkafka %v\nlogs %s\ndata %s\ndatabase %s\ncluster %s\n",
		s.StorageAddr, s.CoordinatorAddr, s.KafkaAddrs, s.LogDir, s.DataDir, s.Database, s.ClusterID)
	<-ctx.Done()
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "e2estack: close:", err)
	}
}
