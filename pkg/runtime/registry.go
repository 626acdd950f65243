package runtime

import (
	"fmt"
	"sort"
	"strings"

	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
)

// Constructor opens a Session for a model.
type Constructor func(m *onnxgraph.Model, opts Options) (Session, error)

// engines maps an engine name to its constructor. The built-in engine
// registers itself; optional engines register from files behind build tags.
var engines = map[string]Constructor{}

// RegisterEngine makes an engine available to Open under name. It is meant
// to be called from init functions.
func RegisterEngine(name string, c Constructor) { engines[name] = c }

// Engines lists the names of the engines compiled into this binary, sorted.
func Engines() []string {
	names := make([]string, 0, len(engines))
	for n := range engines {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ErrEngineUnavailable reports an engine that this binary does not contain.
type ErrEngineUnavailable struct {
	Name string
}

func (e *ErrEngineUnavailable) Error() string {
	hint := ""
	if e.Name == "ort" {
		hint = "; the ONNX Runtime engine needs a binary built with `go build -tags ort` and ONNXRUNTIME_LIB pointing at libonnxruntime"
	}
	return fmt.Sprintf("engine %q is not available in this binary (available: %s)%s", e.Name, strings.Join(Engines(), ", "), hint)
}

// Open compiles m for the named engine ("go" when name is empty).
func Open(name string, m *onnxgraph.Model, opts Options) (Session, error) {
	if name == "" {
		name = "go"
	}
	c, ok := engines[name]
	if !ok {
		return nil, &ErrEngineUnavailable{Name: name}
	}
	return c(m, opts)
}

func init() {
	RegisterEngine("go", func(m *onnxgraph.Model, opts Options) (Session, error) {
		s, err := NewGoSession(m, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}
