package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/admin"
)

// Changing the controller quorum online (KIP-853): `holdfast cluster
// add-controller` / `remove-controller`, also under `holdfast
// metadata-quorum` as kafka-metadata-quorum.sh spells them. Unlike
// Kafka's add-controller, which runs with the new controller's own config,
// these name the node: it was started with `serve --join` and registered,
// and the cluster promotes it once it has the metadata log.

func addControllerCmd(conn *connFlags) *cobra.Command {
	var id int32
	var dir string
	c := &cobra.Command{
		Use:   "add-controller --controller-id N",
		Short: "Make a running node a voter of the controller quorum, once it has caught up with the metadata log (AddRaftVoter)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := voterArgs(id, dir)
			if err != nil {
				return err
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				req := kmsg.NewPtrAddRaftVoterRequest()
				req.VoterID, req.VoterDirectoryID = id, d
				// The catch-up wait ends a second before the command's
				// --timeout, so the answer says why.
				if dl, ok := ctx.Deadline(); ok {
					req.TimeoutMillis = int32(max(time.Until(dl).Milliseconds()-1000, 1000))
				}
				err := retryNotController(ctx, kerr.DuplicateVoter, func() (int16, *string, error) {
					resp, err := req.RequestWith(ctx, c.K)
					if err != nil {
						return 0, nil, err
					}
					return resp.ErrorCode, resp.ErrorMessage, nil
				})
				if err != nil {
					return fmt.Errorf("node %d: %w", id, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "node %d is a voter of the controller quorum\n", id)
				return nil
			})
		},
	}
	voterFlags(c, &id, &dir, "the node to make a voter (running, started with serve --join)")
	return c
}

func removeControllerCmd(conn *connFlags) *cobra.Command {
	var id int32
	var dir string
	c := &cobra.Command{
		Use:   "remove-controller --controller-id N",
		Short: "Take a node out of the controller quorum, for instance a voter whose machine is gone (RemoveRaftVoter); it stays a broker until unregistered",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := voterArgs(id, dir)
			if err != nil {
				return err
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				req := kmsg.NewPtrRemoveRaftVoterRequest()
				req.VoterID, req.VoterDirectoryID = id, d
				err := retryNotController(ctx, kerr.VoterNotFound, func() (int16, *string, error) {
					resp, err := req.RequestWith(ctx, c.K)
					if err != nil {
						return 0, nil, err
					}
					return resp.ErrorCode, resp.ErrorMessage, nil
				})
				if err != nil {
					return fmt.Errorf("node %d: %w", id, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "node %d is no longer a voter of the controller quorum\n", id)
				return nil
			})
		},
	}
	voterFlags(c, &id, &dir, "the voter to remove")
	return c
}

func voterFlags(c *cobra.Command, id *int32, dir *string, what string) {
	c.Flags().Int32Var(id, "controller-id", -1, what)
	c.Flags().StringVar(dir, "controller-directory-id", "", "the node's directory id (metadata-quorum --replication shows it); empty: whichever it registered")
}

func voterArgs(id int32, dir string) ([16]byte, error) {
	var d [16]byte
	if id <= 0 {
		return d, usagef("--controller-id: name the node")
	}
	if dir == "" {
		return d, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(dir)
	if err != nil || len(b) != 16 {
		return d, usagef("--controller-directory-id %q: want a directory id as metadata-quorum --replication prints it (22 characters)", dir)
	}
	copy(d[:], b)
	return d, nil
}

// retryNotController sends a quorum change until it is answered by a
// controller: NOT_CONTROLLER (none elected yet, as right after the
// controller died, or it changed meanwhile) is asked again, as Kafka's
// admin client does, until ctx ends. done is the error that, on a retry,
// means an earlier attempt made the change before its answer was lost.
func retryNotController(ctx context.Context, done *kerr.Error, send func() (int16, *string, error)) error {
	for try := 0; ; try++ {
		code, msg, err := send()
		switch {
		case err != nil:
			return err
		case code == 0, try > 0 && code == done.Code:
			return nil
		case code != kerr.NotController.Code:
			return fmt.Errorf("%w %s", kerr.ErrorForCode(code), deref(msg))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w %s (no controller answered before --timeout)", kerr.ErrorForCode(code), deref(msg))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// dirID prints a directory id as Kafka does (base64 URL, no padding); "-"
// for none.
func dirID(d [16]byte) string {
	if d == ([16]byte{}) {
		return "-"
	}
	return base64.RawURLEncoding.EncodeToString(d[:])
}
