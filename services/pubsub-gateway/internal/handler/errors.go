package handler

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Messages of the NOT_FOUND statuses, as the emulator words them.
const (
	msgTopicNotFound      = "Topic not found"
	msgSubNotFound        = "Subscription does not exist"
	msgDeadLetterNotFound = "Dead letter topic not found"
)

// backendFailure is a failed coordinator or storage-core call on its way to a Pub/Sub
// client. Its text is the backend's, for the gateway's logic and logs; a client never
// sees it: the edge (edge.go) answers with clientCode and clientMessage instead.
//
// A raw failure is one MarkBackend marked as it came off the connection: GRPCStatus is
// the backend's own status, so the handler's checks on codes and messages read what
// the backend said. backendError maps one (raw, or any other error) for the client:
// GRPCStatus is then the client's code with a message written for the client.
type backendFailure struct {
	cause error
	raw   bool
	// code is the client's code, notFound the NOT_FOUND message ("" = the edge words
	// it); set by backendError.
	code     codes.Code
	notFound string
}

func (e *backendFailure) Error() string { return e.cause.Error() }
func (e *backendFailure) Unwrap() error { return e.cause }

// GRPCStatus is the backend's status while raw, else the client's.
func (e *backendFailure) GRPCStatus() *status.Status {
	if e.raw {
		return status.Convert(e.cause)
	}
	return status.New(e.code, clientMessage(e.code, e.notFound, "", ""))
}

// clientView returns the code and NOT_FOUND message a client gets for the failure.
func (e *backendFailure) clientView() (codes.Code, string) {
	if e.raw {
		return clientCode(status.Code(e.cause)), ""
	}
	return e.code, e.notFound
}

// backendError maps a failed coordinator or storage-core call to the status a Pub/Sub
// client gets (clientCode), never with the backend's words: NOT_FOUND with notFound as
// message (the edge words it when ""); the caller's own cancellation as CANCELLED /
// DEADLINE_EXCEEDED.
func backendError(ctx context.Context, err error, notFound string) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	code := codes.Unavailable
	if st, ok := status.FromError(err); ok {
		code = clientCode(st.Code())
	}
	return &backendFailure{cause: err, code: code, notFound: notFound}
}

// clientCode is the code a client gets for a backend's code c: those a client can act
// on (INVALID_ARGUMENT, ALREADY_EXISTS, FAILED_PRECONDITION, RESOURCE_EXHAUSTED,
// OUT_OF_RANGE, NOT_FOUND, UNIMPLEMENTED for a queue feature storage-core lacks, and
// the retryable UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED) as they are, everything else
// as UNAVAILABLE, which clients retry.
func clientCode(c codes.Code) codes.Code {
	switch c {
	case codes.NotFound, codes.InvalidArgument, codes.AlreadyExists, codes.FailedPrecondition, codes.ResourceExhausted,
		codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.OutOfRange, codes.Unimplemented:
		return c
	}
	return codes.Unavailable
}

// alreadyExists is ALREADY_EXISTS of each create method, as the emulator words it.
var alreadyExists = map[string]string{
	"/google.pubsub.v1.Publisher/CreateTopic":         "Topic already exists",
	"/google.pubsub.v1.Subscriber/CreateSubscription": "Subscription already exists",
	"/google.pubsub.v1.Subscriber/CreateSnapshot":     "Snapshot already exists",
	"/google.pubsub.v1.SchemaService/CreateSchema":    "Schema already exists",
}

// clientWords are Google's words for the codes of backend failures (a resource name
// follows those that end without a period).
var clientWords = map[codes.Code]string{
	codes.NotFound:           "Resource not found",
	codes.AlreadyExists:      "Resource already exists in the project",
	codes.InvalidArgument:    "Request contains an invalid argument",
	codes.FailedPrecondition: "Precondition check failed",
	codes.ResourceExhausted:  "Resource has been exhausted",
	codes.OutOfRange:         "Request is out of range",
	codes.Unimplemented:      "Operation is not implemented, or supported, or enabled",
	codes.DeadlineExceeded:   "Deadline expired before operation could complete",
	codes.Canceled:           "The operation was cancelled",
	codes.Unavailable:        "The service is currently unavailable.",
}

// clientMessage words a backend failure of code in method (a full gRPC method name;
// "" = unknown) for the client, as Google's service words these codes, naming
// resource (the name the client sent; "" = none). NOT_FOUND reads notFound when set,
// and ALREADY_EXISTS of a create method what the emulator says (neither names the
// resource, as the emulator's do not).
func clientMessage(code codes.Code, notFound, method, resource string) string {
	if code == codes.NotFound && notFound != "" {
		return notFound
	}
	if msg, ok := alreadyExists[method]; ok && code == codes.AlreadyExists {
		return msg
	}
	msg, ok := clientWords[code]
	switch {
	case !ok:
		return "Internal error encountered."
	case strings.HasSuffix(msg, "."):
		return msg
	case resource != "":
		return msg + " (resource=" + resource + ")."
	}
	return msg + "."
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}
