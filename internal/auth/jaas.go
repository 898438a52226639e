package auth

import (
	"fmt"
	"strings"
)

// JAAS is one login module entry of a sasl.jaas.config value, e.g.
//
//	org.apache.kafka.common.security.plain.PlainLoginModule required
//	    username="admin" password="admin-secret" user_alice="alice-secret";
//
// On a broker, username/password are what it logs in with when it connects
// to other nodes, and (PLAIN) user_<name> entries are the users it accepts.
type JAAS struct {
	Module  string
	Flag    string
	Options map[string]string
}

// ParseJAAS parses a sasl.jaas.config value (one login module).
func ParseJAAS(s string) (JAAS, error) {
	p := &jaasParser{s: s}
	j := JAAS{Options: map[string]string{}}
	j.Module = p.word()
	j.Flag = p.word()
	if j.Module == "" || j.Flag == "" {
		return JAAS{}, fmt.Errorf("sasl.jaas.config: want `LoginModule flag key=\"value\" ...;`")
	}
	switch j.Flag {
	case "required", "requisite", "sufficient", "optional":
	default:
		return JAAS{}, fmt.Errorf("sasl.jaas.config: control flag %q: want required", j.Flag)
	}
	for {
		p.space()
		if p.eof() {
			return JAAS{}, fmt.Errorf("sasl.jaas.config: missing the closing ';'")
		}
		if p.peek() == ';' {
			p.i++
			p.space()
			if !p.eof() {
				return JAAS{}, fmt.Errorf("sasl.jaas.config: one login module only (text after ';')")
			}
			return j, nil
		}
		key := p.until("= \t\r\n;")
		p.space()
		if key == "" || p.eof() || p.peek() != '=' {
			return JAAS{}, fmt.Errorf("sasl.jaas.config: want key=value near %q", p.rest())
		}
		p.i++
		p.space()
		val, err := p.value()
		if err != nil {
			return JAAS{}, err
		}
		j.Options[key] = val
	}
}

// PlainUsers are the user_<name>="<password>" options.
func (j JAAS) PlainUsers() map[string]string {
	out := map[string]string{}
	for k, v := range j.Options {
		if name, ok := strings.CutPrefix(k, "user_"); ok && name != "" {
			out[name] = v
		}
	}
	return out
}

type jaasParser struct {
	s string
	i int
}

func (p *jaasParser) eof() bool    { return p.i >= len(p.s) }
func (p *jaasParser) peek() byte   { return p.s[p.i] }
func (p *jaasParser) rest() string { return p.s[p.i:min(len(p.s), p.i+20)] }

func (p *jaasParser) space() {
	for !p.eof() && strings.IndexByte(" \t\r\n", p.peek()) >= 0 {
		p.i++
	}
}

func (p *jaasParser) until(stop string) string {
	start := p.i
	for !p.eof() && strings.IndexByte(stop, p.peek()) < 0 {
		p.i++
	}
	return p.s[start:p.i]
}

func (p *jaasParser) word() string {
	p.space()
	return p.until(" \t\r\n;")
}

func (p *jaasParser) value() (string, error) {
	if p.eof() {
		return "", fmt.Errorf("sasl.jaas.config: missing value")
	}
	if p.peek() != '"' {
		return p.until(" \t\r\n;"), nil
	}
	p.i++
	var b strings.Builder
	for !p.eof() {
		c := p.peek()
		p.i++
		switch c {
		case '\\':
			if p.eof() {
				return "", fmt.Errorf("sasl.jaas.config: dangling backslash")
			}
			b.WriteByte(p.peek())
			p.i++
		case '"':
			return b.String(), nil
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("sasl.jaas.config: unterminated quoted value")
}
