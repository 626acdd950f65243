module github.com/coreaiq/coreaiq

go 1.26

tool google.golang.org/protobuf/cmd/protoc-gen-go

require (
	github.com/ebitengine/purego v0.11.3
	github.com/spf13/cobra v1.10.2
	go.yaml.in/yaml/v3 v3.0.4
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)
