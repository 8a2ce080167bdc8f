package mqttusers

// The `coordinator mqtt-users` command: drives MqttUserService of a running
// coordinator. Passwords are read from standard input or a file, never from the
// command line (where ps would show them), and hashed by the coordinator.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tributary/tributary/libs/flagenv"
	"github.com/tributary/tributary/libs/grpcx"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// cliTimeout bounds one command's call.
const cliTimeout = 30 * time.Second

// Usage is the command's synopsis.
const Usage = `usage: coordinator mqtt-users [flags] put USER [--password-stdin | --password-file F | --password-hash H] [--scheme argon2id|bcrypt] [--publish FILTER]... [--subscribe FILTER]...
       coordinator mqtt-users [flags] delete USER
       coordinator mqtt-users [flags] get USER      (prints the hash)
       coordinator mqtt-users [flags] list
flags: --addr host:port (127.0.0.1:7410), --coordinator-tls-ca, --tls-client-cert, --tls-client-key, --token-file
--publish and --subscribe may repeat; one given empty (--publish=) allows no topic; --publish-any and
--subscribe-any allow every topic (a new user given neither gets every topic).
On put, an existing user keeps its password without a password or hash, and its publish and subscribe
rules unless new ones are given. --scheme needs a password.`

// rulesFlag is a repeatable filter flag that knows whether it was given; any is its
// --publish-any / --subscribe-any (every topic).
type rulesFlag struct {
	set     bool
	any     bool
	filters []string
}

func (r *rulesFlag) String() string { return strings.Join(r.filters, ",") }

func (r *rulesFlag) Set(v string) error {
	r.set = true
	if v != "" {
		r.filters = append(r.filters, v)
	}
	return nil
}

// rules are the rules to put: old (the user's current rules, nil for every topic or
// a new user) unless the flag was given.
func (r *rulesFlag) rules(old *coordinatorv1.MqttTopicRules) *coordinatorv1.MqttTopicRules {
	switch {
	case r.any:
		return nil
	case !r.set:
		return old
	}
	return &coordinatorv1.MqttTopicRules{Filters: r.filters}
}

// Main runs the command with args (after "mqtt-users"), reading a password from
// stdin when asked, printing results to stdout.
func Main(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("mqtt-users", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("addr", "127.0.0.1:7410", "coordinator gRPC address")
	sec := grpcx.RegisterClientFlags(fs, "coordinator")
	pwStdin := fs.Bool("password-stdin", false, "put: read the password from standard input (its first line)")
	pwFile := fs.String("password-file", "", "put: read the password from this file (its content, without surrounding white space)")
	pwHash := fs.String("password-hash", "", "put: keep this bcrypt or argon2id hash as the password")
	scheme := fs.String("scheme", "", "put: hash the password with argon2id (default) or bcrypt")
	var pub, sub rulesFlag
	fs.Var(&pub, "publish", "put: a filter the user may publish to (repeat; %u user name, %c client id)")
	fs.Var(&sub, "subscribe", "put: a filter the user may subscribe within (repeat)")
	fs.BoolVar(&pub.any, "publish-any", false, "put: the user may publish to every topic")
	fs.BoolVar(&sub.any, "subscribe-any", false, "put: the user may subscribe to every topic")
	// Flags may come before or after the verb and user: parse, take the positional
	// words, parse the rest again.
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				_, err = fmt.Fprintln(stdout, Usage)
				return err
			}
			return fmt.Errorf("%w\n%s", err, Usage)
		}
		if fs.NArg() == 0 {
			break
		}
		words = append(words, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(words) == 0 {
		return fmt.Errorf("no verb given\n%s", Usage)
	}
	verb, rest := words[0], words[1:]
	wantArgs := 1
	if verb == "list" {
		wantArgs = 0
	}
	if len(rest) != wantArgs {
		return fmt.Errorf("%s: want %d user name(s), got %d\n%s", verb, wantArgs, len(rest), Usage)
	}
	dsec := sec.For("coordinator")
	opts, err := dsec.DialOptions()
	if err != nil {
		return err
	}
	cc, err := grpcx.Dial(*addr, opts...)
	if err != nil {
		return err
	}
	defer cc.Close()
	c := coordinatorv1.NewMqttUserServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	show := func(m *coordinatorv1.MqttUser) error {
		b, err := json.Marshal(cliUser(m))
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	}
	switch verb {
	case "put":
		n := 0
		for _, given := range []bool{*pwStdin, *pwFile != "", *pwHash != ""} {
			if given {
				n++
			}
		}
		if n > 1 {
			return errors.New("put: give one of --password-stdin, --password-file, --password-hash")
		}
		if *scheme != "" && (n == 0 || *pwHash != "") {
			return errors.New("put: --scheme hashes a new password: give --password-stdin or --password-file with it")
		}
		if (pub.any && pub.set) || (sub.any && sub.set) {
			return errors.New("put: --publish-any (--subscribe-any) and --publish (--subscribe) exclude each other")
		}
		var old *coordinatorv1.MqttUser
		if (!pub.set && !pub.any) || (!sub.set && !sub.any) {
			// Rules not given are kept: read the user's current ones.
			resp, err := c.GetMqttUser(ctx, &coordinatorv1.GetMqttUserRequest{Username: rest[0]})
			switch {
			case err == nil:
				old = resp.GetUser()
			case status.Code(err) != codes.NotFound:
				return statusErr(err)
			}
		}
		req := &coordinatorv1.PutMqttUserRequest{Username: rest[0], Scheme: *scheme,
			Publish: pub.rules(old.GetPublish()), Subscribe: sub.rules(old.GetSubscribe())}
		switch {
		case *pwStdin:
			pw, err := firstLine(stdin)
			if err != nil {
				return fmt.Errorf("password from stdin: %w", err)
			}
			req.Credential = &coordinatorv1.PutMqttUserRequest_Password{Password: pw}
		case *pwFile != "":
			pw, err := flagenv.ReadSecret(*pwFile)
			if err != nil {
				return err
			}
			req.Credential = &coordinatorv1.PutMqttUserRequest_Password{Password: pw}
		case *pwHash != "":
			req.Credential = &coordinatorv1.PutMqttUserRequest_PasswordHash{PasswordHash: *pwHash}
		}
		resp, err := c.PutMqttUser(ctx, req)
		if err != nil {
			return statusErr(err)
		}
		return show(resp.GetUser())
	case "delete":
		_, err := c.DeleteMqttUser(ctx, &coordinatorv1.DeleteMqttUserRequest{Username: rest[0]})
		return statusErr(err)
	case "get":
		resp, err := c.GetMqttUser(ctx, &coordinatorv1.GetMqttUserRequest{Username: rest[0]})
		if err != nil {
			return statusErr(err)
		}
		return show(resp.GetUser())
	case "list":
		resp, err := c.ListMqttUsers(ctx, &coordinatorv1.ListMqttUsersRequest{})
		if err != nil {
			return statusErr(err)
		}
		for _, u := range resp.GetUsers() {
			if err := show(u); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown verb %q\n%s", verb, Usage)
}

// userJSON is how the command prints a user, one JSON object a line: publish and
// subscribe absent for every topic, [] for none.
type userJSON struct {
	Username     string    `json:"username"`
	Scheme       string    `json:"scheme"`
	PasswordHash string    `json:"password_hash,omitempty"`
	Publish      *[]string `json:"publish,omitempty"`
	Subscribe    *[]string `json:"subscribe,omitempty"`
	UpdatedAt    string    `json:"updated_at"`
}

func cliUser(m *coordinatorv1.MqttUser) userJSON {
	rules := func(r *coordinatorv1.MqttTopicRules) *[]string {
		if r == nil {
			return nil
		}
		f := append([]string{}, r.GetFilters()...)
		return &f
	}
	return userJSON{Username: m.GetUsername(), Scheme: m.GetScheme(), PasswordHash: m.GetPasswordHash(),
		Publish: rules(m.GetPublish()), Subscribe: rules(m.GetSubscribe()),
		UpdatedAt: time.UnixMilli(m.GetUpdatedAtMs()).UTC().Format(time.RFC3339)}
}

// statusErr is a call's error as the command prints it: the status message and, for
// an unusual code, the code; never gRPC's "rpc error: code = ..." wrapping. The status
// stays readable with status.Code.
func statusErr(err error) error {
	if err == nil {
		return nil
	}
	return cliStatus{st: status.Convert(err)}
}

type cliStatus struct{ st *status.Status }

func (e cliStatus) GRPCStatus() *status.Status { return e.st }

func (e cliStatus) Error() string {
	switch e.st.Code() {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition:
		return e.st.Message()
	}
	return fmt.Sprintf("%s (%s)", e.st.Message(), e.st.Code())
}

// firstLine is r's first line without its line end.
func firstLine(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty")
	}
	return line, nil
}
