package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/grpcx"
	"github.com/tributary/tributary/libs/tlsx"
	"github.com/tributary/tributary/libs/tlsx/tlsxtest"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Every RPC of both services has its own rule: none falls to the admin-on-cluster
// default unnoticed.
func TestEveryRPCHasARule(t *testing.T) {
	for _, desc := range []struct {
		service string
		methods []string
	}{
		{storagev1.StorageService_ServiceDesc.ServiceName, methodNames(storagev1.StorageService_ServiceDesc.Methods, storagev1.StorageService_ServiceDesc.Streams)},
		{storagev1.QueueService_ServiceDesc.ServiceName, methodNames(storagev1.QueueService_ServiceDesc.Methods, storagev1.QueueService_ServiceDesc.Streams)},
	} {
		for _, m := range desc.methods {
			if _, ok := authRules["/"+desc.service+"/"+m]; !ok {
				t.Errorf("%s/%s has no authorization rule", desc.service, m)
			}
		}
	}
}

// storage-core with --auth=required: a read-only token reads and may not append or
// delete, a service certificate may do everything but touch "_", a plaintext caller is
// UNAUTHENTICATED.
func TestAuthRequired(t *testing.T) {
	ca := tlsxtest.NewCA(t)
	cert, key := ca.Issue(t, "server", "storage-core")
	creds := filepath.Join(t.TempDir(), "creds")
	if err := os.WriteFile(creds, []byte("token ro-token reader read:kafka.orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DataDir: t.TempDir(), Security: grpcx.ServerSecurity{
		TLS:  tlsx.Server{CertFile: cert, KeyFile: key, ClientCAFile: ca.CertFile},
		Auth: grpcx.AuthRequired, CredentialsFile: creds, ServiceNames: grpcx.DefaultServiceNames,
	}}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var roConn *grpc.ClientConn
	dial := func(d grpcx.DialSecurity) storagev1.StorageServiceClient {
		opts, err := d.DialOptions()
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpcx.Dial(srv.GRPCAddr(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		roConn = cc
		return storagev1.NewStorageServiceClient(cc)
	}
	gwCert, gwKey := ca.Issue(t, "gw", "kafka-gateway")
	gw := dial(grpcx.DialSecurity{CAFile: ca.CertFile, CertFile: gwCert, KeyFile: gwKey})
	bg := context.Background()
	if _, err := gw.CreateChannel(bg, &storagev1.CreateChannelRequest{Name: "kafka.orders"}); err != nil {
		t.Fatalf("service certificate CreateChannel: %v", err)
	}
	if _, err := gw.Append(bg, &storagev1.AppendRequest{Channel: "kafka.orders", Records: []*storagev1.AppendRecord{{Value: []byte("v")}}}); err != nil {
		t.Fatalf("service certificate Append: %v", err)
	}
	want := func(what string, err error, code codes.Code) {
		t.Helper()
		if status.Code(err) != code {
			t.Errorf("%s: %v, want %v", what, err, code)
		}
	}
	_, err = gw.Read(bg, &storagev1.ReadRequest{Channel: "_KAFKA_x", FromSequence: 1})
	want("service Read _KAFKA_x", err, codes.PermissionDenied)

	ro := dial(grpcx.DialSecurity{CAFile: ca.CertFile})
	rctx := metadata.AppendToOutgoingContext(bg, "authorization", "Bearer ro-token")
	resp, err := ro.Read(rctx, &storagev1.ReadRequest{Channel: "kafka.orders", FromSequence: 1})
	if err != nil || len(resp.Records) != 1 || string(resp.Records[0].Value) != "v" {
		t.Fatalf("read-only Read: %v %v", resp, err)
	}
	_, err = ro.Append(rctx, &storagev1.AppendRequest{Channel: "kafka.orders", Records: []*storagev1.AppendRecord{{Value: []byte("w")}}})
	want("read-only Append", err, codes.PermissionDenied)
	_, err = ro.DeleteChannel(rctx, &storagev1.DeleteChannelRequest{Name: "kafka.orders"})
	want("read-only DeleteChannel", err, codes.PermissionDenied)
	_, err = ro.ListChannels(rctx, &storagev1.ListChannelsRequest{})
	want("read-only ListChannels of everything", err, codes.PermissionDenied)
	_, err = ro.ListChannels(rctx, &storagev1.ListChannelsRequest{Prefix: "kafka.orders"})
	want("read-only ListChannels kafka.orders", err, codes.OK)
	_, err = ro.Read(bg, &storagev1.ReadRequest{Channel: "kafka.orders", FromSequence: 1})
	want("TLS without credentials", err, codes.Unauthenticated)
	// A server stream is checked on its request: allowed on kafka.orders, not elsewhere.
	sctx, scancel := context.WithCancel(rctx)
	sub, err := ro.Subscribe(sctx, &storagev1.SubscribeRequest{Channel: "kafka.orders", Start: &storagev1.SubscribeRequest_First{First: true}})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := sub.Recv(); err != nil || len(m.Records) != 1 {
		t.Fatalf("read-only Subscribe kafka.orders: %v %v", m, err)
	}
	scancel()
	sub, err = ro.Subscribe(rctx, &storagev1.SubscribeRequest{Channel: "kafka.other", Start: &storagev1.SubscribeRequest_First{First: true}})
	if err == nil {
		_, err = sub.Recv()
	}
	want("read-only Subscribe kafka.other", err, codes.PermissionDenied)
	// Queue verbs too: creating a queue is admin, receiving from one read.
	qs := storagev1.NewQueueServiceClient(roConn)
	_, err = qs.CreateQueue(rctx, &storagev1.CreateQueueRequest{Name: "kafka.orders.q"})
	want("read-only CreateQueue", err, codes.PermissionDenied)
	_, err = qs.Receive(rctx, &storagev1.ReceiveRequest{Queue: "kafka.orders.q", MaxMessages: 1})
	want("read-only Receive (past auth: no such queue)", err, codes.NotFound)
	// What the read-only token may not do was not done.
	resp, err = gw.Read(bg, &storagev1.ReadRequest{Channel: "kafka.orders", FromSequence: 1})
	if err != nil || len(resp.Records) != 1 {
		t.Fatalf("after refused calls: %v %v, want the one record", resp, err)
	}

	plain := dial(grpcx.DialSecurity{})
	_, err = plain.Read(bg, &storagev1.ReadRequest{Channel: "kafka.orders", FromSequence: 1})
	want("plaintext", err, codes.Unauthenticated)
}

func methodNames(ms []grpc.MethodDesc, ss []grpc.StreamDesc) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.MethodName)
	}
	for _, s := range ss {
		out = append(out, s.StreamName)
	}
	return out
}
