package broker

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
)

// txnErrorCode is the Kafka code of a coordinator error.
func txnErrorCode(err error) int16 {
	var ke *kerr.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ke):
		return ke.Code
	}
	return kerr.CoordinatorNotAvailable.Code
}
