package auth

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

// The SASL server steps are what an unauthenticated client reaches: they
// must never panic, never take more than the message, and never succeed
// without the credential. Seeds are in testdata/fuzz/<target>; CI runs
// them as plain tests, `go test -fuzz FuzzX` explores further.

func fuzzCreds(f *testing.F) memCreds {
	c := memCreds{}
	c.add(f, "alice", MechScramSHA256, "alice-secret")
	c.add(f, "alice", MechScramSHA512, "alice-secret")
	return c
}

// FuzzSCRAMServer runs a client-first and a client-final message through
// a SCRAM session. In the final message %NONCE% stands for the server's
// nonce and %CB% for the base64 channel binding of the client's gs2
// header, so the fuzzer gets past the checks that a random nonce would
// otherwise stop it at. Without the password's proof the exchange must
// never complete.
func FuzzSCRAMServer(f *testing.F) {
	creds := fuzzCreds(f)
	f.Fuzz(func(t *testing.T, sha512 bool, first, final []byte) {
		mech := MechScramSHA256
		if sha512 {
			mech = MechScramSHA512
		}
		s := newScramSession(creds, mech)
		out, done, err := s.Step(first)
		if done {
			t.Fatal("SCRAM completed on the client-first message")
		}
		if err != nil {
			if !IsAuthError(err) {
				t.Fatalf("client-first: not an authentication error: %v", err)
			}
			if _, _, err := s.Step(final); err == nil {
				t.Fatal("a failed exchange took another step")
			}
			return
		}
		if !bytes.HasPrefix(out, []byte("r=")) || s.user != "alice" {
			t.Fatalf("server-first %q for user %q", out, s.user)
		}
		msg := strings.ReplaceAll(string(final), "%NONCE%", s.nonce)
		msg = strings.ReplaceAll(msg, "%CB%", base64.StdEncoding.EncodeToString([]byte(s.gs2)))
		if _, done, err := s.Step([]byte(msg)); done || err == nil {
			t.Fatalf("SCRAM completed without the password's proof: %q", msg)
		}
		if _, _, err := s.Step(nil); err == nil {
			t.Fatal("a finished exchange took another step")
		}
	})
}

// FuzzPLAINServer: a PLAIN message succeeds only as bob with bob's
// password (authzid empty or bob). (No SCRAM store: checking a password
// against one costs 4096 PBKDF2 rounds, which stalls the fuzzer; FuzzSASL
// covers that path.)
func FuzzPLAINServer(f *testing.F) {
	srv, err := NewSASLServer(SASLConfig{Mechanisms: []string{MechPlain}, PlainUsers: map[string]string{"bob": "bob-secret"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		s, _ := srv.Start(MechPlain)
		_, done, err := s.Step(msg)
		if err != nil {
			if done {
				t.Fatal("done with an error")
			}
			return
		}
		if !done {
			t.Fatal("PLAIN neither failed nor completed")
		}
		parts := bytes.Split(msg, []byte{0})
		ok := len(parts) == 3 && string(parts[1]) == "bob" && string(parts[2]) == "bob-secret" &&
			(len(parts[0]) == 0 || bytes.Equal(parts[0], parts[1]))
		if !ok || s.Principal() != User(string(parts[1])) {
			t.Fatalf("PLAIN accepted %q as %v", msg, s.Principal())
		}
		if _, _, err := s.Step(msg); err == nil {
			t.Fatal("a finished exchange took another step")
		}
	})
}

// FuzzOAuthBearerServer: the client's first OAUTHBEARER message (gs2
// header, key=value pairs, an unsecured JWT here) and its answer to a
// refusal. Success needs a token with a subject that has not expired.
func FuzzOAuthBearerServer(f *testing.F) {
	v, err := NewOAuthValidator(OAuthConfig{AllowUnsecured: true})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := NewSASLServer(SASLConfig{Mechanisms: []string{MechOAuthBearer}, OAuth: v})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, first, second []byte) {
		s, _ := srv.Start(MechOAuthBearer)
		out, done, err := s.Step(first)
		switch {
		case err != nil:
			if !IsAuthError(err) || done {
				t.Fatalf("first: %v (done %v)", err, done)
			}
			return
		case done:
			if s.Principal().Name == "" || !s.Expiry().After(time.Now()) {
				t.Fatalf("accepted %q: principal %v, expiry %v", first, s.Principal(), s.Expiry())
			}
			return
		}
		if string(out) != `{"status":"invalid_token"}` {
			t.Fatalf("neither done nor refused: %q", out)
		}
		// The client acknowledges (or not): the exchange fails either way.
		if _, done, err := s.Step(second); done || err == nil {
			t.Fatal("a refused token's exchange completed")
		}
	})
}
