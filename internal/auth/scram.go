package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"fmt"
	"hash"

	"github.com/xdg-go/scram"
)

// SASL mechanism names.
const (
	MechPlain       = "PLAIN"
	MechScramSHA256 = "SCRAM-SHA-256"
	MechScramSHA512 = "SCRAM-SHA-512"
	MechOAuthBearer = "OAUTHBEARER"
)

// SCRAM iteration bounds: Kafka refuses credentials outside them.
const (
	ScramMinIterations = 4096
	ScramMaxIterations = 16384
)

// ScramMechanismCode is the mechanism's code in Describe/AlterUserScram
// Credentials (1: SCRAM-SHA-256, 2: SCRAM-SHA-512); 0 for others.
func ScramMechanismCode(mech string) int8 {
	switch mech {
	case MechScramSHA256:
		return 1
	case MechScramSHA512:
		return 2
	}
	return 0
}

// ScramMechanismName is the inverse of ScramMechanismCode ("" if unknown).
func ScramMechanismName(code int8) string {
	switch code {
	case 1:
		return MechScramSHA256
	case 2:
		return MechScramSHA512
	}
	return ""
}

// ScramCredential is what the server keeps of a SCRAM user (RFC 5802): no
// password, only the salt, the iteration count and the two keys derived
// from the salted password. Field names are part of the metadata log's
// format.
type ScramCredential struct {
	User       string `json:"user"`
	Mechanism  string `json:"mechanism"`
	Iterations int    `json:"iterations"`
	Salt       []byte `json:"salt"`
	StoredKey  []byte `json:"stored_key"`
	ServerKey  []byte `json:"server_key"`
}

func scramHash(mech string) (func() hash.Hash, scram.HashGeneratorFcn, error) {
	switch mech {
	case MechScramSHA256:
		return sha256.New, scram.SHA256, nil
	case MechScramSHA512:
		return sha512.New, scram.SHA512, nil
	}
	return nil, nil, fmt.Errorf("unknown SCRAM mechanism %q", mech)
}

// ScramFromSaltedPassword derives a credential from the salted password a
// client sent in AlterUserScramCredentials (SaltedPassword = Hi(password,
// salt, iterations), computed client-side so the password never travels).
func ScramFromSaltedPassword(user, mech string, salted, salt []byte, iterations int) (ScramCredential, error) {
	h, _, err := scramHash(mech)
	if err != nil {
		return ScramCredential{}, err
	}
	if iterations < ScramMinIterations || iterations > ScramMaxIterations {
		return ScramCredential{}, fmt.Errorf("iterations %d: want %d..%d", iterations, ScramMinIterations, ScramMaxIterations)
	}
	if len(salt) == 0 || len(salted) == 0 {
		return ScramCredential{}, fmt.Errorf("empty salt or salted password")
	}
	mac := func(key []byte, s string) []byte {
		m := hmac.New(h, key)
		m.Write([]byte(s))
		return m.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	sum := h()
	sum.Write(clientKey)
	return ScramCredential{
		User: user, Mechanism: mech, Iterations: iterations, Salt: append([]byte(nil), salt...),
		StoredKey: sum.Sum(nil), ServerKey: mac(salted, "Server Key"),
	}, nil
}

// NewScramCredential derives a credential from a password with a fresh
// random salt (the bootstrap user, the CLI).
func NewScramCredential(user, mech, password string, iterations int) (ScramCredential, error) {
	if iterations == 0 {
		iterations = ScramMinIterations
	}
	salt := make([]byte, 32)
	if _, err := rand.Read(salt); err != nil {
		return ScramCredential{}, err
	}
	return scramFromPassword(user, mech, password, salt, iterations)
}

func scramFromPassword(user, mech, password string, salt []byte, iterations int) (ScramCredential, error) {
	_, gen, err := scramHash(mech)
	if err != nil {
		return ScramCredential{}, err
	}
	if iterations < ScramMinIterations || iterations > ScramMaxIterations {
		return ScramCredential{}, fmt.Errorf("iterations %d: want %d..%d", iterations, ScramMinIterations, ScramMaxIterations)
	}
	// Kafka's clients do not SASLprep the password: neither do we.
	cl, err := gen.NewClientUnprepped(user, password, "")
	if err != nil {
		return ScramCredential{}, err
	}
	sc, err := cl.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: iterations})
	if err != nil {
		return ScramCredential{}, err
	}
	return ScramCredential{
		User: user, Mechanism: mech, Iterations: iterations, Salt: append([]byte(nil), salt...),
		StoredKey: sc.StoredKey, ServerKey: sc.ServerKey,
	}, nil
}

// VerifyPassword reports whether password is the one c was made from (for
// SASL/PLAIN against SCRAM credentials), in constant time.
func (c ScramCredential) VerifyPassword(password string) bool {
	got, err := scramFromPassword(c.User, c.Mechanism, password, c.Salt, c.Iterations)
	if err != nil {
		return false
	}
	return subtle.ConstantTimeCompare(got.StoredKey, c.StoredKey) == 1
}
