package spec

import _ "github.com/coreaiq/coreaiq/pkg/onnxgraph"
