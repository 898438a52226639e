module go.etcd.io/raft/v3

go 1.26

toolchain go1.26.4

require (
	github.com/cockroachdb/datadriven v1.0.2
	github.com/stretchr/testify v1.11.1
	google.golang.org/protobuf v1.36.11
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
