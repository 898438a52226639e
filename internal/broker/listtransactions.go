package broker

import (
	"context"
	"regexp"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/wire"
)

// ListTransactions v0-v2 (KIP-664; v1 adds the duration filter, KIP-994;
// v2 a transactional id regex, KIP-1152).
func (b *Broker) handleListTransactions(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.ListTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	known := kmsg.TransactionStateStrings()
	var states []string
	for _, s := range req.StateFilters {
		if slices.Contains(known, s) {
			states = append(states, s)
		} else {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, s)
		}
	}
	var re *regexp.Regexp
	if req.TransactionalIDPattern != nil && *req.TransactionalIDPattern != "" {
		var err error
		if re, err = regexp.Compile(*req.TransactionalIDPattern); err != nil {
			resp.ErrorCode = kerr.InvalidRegularExpression.Code
			return wire.Respond(resp)
		}
	}
	for _, in := range b.coord.Txn().List() {
		switch {
		case len(req.StateFilters) > 0 && !slices.Contains(states, in.State.String()):
			continue
		case len(req.ProducerIDFilters) > 0 && !slices.Contains(req.ProducerIDFilters, in.ProducerID):
			continue
		case req.Version >= 1 && req.DurationFilterMillis >= 0 && !in.Start.IsZero() && time.Since(in.Start).Milliseconds() < req.DurationFilterMillis:
			// KIP-994: only transactions running for longer than this
			// (Kafka counts one with no start, -1, as running forever).
			continue
		case re != nil && !re.MatchString(in.ID):
			continue
		case !b.authorize(r, auth.OpDescribe, auth.ResourceTransactionalID, in.ID):
			continue // only the ids one may describe
		}
		st := kmsg.NewListTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.TransactionState = in.ID, in.ProducerID, in.State.String()
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return wire.Respond(resp)
}
