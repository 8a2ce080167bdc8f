package bridge

// Listener logins (listener.users, listener.password-file): a client names a known
// user and gives its password (bcrypt or argon2id hashes only are kept, see
// libs/passhash), and is held to the user's topic rules.

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/passhash"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/mapping"
)

// login is a user's password hash and topic rules (nil: every topic).
type login struct {
	hash               *passhash.Hash
	publish, subscribe []string
}

// authHook checks CONNECT credentials and topic rules. A refused CONNECT is
// answered 0x86 (bad user name or password: unknown user, wrong or missing password;
// MQTT 3.1.1 0x04) or 0x87 (not authorized: no user name; MQTT 3.1.1 0x05). A
// PUBLISH outside the user's publish rules is refused 0x87 (the library answers it,
// before anything is stored; MQTT 3.1.1 ends the connection), a SUBSCRIBE filter
// outside its subscribe rules gets 0x87 in the SUBACK (3.1.1 0x80).
//
// The password file is read again at a CONNECT when its modification time or size
// changed (one stat per CONNECT): a password changed there applies to the next one.
//
// With listener.coordinator-logins, a user name neither users: nor the password file
// knows is looked up in the coordinator (see logins.go); when the coordinator cannot
// answer, the CONNECT is refused 0x88 (server unavailable; MQTT 3.1.1 0x03). Such a
// client is held, while connected, to the rules its user had at its CONNECT.
type authHook struct {
	mqtt.HookBase
	l   *listener
	cfg config.ListenerConfig

	mu    sync.RWMutex
	users map[string]*login
	// file is the password file's state when last read.
	file os.FileInfo
	// refused is the CONNACK code (MQTT 5) to send each refused client.
	refused sync.Map // *mqtt.Client → byte
	// remote looks users up in the coordinator (coordinator-logins), or is nil;
	// connected holds the login of each client it logged in.
	remote    *remoteLogins
	connected sync.Map // *mqtt.Client → *login
	// verifying bounds the password hashes checked at once (each up to
	// passhash.MaxArgon2Memory of memory and a core for its time): CONNECTs past it
	// wait their turn rather than all hashing together.
	verifying chan struct{}
}

func newAuthHook(l *listener, c config.ListenerConfig, remote *remoteLogins) (*authHook, error) {
	h := &authHook{l: l, cfg: c, remote: remote, verifying: make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))}
	if err := h.load(); err != nil {
		return nil, err
	}
	return h, nil
}

// load reads the users: the password file's hashes, then the users: entries' rules
// and hashes.
func (h *authHook) load() error {
	users := map[string]*login{}
	var fi os.FileInfo
	if path := h.cfg.PasswordFile; path != "" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if fi, err = f.Stat(); err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, hash, ok := strings.Cut(line, ":")
			if !ok || name == "" {
				return fmt.Errorf("%s:%d: want name:hash", path, n)
			}
			ph, err := passhash.Parse(hash)
			if err != nil {
				return fmt.Errorf("%s:%d: %w", path, n, err)
			}
			users[name] = &login{hash: ph}
		}
		if err := sc.Err(); err != nil {
			return err
		}
	}
	for _, u := range h.cfg.Users {
		lg := users[u.Username]
		if lg == nil {
			lg = &login{}
			users[u.Username] = lg
		}
		if u.PasswordHash != "" {
			ph, err := passhash.Parse(u.PasswordHash)
			if err != nil {
				return fmt.Errorf("listener.users %s: %w", u.Username, err) // Validate refused it already
			}
			lg.hash = ph
		}
		lg.publish, lg.subscribe = u.Publish, u.Subscribe
	}
	h.mu.Lock()
	h.users, h.file = users, fi
	h.mu.Unlock()
	return nil
}

// refresh reads the password file again when it changed since it was read; a file
// that cannot be read (or is malformed) leaves the users as they were, logged.
func (h *authHook) refresh() {
	if h.cfg.PasswordFile == "" {
		return
	}
	fi, err := os.Stat(h.cfg.PasswordFile)
	h.mu.RLock()
	old := h.file
	h.mu.RUnlock()
	if err == nil && old != nil && fi.ModTime().Equal(old.ModTime()) && fi.Size() == old.Size() {
		return
	}
	if err == nil {
		err = h.load()
	}
	if err != nil {
		h.l.log.Warn("password file not read again; the users read before stay", zap.Error(err))
		return
	}
	h.l.log.Info("password file read again", zap.String("file", h.cfg.PasswordFile))
}

func (h *authHook) user(name string) *login {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.users[name]
}

func (h *authHook) ID() string { return "tributary-auth" }

func (h *authHook) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck || b == mqtt.OnPacketEncode || b == mqtt.OnDisconnect
}

// OnConnectAuthenticate checks the CONNECT's user name and password.
func (h *authHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	if cl.Net.Inline {
		return true
	}
	code := packets.ErrBadUsernameOrPassword.Code
	defer func() {
		if code != 0 {
			h.refused.Store(cl, code)
		}
	}()
	if cn, ok := h.certificateUser(cl); ok {
		if pk.Connect.UsernameFlag && string(pk.Connect.Username) != cn {
			h.l.log.Info("CONNECT user name is not its certificate's CN; refused", zap.String("client", cl.ID), zap.String("cn", cn))
			return false
		}
		cl.Properties.Username = []byte(cn)
		code = 0
		return true
	}
	if !pk.Connect.UsernameFlag {
		code = packets.ErrNotAuthorized.Code
		h.l.log.Info("CONNECT without a user name refused", zap.String("client", cl.ID))
		return false
	}
	h.refresh()
	lg := h.user(string(pk.Connect.Username))
	remote := false
	if lg == nil && h.remote != nil {
		var err error
		if lg, err = h.remote.get(h.l.b.ctx, string(pk.Connect.Username)); err != nil {
			code = packets.ErrServerUnavailable.Code
			h.l.log.Warn("CONNECT refused: the coordinator could not look its user up", zap.String("client", cl.ID), zap.ByteString("username", pk.Connect.Username), zap.Error(err))
			return false
		}
		remote = lg != nil
	}
	if lg == nil || lg.hash == nil || !pk.Connect.PasswordFlag || !h.verify(lg.hash, pk.Connect.Password) {
		h.l.log.Info("CONNECT with a bad user name or password refused", zap.String("client", cl.ID), zap.ByteString("username", pk.Connect.Username))
		return false
	}
	if remote {
		h.connected.Store(cl, lg)
	}
	code = 0
	return true
}

// verify checks password against hash, in one of the verifying slots.
func (h *authHook) verify(hash *passhash.Hash, password []byte) bool {
	h.verifying <- struct{}{}
	defer func() { <-h.verifying }()
	return hash.Verify(password)
}

// certificateUser is the CN of the client's verified certificate, when
// certificate-login is on and the client gave one.
func (h *authHook) certificateUser(cl *mqtt.Client) (string, bool) {
	if !h.cfg.CertificateLogin {
		return "", false
	}
	tc, ok := rawConn(cl.Net.Conn).(*tls.Conn)
	if !ok {
		return "", false
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Subject.CommonName == "" {
		return "", false
	}
	return st.PeerCertificates[0].Subject.CommonName, true
}

// OnPacketEncode gives a refused CONNECT its code (the library answers 0x86, or 0x05
// to MQTT 3.1.1, whatever the cause).
func (h *authHook) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type != packets.Connack {
		return pk
	}
	v, ok := h.refused.LoadAndDelete(cl)
	if !ok {
		return pk
	}
	code := v.(byte)
	if cl.Properties.ProtocolVersion < 5 {
		switch code {
		case packets.ErrNotAuthorized.Code:
			code = packets.Err3NotAuthorized.Code
		case packets.ErrServerUnavailable.Code:
			code = packets.Err3ServerUnavailable.Code
		default:
			code = packets.ErrMalformedUsernameOrPassword.Code // 0x04: bad user name or password
		}
	}
	pk.ReasonCode = code
	return pk
}

// OnDisconnect forgets a refused or connected client.
func (h *authHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	h.refused.Delete(cl)
	h.connected.Delete(cl)
}

// OnACLCheck: a publish (write) to topic, or a subscription to a filter or delivery
// of a topic (read), within the user's rules; a delivery pace dropped (a stalled
// subscriber past its queue bytes) is refused.
func (h *authHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if cl.Net.Inline {
		return true
	}
	if !write && !h.l.pace.deliverable(cl) {
		return false
	}
	lg := h.user(string(cl.Properties.Username))
	if lg == nil {
		if v, ok := h.connected.Load(cl); ok {
			lg = v.(*login)
		}
	}
	if lg == nil {
		// A certificate user without a users: entry may use every topic.
		_, ok := h.certificateUser(cl)
		return ok
	}
	rules := lg.subscribe
	if write {
		rules = lg.publish
	}
	if rules == nil {
		return true
	}
	for _, r := range rules {
		if covers(substitute(r, string(cl.Properties.Username), cl.ID), topic) {
			return true
		}
	}
	return false
}

// substitute puts the user name for a %u level of rule and the client id for a %c
// level. A name or id holding /, + or # matches no topic through them.
func substitute(rule, user, client string) string {
	levels := strings.Split(rule, "/")
	for i, lv := range levels {
		var v string
		switch lv {
		case "%u":
			v = user
		case "%c":
			v = client
		default:
			continue
		}
		if v == "" || strings.ContainsAny(v, "/+#") {
			v = "\x00" // no topic or filter has a NUL
		}
		levels[i] = v
	}
	return strings.Join(levels, "/")
}

// covers reports whether filter f (a topic name, or a subscription's filter) is
// within rule: every topic f matches, rule matches.
func covers(rule, f string) bool {
	if !strings.ContainsAny(f, "+#") {
		return mapping.MatchFilter(rule, f)
	}
	if strings.HasPrefix(f, "$share/") {
		rest := strings.TrimPrefix(f, "$share/")
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			f = rest[i+1:]
		}
	}
	rl, fl := strings.Split(rule, "/"), strings.Split(f, "/")
	for i, r := range rl {
		if r == "#" {
			return true
		}
		if i >= len(fl) {
			return false
		}
		switch {
		case fl[i] == "#":
			return false
		case r == "+":
		case fl[i] == "+" || r != fl[i]:
			return false
		}
	}
	return len(rl) == len(fl)
}

// allowHook lets every client in when no login is configured; its ACL check refuses
// only the deliveries pace dropped (a stalled subscriber past its queue bytes).
type allowHook struct {
	mqtt.HookBase
	l *listener
}

func (h *allowHook) ID() string { return "tributary-allow" }

func (h *allowHook) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}

func (h *allowHook) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }

func (h *allowHook) OnACLCheck(cl *mqtt.Client, _ string, write bool) bool {
	return write || cl.Net.Inline || h.l.pace.deliverable(cl)
}
