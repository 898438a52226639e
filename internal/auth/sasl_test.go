package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

type memCreds map[string]ScramCredential

func (m memCreds) ScramCredential(user, mech string) (ScramCredential, bool) {
	c, ok := m[user+"/"+mech]
	return c, ok
}

func (m memCreds) add(t testing.TB, user, mech, pass string) {
	c, err := NewScramCredential(user, mech, pass, 4096)
	if err != nil {
		t.Fatal(err)
	}
	m[user+"/"+mech] = c
}

// exchange runs a real client mechanism (franz-go's) against a server
// session the way the wire layer does: client message in, server reply
// out, until either side is done.
func exchange(t testing.TB, srv *SASLServer, mech sasl.Mechanism) (Session, error) {
	t.Helper()
	sess, ok := srv.Start(mech.Name())
	if !ok {
		return nil, fmt.Errorf("mechanism %s not enabled", mech.Name())
	}
	cl, msg, err := mech.Authenticate(context.Background(), "localhost:9092")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		out, done, err := sess.Step(msg)
		if err != nil {
			return nil, err
		}
		cdone, next, cerr := cl.Challenge(out)
		if cerr != nil {
			return nil, fmt.Errorf("client: %w", cerr)
		}
		if done {
			if !cdone {
				return nil, errors.New("server done, client not")
			}
			return sess, nil
		}
		msg = next
	}
	return nil, errors.New("no end to the exchange")
}

func TestSCRAM(t *testing.T) {
	creds := memCreds{}
	creds.add(t, "alice", MechScramSHA512, "alice-secret")
	creds.add(t, "bob", MechScramSHA256, "bob-secret")
	srv, err := NewSASLServer(SASLConfig{Mechanisms: []string{MechScramSHA256, MechScramSHA512}, Scram: creds})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := exchange(t, srv, scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism())
	if err != nil {
		t.Fatal(err)
	}
	if sess.Principal() != User("alice") {
		t.Errorf("principal %v", sess.Principal())
	}
	if _, err := exchange(t, srv, scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha256Mechanism()); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []sasl.Mechanism{
		scram.Auth{User: "alice", Pass: "wrong"}.AsSha512Mechanism(),
		scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism(), // no 256 credential
		scram.Auth{User: "nobody", Pass: "x"}.AsSha512Mechanism(),
		scram.Auth{User: "alice", Pass: "alice-secret", Zid: "bob"}.AsSha512Mechanism(),
	} {
		if _, err := exchange(t, srv, bad); !IsAuthError(err) {
			t.Errorf("%s: got %v, want an authentication failure", bad.Name(), err)
		}
	}
}

func TestScramFromSaltedPasswordMatchesPassword(t *testing.T) {
	// What kadm sends in AlterUserScramCredentials: the salted password.
	c, err := NewScramCredential("u", MechScramSHA256, "pw", 4096)
	if err != nil {
		t.Fatal(err)
	}
	salted := pbkdf2SHA256([]byte("pw"), c.Salt, 4096)
	d, err := ScramFromSaltedPassword("u", MechScramSHA256, salted, c.Salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.StoredKey) != string(c.StoredKey) || string(d.ServerKey) != string(c.ServerKey) {
		t.Error("keys from the salted password differ from keys from the password")
	}
	if !d.VerifyPassword("pw") || d.VerifyPassword("px") {
		t.Error("VerifyPassword")
	}
	if _, err := ScramFromSaltedPassword("u", MechScramSHA256, salted, c.Salt, 100); err == nil {
		t.Error("100 iterations accepted")
	}
}

func TestPLAIN(t *testing.T) {
	creds := memCreds{}
	creds.add(t, "scrammy", MechScramSHA512, "s3cret")
	srv, err := NewSASLServer(SASLConfig{Mechanisms: []string{MechPlain}, Scram: creds, PlainUsers: map[string]string{"alice": "alice-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := exchange(t, srv, plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism())
	if err != nil || sess.Principal() != User("alice") {
		t.Fatalf("%v %v", sess, err)
	}
	if _, err := exchange(t, srv, plain.Auth{User: "scrammy", Pass: "s3cret"}.AsMechanism()); err != nil {
		t.Fatalf("PLAIN against a SCRAM credential: %v", err)
	}
	for _, bad := range []plain.Auth{{User: "alice", Pass: "nope"}, {User: "scrammy", Pass: "nope"}, {User: "x", Pass: "y"}, {Zid: "bob", User: "alice", Pass: "alice-secret"}} {
		if _, err := exchange(t, srv, bad.AsMechanism()); !IsAuthError(err) {
			t.Errorf("%+v: got %v", bad, err)
		}
	}
	if _, ok := srv.Start(MechScramSHA512); ok {
		t.Error("a mechanism that is not enabled started")
	}
}

func unsecuredToken(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(claims)) + "."
}

func TestOAuthUnsecured(t *testing.T) {
	v, err := NewOAuthValidator(OAuthConfig{AllowUnsecured: true})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewSASLServer(SASLConfig{Mechanisms: []string{MechOAuthBearer}, OAuth: v})
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	sess, err := exchange(t, srv, oauth.Auth{Token: unsecuredToken(fmt.Sprintf(`{"sub":"admin","exp":%d}`, exp))}.AsMechanism())
	if err != nil {
		t.Fatal(err)
	}
	if sess.Principal() != User("admin") || sess.Expiry().Unix() != exp+30 {
		t.Errorf("principal %v expiry %v", sess.Principal(), sess.Expiry())
	}
	_, err = exchange(t, srv, oauth.Auth{Token: unsecuredToken(fmt.Sprintf(`{"sub":"admin","exp":%d}`, time.Now().Add(-time.Hour).Unix()))}.AsMechanism())
	if err == nil || !strings.Contains(err.Error(), "invalid_token") {
		t.Errorf("expired token: %v", err)
	}
	if _, err := NewOAuthValidator(OAuthConfig{}); err == nil {
		t.Error("a validator without keys and without AllowUnsecured was built")
	}
}

// TestOAuthJWKS signs tokens with a key published in a JWKS file and checks
// issuer, audience, expiry and signature.
func TestOAuthJWKS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, path, "k1", &key.PublicKey)
	v, err := NewOAuthValidator(OAuthConfig{JWKSURL: "file://" + path, Issuer: "https://idp", Audience: []string{"holdfast"}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	sign := func(k *ecdsa.PrivateKey, claims jwt.MapClaims) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := jwt.MapClaims{"sub": "svc", "iss": "https://idp", "aud": "holdfast", "exp": time.Now().Add(time.Hour).Unix()}
	if sub, _, err := v.Validate(sign(key, good)); err != nil || sub != "svc" {
		t.Fatalf("good token: %q %v", sub, err)
	}
	with := func(k string, val any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if val == nil {
			delete(c, k)
		} else {
			c[k] = val
		}
		return c
	}
	for name, tok := range map[string]string{
		"wrong key":      sign(other, good),
		"wrong issuer":   sign(key, with("iss", "https://evil")),
		"wrong audience": sign(key, with("aud", "other")),
		"expired":        sign(key, with("exp", time.Now().Add(-time.Hour).Unix())),
		"no exp":         sign(key, with("exp", nil)),
		"no sub":         sign(key, with("sub", nil)),
		"unsecured":      unsecuredToken(`{"sub":"svc","iss":"https://idp","aud":"holdfast","exp":9999999999}`),
	} {
		if _, _, err := v.Validate(tok); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func writeJWKS(t testing.TB, path, kid string, pub *ecdsa.PublicKey) {
	t.Helper()
	raw, err := pub.Bytes() // 0x04, then X and Y, 32 bytes each
	if err != nil {
		t.Fatal(err)
	}
	b := func(n []byte) string { return base64.RawURLEncoding.EncodeToString(n) }
	doc := map[string]any{"keys": []map[string]string{{"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig", "x": b(raw[1:33]), "y": b(raw[33:])}}}
	data, _ := json.Marshal(doc)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The SASL exchanges take bytes from unauthenticated strangers: no input
// may panic or succeed without credentials.
func FuzzSASL(f *testing.F) {
	creds := memCreds{}
	creds.add(f, "alice", MechScramSHA256, "alice-secret")
	v, err := NewOAuthValidator(OAuthConfig{AllowUnsecured: true})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := NewSASLServer(SASLConfig{
		Mechanisms: []string{MechPlain, MechScramSHA256, MechOAuthBearer},
		Scram:      creds, PlainUsers: map[string]string{"bob": "bob-secret"}, OAuth: v,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(0), []byte("\x00bob\x00bob-secre"), []byte(nil))
	f.Add(uint8(1), []byte("n,,n=alice,r=abcdefgh"), []byte("c=biws,r=abcdefgh,p=AAAA"))
	f.Add(uint8(2), []byte("n,,\x01auth=Bearer a.b.\x01\x01"), []byte("\x01"))
	f.Add(uint8(2), []byte("n,a=x,\x01host=h\x01auth=Bearer "+unsecuredToken(`{"sub":"x","exp":1}`)+"\x01\x01"), []byte("\x01"))
	mechs := []string{MechPlain, MechScramSHA256, MechOAuthBearer}
	f.Fuzz(func(t *testing.T, m uint8, first, second []byte) {
		sess, ok := srv.Start(mechs[int(m)%len(mechs)])
		if !ok {
			t.Fatal("not started")
		}
		for _, msg := range [][]byte{first, second} {
			_, done, err := sess.Step(msg)
			if err != nil {
				return
			}
			if done {
				// Only the fuzz seeds' impossible credentials exist:
				// success means a hole, unless the input really holds
				// the PLAIN password or a valid unexpired token.
				p := sess.Principal()
				if p == User("bob") && strings.Contains(string(first), "bob-secret") {
					return
				}
				if strings.Contains(string(first), "auth=") && !sess.Expiry().IsZero() && sess.Expiry().After(time.Now()) {
					return
				}
				t.Fatalf("authenticated as %v from %q, %q", p, first, second)
			}
		}
	})
}

// pbkdf2SHA256 is Hi() of RFC 5802 for the test: what a client computes.
func pbkdf2SHA256(pass, salt []byte, iter int) []byte {
	mac := func(key, msg []byte) []byte {
		h := hmacNew(key)
		h.Write(msg)
		return h.Sum(nil)
	}
	u := mac(pass, append(append([]byte(nil), salt...), 0, 0, 0, 1))
	out := append([]byte(nil), u...)
	for i := 1; i < iter; i++ {
		u = mac(pass, u)
		for j := range out {
			out[j] ^= u[j]
		}
	}
	return out
}

func hmacNew(key []byte) hash.Hash { return hmac.New(sha256.New, key) }

// TestSCRAMLibrdkafkaNonce: librdkafka's client-final message carries its
// own nonce followed by the whole server nonce; Kafka accepts that (the
// final nonce must end with the server's), and so must we.
func TestSCRAMLibrdkafkaNonce(t *testing.T) {
	creds := memCreds{}
	creds.add(t, "admin", MechScramSHA256, "admin-secret")
	srv, err := NewSASLServer(SASLConfig{Mechanisms: []string{MechScramSHA256}, Scram: creds})
	if err != nil {
		t.Fatal(err)
	}
	for _, double := range []bool{false, true} {
		sess, _ := srv.Start(MechScramSHA256)
		cnonce := "2|xl4p^c2jqtaS64Tk{2>K5gtgIBl~u_"
		first := "n,,n=admin,r=" + cnonce
		out, done, err := sess.Step([]byte(first))
		if err != nil || done {
			t.Fatal(err)
		}
		serverFirst := string(out)
		var r, salt string
		var iters int
		for _, kv := range strings.Split(serverFirst, ",") {
			switch kv[0] {
			case 'r':
				r = kv[2:]
			case 's':
				salt = kv[2:]
			case 'i':
				fmt.Sscanf(kv[2:], "%d", &iters)
			}
		}
		if double {
			r = cnonce + r
		}
		saltB, _ := base64.StdEncoding.DecodeString(salt)
		salted := pbkdf2SHA256([]byte("admin-secret"), saltB, iters)
		withoutProof := "c=biws,r=" + r
		authMsg := first[3:] + "," + serverFirst + "," + withoutProof
		mac := func(key []byte, s string) []byte { h := hmacNew(key); h.Write([]byte(s)); return h.Sum(nil) }
		clientKey := mac(salted, "Client Key")
		stored := sha256.Sum256(clientKey)
		sig := mac(stored[:], authMsg)
		proof := make([]byte, len(sig))
		for i := range sig {
			proof[i] = clientKey[i] ^ sig[i]
		}
		_, done, err = sess.Step([]byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)))
		if err != nil || !done {
			t.Fatalf("double nonce %v: %v", double, err)
		}
	}
}

// TestOAuthClockSkewAppliesToExp: sasl.oauthbearer.clock.skew.seconds
// covers exp as it does nbf and iat: a token 10 s past its exp is accepted
// with the default 30 s skew and its session lasts until exp + 30 s (it
// used to pass the JWT checks and then fail as expired); 40 s past it is
// refused; with the skew set to none, 10 s past is refused too.
func TestOAuthClockSkewAppliesToExp(t *testing.T) {
	now := time.Now()
	token := func(exp time.Time) sasl.Mechanism {
		return oauth.Auth{Token: unsecuredToken(fmt.Sprintf(`{"sub":"svc","exp":%d}`, exp.Unix()))}.AsMechanism()
	}
	for _, c := range []struct {
		name string
		skew time.Duration
		exp  time.Time
		ok   bool
	}{
		{"10s late, default skew", 0, now.Add(-10 * time.Second), true},
		{"40s late, default skew", 0, now.Add(-40 * time.Second), false},
		{"10s late, 60s skew", time.Minute, now.Add(-10 * time.Second), true},
		{"10s late, no skew", -1, now.Add(-10 * time.Second), false},
		{"nbf 10s ahead, default skew", 0, time.Time{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := NewOAuthValidator(OAuthConfig{AllowUnsecured: true, ClockSkew: c.skew})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := NewSASLServer(SASLConfig{Mechanisms: []string{MechOAuthBearer}, OAuth: v})
			if err != nil {
				t.Fatal(err)
			}
			mech := token(c.exp)
			if c.exp.IsZero() {
				mech = oauth.Auth{Token: unsecuredToken(fmt.Sprintf(`{"sub":"svc","exp":%d,"nbf":%d}`, now.Add(time.Hour).Unix(), now.Add(10*time.Second).Unix()))}.AsMechanism()
			}
			sess, err := exchange(t, srv, mech)
			if !c.ok {
				if err == nil {
					t.Fatalf("accepted, session until %v", sess.Expiry())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The session must outlive now: the wire layer refuses a
			// credential whose expiry has passed.
			if !sess.Expiry().After(time.Now()) {
				t.Fatalf("session expiry %v is already past", sess.Expiry())
			}
			if !c.exp.IsZero() {
				skew := c.skew
				if skew == 0 {
					skew = 30 * time.Second
				}
				if want := c.exp.Unix() + int64(skew/time.Second); sess.Expiry().Unix() != want {
					t.Fatalf("session expiry %d, want exp + skew = %d", sess.Expiry().Unix(), want)
				}
			}
		})
	}
}
