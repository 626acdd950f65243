#!/usr/bin/env bash
# Regenerates the ONNX protobuf Go code from pkg/onnxgraph/onnxpb/onnx-ml.proto.
set -euo pipefail
cd "$(dirname "$0")/.."
plugin=$(go tool -n protoc-gen-go)
cd pkg/onnxgraph/onnxpb
protoc --plugin=protoc-gen-go="$plugin" --go_out=. --go_opt=paths=source_relative onnx-ml.proto
