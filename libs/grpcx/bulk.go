package grpcx

import "google.golang.org/grpc"

// Transport sizes of the storage-core connection, which carries MiB-sized messages
// (AppendBatches, Fetch and Receive answers). Both ends use the same ones.
const (
	// BulkStreamWindow is the fixed HTTP/2 stream flow-control window, in bytes
	// (instead of gRPC's 64 KiB start grown by BDP estimation).
	BulkStreamWindow = 16 << 20
	// BulkConnWindow is the fixed HTTP/2 connection flow-control window, in bytes.
	BulkConnWindow = 64 << 20
	// BulkSocketBuffer is the socket read and write buffer, in bytes (instead of
	// 32 KiB: fewer syscalls per MiB).
	BulkSocketBuffer = 1 << 20
)

// BulkServerOptions are the server options of a bulk (storage-core) gRPC server.
func BulkServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(BulkStreamWindow),
		grpc.InitialConnWindowSize(BulkConnWindow),
		grpc.WriteBufferSize(BulkSocketBuffer),
		grpc.ReadBufferSize(BulkSocketBuffer),
	}
}

// BulkDialOptions are the dial options of a client of a bulk (storage-core) server,
// sized as BulkServerOptions.
func BulkDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(BulkStreamWindow),
		grpc.WithInitialConnWindowSize(BulkConnWindow),
		grpc.WithWriteBufferSize(BulkSocketBuffer),
		grpc.WithReadBufferSize(BulkSocketBuffer),
	}
}
