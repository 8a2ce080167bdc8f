package server

import (
	"context"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Kafka strings are bytes on the wire; Kafka's brokers decode them as UTF-8, replacing
// malformed sequences with U+FFFD. Protobuf strings must be valid UTF-8, so a group id,
// member id or commit metadata with a malformed sequence used to fail to marshal and the
// client got COORDINATOR_NOT_AVAILABLE, which it retries forever. sanitizeStrings
// decodes as Kafka does before a request leaves for the coordinator. NUL, valid UTF-8
// that Postgres text cannot hold, is replaced by U+FFFD too (a divergence from Kafka,
// which keeps it).
func sanitizeStrings(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if m, ok := req.(proto.Message); ok {
		sanitizeMessage(m.ProtoReflect())
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func sanitizeMessage(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			mp := v.Map()
			if fd.MapValue().Kind() == protoreflect.StringKind || fd.MapKey().Kind() == protoreflect.StringKind {
				type kv struct {
					k protoreflect.MapKey
					v protoreflect.Value
				}
				var fix []kv
				mp.Range(func(k protoreflect.MapKey, val protoreflect.Value) bool {
					fix = append(fix, kv{k, val})
					return true
				})
				for _, e := range fix {
					k, val := e.k, e.v
					if fd.MapKey().Kind() == protoreflect.StringKind {
						if s := k.String(); !clean(s) {
							mp.Clear(k)
							k = protoreflect.ValueOfString(decodeLikeKafka(s)).MapKey()
						}
					}
					if fd.MapValue().Kind() == protoreflect.StringKind {
						val = protoreflect.ValueOfString(decodeLikeKafka(val.String()))
					}
					mp.Set(k, val)
				}
			} else if fd.MapValue().Kind() == protoreflect.MessageKind {
				mp.Range(func(_ protoreflect.MapKey, val protoreflect.Value) bool {
					sanitizeMessage(val.Message())
					return true
				})
			}
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				switch fd.Kind() {
				case protoreflect.StringKind:
					if s := l.Get(i).String(); !clean(s) {
						l.Set(i, protoreflect.ValueOfString(decodeLikeKafka(s)))
					}
				case protoreflect.MessageKind, protoreflect.GroupKind:
					sanitizeMessage(l.Get(i).Message())
				}
			}
		case fd.Kind() == protoreflect.StringKind:
			if s := v.String(); !clean(s) {
				m.Set(fd, protoreflect.ValueOfString(decodeLikeKafka(s)))
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			sanitizeMessage(v.Message())
		}
		return true
	})
}

func clean(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// decodeLikeKafka replaces malformed UTF-8 sequences and NUL with U+FFFD.
func decodeLikeKafka(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
