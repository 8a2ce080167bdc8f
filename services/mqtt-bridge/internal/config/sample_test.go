package config

import (
	"os"
	"reflect"
	"regexp"
	"testing"
)

const samplePath = "../../config/sample.yaml"

// TestSampleLoadsStrictly loads config/sample.yaml as the bridge does (unknown keys are
// errors): it must have no problem at all, and its listener limits must be the defaults
// the comments say they are.
func TestSampleLoadsStrictly(t *testing.T) {
	data, err := os.ReadFile(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	cfg, ps := Load(data, noEnv)
	if len(ps) != 0 {
		t.Fatalf("sample has problems:\n%v", ps)
	}
	l := cfg.Listener
	if l == nil {
		t.Fatal("sample has no listener")
	}
	got := map[string][2]any{
		"queue-size":               {l.QueueSize, DefaultQueueSize},
		"max-connections":          {l.MaxConnections, int64(DefaultMaxConnections)},
		"max-session-expiry":       {l.MaxSessionExpiry, DefaultMaxSessionExpiry},
		"max-keepalive":            {l.MaxKeepAlive, DefaultMaxKeepAlive},
		"connect-timeout":          {l.ConnectTimeout, DefaultConnectTimeout},
		"subscriber-stall-timeout": {l.StallTimeout, DefaultStallTimeout},
		"queue-bytes.session":      {l.QueueBytes.Session, int64(DefaultQueueBytesSession)},
		"queue-bytes.total":        {l.QueueBytes.Total, int64(DefaultQueueBytesTotal)},
		"retained.topic":           {l.Retained.Topic, ""},
		"retained.store":           {l.RetainedStore(), RetainedMemory},
		"events.enabled":           {l.Events.Enabled, false},
		"coordinator-logins":       {l.CoordinatorLogins, false},
		"certificate-login":        {l.CertificateLogin, false},
	}
	for k, v := range got {
		if v[0] != v[1] {
			t.Errorf("listener.%s = %v, want the default %v", k, v[0], v[1])
		}
	}
	top := map[string][2]any{
		"http-addr":        {cfg.HTTPAddr, DefaultHTTPAddr},
		"storage-addr":     {cfg.StorageAddr, DefaultStorageAddr},
		"coordinator-addr": {cfg.CoordinatorAddr, DefaultCoordinatorAddr},
		"nats-url":         {cfg.NATSURL, DefaultNATSURL},
		"cluster-id":       {cfg.ClusterID, DefaultClusterID},
		"store-timeout":    {cfg.StoreTimeout, DefaultStoreTimeout},
		"max-record-bytes": {cfg.MQTTToKafka[0].MaxRecordBytes, DefaultMaxRecordBytes},
	}
	for k, v := range top {
		if v[0] != v[1] {
			t.Errorf("%s = %v, want the default %v", k, v[0], v[1])
		}
	}
}

// TestSampleListsEverySetting fails when a key of the config types is missing from
// config/sample.yaml, set or in a comment, so a new setting gets documented there.
func TestSampleListsEverySetting(t *testing.T) {
	data, err := os.ReadFile(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[reflect.Type]bool{}
	var visit func(reflect.Type, string)
	visit = func(ty reflect.Type, path string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] {
			return
		}
		seen[ty] = true
		for name, f := range yamlFields(ty) {
			if !regexp.MustCompile(`(^|[\s{,#-])` + regexp.QuoteMeta(name) + `:`).Match(data) {
				t.Errorf("sample.yaml does not list %s", join(path, name))
			}
			visit(f.Type, join(path, name))
		}
	}
	visit(reflect.TypeOf(Config{}), "")
}
