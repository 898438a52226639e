package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// scramSession is the server side of RFC 5802 (client-first, server-first,
// client-final, server-final) as Kafka's ScramSaslServer runs it. One
// difference from the RFC is deliberate: the client-final nonce must end
// with the server's nonce rather than equal it, because librdkafka (kcat,
// confluent-kafka-*) sends its own nonce in front of the server's and
// Kafka accepts that. The keys are derived by xdg-go/scram (scram.go).
type scramSession struct {
	store CredentialStore
	mech  string

	state      int // 0: want client-first; 1: want client-final; 2: done
	gs2        string
	firstBare  string
	serverMsg  string
	nonce      string
	cred       ScramCredential
	user       string
	authorized bool
}

func newScramSession(store CredentialStore, mech string) *scramSession {
	return &scramSession{store: store, mech: mech}
}

// Kafka's grammar (ScramMessages): saslname allows any printable byte but
// ',' and '=' (those come as =2C and =3D); the nonce any printable byte but
// ','; extensions are key=value pairs.
var (
	scramClientFirst = regexp.MustCompile(`^([ny]),(?:a=((?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+))?,(n=((?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+),r=([\x21-\x2b\x2d-\x7e]+)((?:,[A-Za-z]=[\x01-\x2b\x2d-\x7f]*)*))$`)
	scramClientFinal = regexp.MustCompile(`^(c=([A-Za-z0-9+/=]*),r=([\x21-\x2b\x2d-\x7e]+)(?:,[A-Za-z]=[\x01-\x2b\x2d-\x7f]*)*),p=([A-Za-z0-9+/=]+)$`)
)

func (s *scramSession) failed() error {
	return &AuthError{"Authentication failed during authentication due to invalid credentials with SASL mechanism " + s.mech}
}

func (s *scramSession) Step(in []byte) ([]byte, bool, error) {
	switch s.state {
	case 0:
		s.state = 2 // until it succeeds
		return s.first(string(in))
	case 1:
		s.state = 2
		return s.final(string(in))
	}
	return nil, false, errors.New("SCRAM exchange already complete")
}

func (s *scramSession) first(msg string) ([]byte, bool, error) {
	m := scramClientFirst.FindStringSubmatch(msg)
	if m == nil {
		return nil, false, &AuthError{"Invalid SCRAM client first message"}
	}
	for _, ext := range strings.Split(strings.TrimPrefix(m[6], ","), ",") {
		if strings.HasPrefix(ext, "m=") {
			return nil, false, &AuthError{"Invalid SCRAM client first message: mandatory extension"}
		}
		if ext == "tokenauth=true" {
			return nil, false, &AuthError{"Authentication failed: delegation tokens are not supported"}
		}
	}
	user := saslName(m[4])
	if authz := m[2]; authz != "" && saslName(authz) != user {
		return nil, false, &AuthError{"Authentication failed: Client requested an authorization id that is different from username"}
	}
	cred, ok := s.store.ScramCredential(user, s.mech)
	if !ok {
		return nil, false, s.failed()
	}
	var sn [24]byte
	if _, err := rand.Read(sn[:]); err != nil {
		return nil, false, err
	}
	s.gs2 = msg[:len(msg)-len(m[3])]
	s.firstBare = m[3]
	s.nonce = m[5] + base64.RawURLEncoding.EncodeToString(sn[:])
	s.cred, s.user = cred, user
	s.serverMsg = "r=" + s.nonce + ",s=" + base64.StdEncoding.EncodeToString(cred.Salt) + ",i=" + strconv.Itoa(cred.Iterations)
	s.state = 1
	return []byte(s.serverMsg), false, nil
}

func (s *scramSession) final(msg string) ([]byte, bool, error) {
	m := scramClientFinal.FindStringSubmatch(msg)
	if m == nil {
		return nil, false, &AuthError{"Invalid SCRAM client final message"}
	}
	cb, err := base64.StdEncoding.DecodeString(m[2])
	if err != nil || string(cb) != s.gs2 {
		return nil, false, &AuthError{"Invalid SCRAM client final message: channel binding"}
	}
	if !strings.HasSuffix(m[3], s.nonce) {
		return nil, false, &AuthError{"Invalid client nonce in the final client message."}
	}
	proof, err := base64.StdEncoding.DecodeString(m[4])
	if err != nil {
		return nil, false, &AuthError{"Invalid SCRAM client final message: proof"}
	}
	h, _, _ := scramHash(s.mech)
	mac := func(key []byte, data string) []byte {
		hm := hmac.New(h, key)
		hm.Write([]byte(data))
		return hm.Sum(nil)
	}
	authMessage := s.firstBare + "," + s.serverMsg + "," + m[1]
	sig := mac(s.cred.StoredKey, authMessage)
	if len(proof) != len(sig) {
		return nil, false, s.failed()
	}
	clientKey := make([]byte, len(sig))
	for i := range sig {
		clientKey[i] = proof[i] ^ sig[i]
	}
	sum := h()
	sum.Write(clientKey)
	if subtle.ConstantTimeCompare(sum.Sum(nil), s.cred.StoredKey) != 1 {
		return nil, false, s.failed()
	}
	s.authorized = true
	return []byte("v=" + base64.StdEncoding.EncodeToString(mac(s.cred.ServerKey, authMessage))), true, nil
}

func (s *scramSession) Principal() Principal { return User(s.user) }
func (s *scramSession) Expiry() time.Time    { return time.Time{} }
