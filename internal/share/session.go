package share

import (
	"context"
	"errors"
	"time"
)

// Share sessions (KIP-932, after KIP-227's fetch sessions): a member's
// ShareFetch/ShareAcknowledge requests to one broker carry a session
// epoch: 0 opens a session (replacing one the member had), each later
// request carries the epoch the previous one left (then it is bumped,
// wrapping to 1), -1 closes it, releasing what the member holds on the
// session's partitions.

// Session errors (Kafka's codes of the same names).
var (
	ErrSessionNotFound     = errors.New("share: SHARE_SESSION_NOT_FOUND")
	ErrInvalidSessionEpoch = errors.New("share: INVALID_SHARE_SESSION_EPOCH")
	ErrSessionLimit        = errors.New("share: SHARE_SESSION_LIMIT_REACHED")
)

// SessionKey names a share session.
type SessionKey struct{ Group, Member string }

// TP is a topic partition by topic id.
type TP struct {
	TopicID   [16]byte
	Partition int32
}

// Session is one member's share session on this broker.
type Session struct {
	Epoch    int32
	Parts    map[TP]bool
	lastUsed time.Time
}

// UseSession checks a request's session epoch and, if it is accepted,
// applies it: epoch 0 opens a new session (with add), a positive epoch
// must match, then add/forget change the session's partitions and the
// epoch moves on; -1 closes the session (returned, with its partitions,
// for the caller to release). The partitions of the session after the
// request are returned.
func (m *Manager) UseSession(k SessionKey, epoch int32, add, forget []TP) (parts []TP, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[k]
	switch {
	case epoch == 0:
		if s == nil && len(m.sessions) >= m.cfg.MaxSessions {
			return nil, ErrSessionLimit
		}
		s = &Session{Epoch: 0, Parts: map[TP]bool{}}
		m.sessions[k] = s
	case s == nil:
		return nil, ErrSessionNotFound
	case epoch == -1:
		delete(m.sessions, k)
		for tp := range s.Parts {
			parts = append(parts, tp)
		}
		for _, tp := range add {
			if !s.Parts[tp] {
				parts = append(parts, tp)
			}
		}
		return parts, nil
	case epoch != s.Epoch:
		return nil, ErrInvalidSessionEpoch
	}
	for _, tp := range add {
		s.Parts[tp] = true
	}
	for _, tp := range forget {
		delete(s.Parts, tp)
	}
	s.Epoch++
	if s.Epoch <= 0 {
		s.Epoch = 1
	}
	s.lastUsed = m.clk.Now()
	for tp := range s.Parts {
		parts = append(parts, tp)
	}
	return parts, nil
}

// CheckSession checks a ShareAcknowledge's epoch (which may not open a
// session) and applies it like UseSession.
func (m *Manager) CheckSession(k SessionKey, epoch int32) ([]TP, error) {
	if epoch == 0 {
		return nil, ErrInvalidSessionEpoch
	}
	return m.UseSession(k, epoch, nil, nil)
}

// expireSessions closes sessions unused for SessionIdle and releases
// what their members hold.
func (m *Manager) expireSessions(now time.Time) {
	type gone struct {
		k     SessionKey
		parts []TP
	}
	var idle []gone
	m.mu.Lock()
	for k, s := range m.sessions {
		if now.Sub(s.lastUsed) > m.cfg.SessionIdle {
			g := gone{k: k}
			for tp := range s.Parts {
				g.parts = append(g.parts, tp)
			}
			idle = append(idle, g)
			delete(m.sessions, k)
		}
	}
	m.mu.Unlock()
	for _, g := range idle {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, tp := range g.parts {
				_ = m.Release(ctx, Key{Group: g.k.Group, TopicID: tp.TopicID, Partition: tp.Partition}, g.k.Member)
			}
		}()
	}
}
