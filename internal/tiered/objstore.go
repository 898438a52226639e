package tiered

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// ObjectStore is what tiered storage needs of an object store.
type ObjectStore interface {
	// PutStream uploads the size bytes r holds as key. r seeks back to
	// its start for a retry.
	PutStream(ctx context.Context, key string, r io.ReadSeeker, size int64) error
	// Put uploads data as key.
	Put(ctx context.Context, key string, data []byte) error
	// GetTo writes object key to w, at most limit bytes (more is an
	// error), and returns the bytes written.
	GetTo(ctx context.Context, key string, w io.Writer, limit int64) (int64, error)
	// Get reads a (small) object whole, at most limit bytes.
	Get(ctx context.Context, key string, limit int64) ([]byte, error)
	// Delete removes key (no error if it is gone).
	Delete(ctx context.Context, key string) error
	// List returns the keys under prefix.
	List(ctx context.Context, prefix string) ([]string, error)
}

// s3Store is an S3-compatible bucket through minio-go.
type s3Store struct {
	c      *minio.Client
	bucket string
}

// credentialChain is the standard chain, in AWS's order: the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), the shared
// credentials file (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials,
// profile AWS_PROFILE), then an instance or task role.
func credentialChain() *credentials.Credentials {
	return credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{},
	})
}

// NewS3 connects to the bucket cfg names (nothing is sent yet).
func NewS3(cfg Config) (ObjectStore, error) {
	host, secure := "s3.amazonaws.com", true
	if cfg.Region != "" && cfg.Endpoint == "" {
		host = "s3." + cfg.Region + ".amazonaws.com"
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("tiered: endpoint %q: %w", cfg.Endpoint, err)
		}
		host, secure = u.Host, u.Scheme == "https"
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	// Few retries inside the client: a store that is down should fail
	// the upload soon, so that the manager's backoff, its log line and
	// its metric say so, rather than hold it in the client's own retries.
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("tiered: object store client: %w", err)
	}
	// A store that cannot be reached fails a request within the I/O
	// timeout, whatever the way: a connection not made, data sent and
	// never acknowledged (packets vanish: TCP_USER_TIMEOUT; the kernel
	// would retransmit for a quarter of an hour), no answer to a request
	// sent. Without it an upload on a kept-alive connection waited a
	// minute or more (TestTieredStoreUnreachable).
	timeout := cfg.withDefaults().IOTimeout
	tr.DialContext = (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: userTimeout(timeout)}).DialContext
	tr.ResponseHeaderTimeout = timeout
	c, err := minio.New(host, &minio.Options{Creds: credentialChain(), Secure: secure, Region: cfg.Region, BucketLookup: lookup, MaxRetries: 2, Transport: tr})
	if err != nil {
		return nil, fmt.Errorf("tiered: object store client: %w", err)
	}
	return &s3Store{c: c, bucket: cfg.Bucket}, nil
}

func (s *s3Store) PutStream(ctx context.Context, key string, r io.ReadSeeker, size int64) error {
	// A known size at or under the client's part size (16 MiB) is one
	// PUT, streamed with a chunked signature; above it, parts of 16 MiB.
	_, err := s.c.PutObject(ctx, s.bucket, key, r, size, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	return err
}

func (s *s3Store) Put(ctx context.Context, key string, data []byte) error {
	_, err := s.c.PutObject(ctx, s.bucket, key, bytesReader(data), int64(len(data)), minio.PutObjectOptions{ContentType: "application/json"})
	return err
}

// copyBufs are GetTo's buffers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// GetTo is one GET streamed to w as the bytes arrive: the response's body
// itself (minio-go's Core), not its Object, whose every Read is a round
// trip to a goroutine that fills the whole buffer first (so a reader of
// w saw nothing until a MiB had arrived); FGetObject would add a HEAD and
// a rename. The caller checks the bytes as they arrive.
func (s *s3Store) GetTo(ctx context.Context, key string, w io.Writer, limit int64) (int64, error) {
	body, _, _, err := minio.Core{Client: s.c}.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return 0, err
	}
	defer body.Close()
	// A large buffer: a read takes what the socket holds, up to it.
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	n, err := io.CopyBuffer(w, io.LimitReader(body, limit+1), *buf)
	if err == nil && n > limit {
		err = errors.New("tiered: object " + key + " is larger than expected")
	}
	return n, err
}

func (s *s3Store) Get(ctx context.Context, key string, limit int64) ([]byte, error) {
	o, err := s.c.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	b, err := io.ReadAll(io.LimitReader(o, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errors.New("tiered: object " + key + " is larger than expected")
	}
	return b, nil
}

func (s *s3Store) Delete(ctx context.Context, key string) error {
	return s.c.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
}

func (s *s3Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return keys, o.Err
		}
		keys = append(keys, o.Key)
	}
	return keys, nil
}

// userTimeout sets TCP_USER_TIMEOUT on a connection's socket (Linux): the
// connection fails once data it sent stays unacknowledged for d.
func userTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = setUserTimeout(fd, d) })
		if err != nil {
			return err
		}
		return serr
	}
}
