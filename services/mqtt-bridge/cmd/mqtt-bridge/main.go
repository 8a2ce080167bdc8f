// Command mqtt-bridge moves MQTT messages into Kafka topics (storage-core channels) and
// Kafka records back to MQTT, as its YAML config says.
//
//	mqtt-bridge -C FILE            run (--config=FILE is the same)
//	mqtt-bridge check -C FILE      print every problem of FILE with its line; exit 0
//	                               only when it would load (warnings allowed)
//
// Every config value can be overridden from the environment: TRIBUTARY_MQTT_ plus the
// key's path (TRIBUTARY_MQTT_STORAGE_ADDR, TRIBUTARY_MQTT_CLUSTERS_0_PASSWORD).
// TRIBUTARY_MQTT_CONFIG names the file when -C is not given.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/obs"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/bridge"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
)

// errCheckFailed makes `check` exit 1 after printing its findings.
var errCheckFailed = errors.New("config has errors")

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		if !errors.Is(err, errCheckFailed) {
			fmt.Fprintln(os.Stderr, "mqtt-bridge:", err)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	check := false
	if len(args) > 0 && args[0] == "check" {
		check, args = true, args[1:]
	}
	fs := flag.NewFlagSet("mqtt-bridge", flag.ContinueOnError)
	path := fs.String("C", "", "YAML config file (env TRIBUTARY_MQTT_CONFIG)")
	fs.StringVar(path, "config", "", "the same as -C")
	level := fs.String("log-level", "", "log level, overriding the file's log-level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		*path = os.Getenv(config.EnvPrefix + "CONFIG")
	}
	if *path == "" {
		return errors.New("no config: pass -C FILE")
	}
	cfg, problems, err := config.LoadFile(*path)
	if check {
		if cfg == nil && err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", *path, err)
			return errCheckFailed
		}
		for _, p := range problems {
			fmt.Println(p.In(*path))
		}
		if problems.Err() != nil {
			return errCheckFailed
		}
		fmt.Printf("%s: ok (%d mqtt-to-kafka, %d kafka-to-mqtt mappings)\n", *path, len(cfg.MQTTToKafka), len(cfg.KafkaToMQTT))
		return nil
	}
	if err != nil {
		return err
	}
	if *level != "" {
		cfg.LogLevel = *level
	}
	log, err := obs.NewLogger("mqtt-bridge", cfg.LogLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	for _, p := range problems {
		log.Warn("config warning", zap.String("problem", p.String()))
	}
	obs.TuneGCPercent()
	b, err := bridge.New(cfg, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return b.Run(ctx)
}
