package config

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph/onnxpb"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestGuideRules checks each rule of the guide (and of torch.ao, which the
// guide builds on) on the guide-shaped model as torch's dynamo and
// TorchScript exporters write it (testdata/torch). Dtypes tell the levels
// apart.
func TestGuideRules(t *testing.T) {
	const specs = `
quantization_spec:
  i4: &i4 {dtype: int4, granularity: {type: per_tensor}}
  i16: &i16 {dtype: int16}
`
	tests := []struct {
		rule, name, cfg   string
		variant           string
		node, slot, dtype string
	}{
		// 1. Precedence: a module name entry covers the module's children
		// and outranks their type entries.
		{"1", "module name covers children over their type", specs + `
quantization_config:
  module_type_configs:
    torch.nn.modules.conv.ConvTranspose2d: {op_state_spec: {weight: *i4}}
  module_name_configs:
    decoder: null
`, "dynamo", "node_conv_transpose2d", "weight", "none"},
		{"1", "type applies without the name", specs + `
quantization_config:
  module_type_configs:
    torch.nn.modules.conv.ConvTranspose2d: {op_state_spec: {weight: *i4}}
`, "dynamo", "node_conv_transpose2d", "weight", "int4"},
		{"1", "parent name on TorchScript", specs + `
quantization_config:
  module_name_configs:
    model: {op_input_spec: {"*": *i16}}
`, "torchscript", "/model/selfattention/layer.0/mha/Softmax", "input 0", "int16"},
		// 2. Names and regexes.
		{"2", "exact name beats an earlier regex", specs + `
quantization_config:
  module_name_configs:
    "model\\..*": {op_input_spec: {"*": *i4}}
    model.selfattention.layer.0: {op_input_spec: {"*": *i16}}
`, "torchscript", "/model/selfattention/layer.0/mha/Softmax", "input 0", "int16"},
		{"2", "a plain name's dot is no wildcard", specs + `
quantization_config:
  module_name_configs:
    decoderXdeconv1: {op_state_spec: {weight: *i4}}
`, "torchscript", "/decoder/deconv1/ConvTranspose", "weight", "int8"},
		{"2", "a regex matches a prefix (re.match)", specs + `
quantization_config:
  module_name_configs:
    "sub.*_a": {op_input_spec: {"*": *i16}}
`, "torchscript", "/submodule_a/Add_1", "input 0", "int16"},
		{"2", "a regex does not match elsewhere in the name", specs + `
quantization_config:
  module_name_configs:
    "(deconv)+": {op_state_spec: {weight: *i4}}
`, "torchscript", "/decoder/deconv1/ConvTranspose", "weight", "int8"},
		// 3. Op names: ONNX names, graph-mode FX names, eager names.
		{"3", "graph-mode name", specs + `
quantization_config:
  global_config:
    op_name_config: {linear_1: {op_input_spec: {"*": *i16}}}
`, "dynamo", "node_MatMul_13", "input 0", "int16"},
		{"3", "eager name (dynamo)", specs + `
quantization_config:
  execution_mode: eager
  global_config:
    op_name_config: {submodule_a.add_1: null}
`, "dynamo", "node_add_1", "output 0", "none"},
		{"3", "eager name (TorchScript)", specs + `
quantization_config:
  execution_mode: eager
  global_config:
    op_name_config: {submodule_a.add_1: null}
`, "torchscript", "/submodule_a/Add_1", "output 0", "none"},
		{"3", "eager name leaves the other add", specs + `
quantization_config:
  execution_mode: eager
  global_config:
    op_name_config: {submodule_a.add_1: null}
`, "torchscript", "/submodule_a/Add", "output 0", "int8"},
		{"3", "graph-mode names are not eager names", specs + `
quantization_config:
  global_config:
    op_name_config: {add_1: null}
`, "dynamo", "node_add_1", "output 0", "none"},
		{"3", "ONNX names keep working", specs + `
quantization_config:
  global_config:
    op_name_config: {/submodule_a/Add_1: null}
`, "torchscript", "/submodule_a/Add_1", "output 0", "none"},
		// 4. Ops that are patterns in ONNX: linear is MatMul + Add.
		{"4", "linear op covers the bias Add", specs + `
quantization_config:
  global_config:
    op_type_config: {linear: null}
`, "dynamo", "node_linear", "output 0", "none"},
		{"4", "the edge inside linear is not quantized", "", "dynamo", "node_MatMul_5", "output 0", "none"},
		{"4", "bias of a decomposed linear is addressable (dynamo)", specs + `
quantization_config:
  global_config:
    op_type_config: {linear: {op_state_spec: {weight: *i4, bias: *i16}}}
`, "dynamo", "node_linear", "bias", "int16"},
		{"4", "bias of a decomposed linear is addressable (TorchScript)", specs + `
quantization_config:
  global_config:
    op_type_config: {linear: {op_state_spec: {weight: *i4, bias: *i16}}}
`, "torchscript", "/fc/Add", "bias", "int16"},
		{"4", "decomposed gelu is one op (dynamo)", specs + `
quantization_config:
  global_config:
    op_type_config: {gelu: null}
`, "dynamo", "node_Erf_26", "output 0", "none"},
		{"4", "decomposed gelu is one op (TorchScript)", specs + `
quantization_config:
  global_config:
    op_type_config: {gelu: null}
`, "torchscript", "/model/act/Erf", "output 0", "none"},
		{"4", "no Q/DQ inside a decomposed layer_norm (TorchScript)", "", "torchscript", "/model/norm/Sub", "output 0", "none"},
		// 5. Tensor keys are torch argument names.
		{"5", "conv2d input", specs + `
quantization_config:
  global_config:
    op_type_config: {conv2d: {op_input_spec: {input: *i16}}}
`, "torchscript", "/conv1/Conv", "input 0", "int16"},
		{"5", "add other", specs + `
quantization_config:
  global_config:
    op_type_config: {add: {op_input_spec: {other: *i16}}}
`, "dynamo", "node_add_4", "input 1", "int16"},
		{"5", "add other leaves input", specs + `
quantization_config:
  global_config:
    op_type_config: {add: {op_input_spec: {other: *i16}}}
`, "dynamo", "node_add_4", "input 0", "none"},
		{"5", "linear input of the MatMul", specs + `
quantization_config:
  global_config:
    op_input_spec: {input: *i16}
`, "torchscript", "/fc/MatMul", "input 0", "int16"},
		// 6. Module boundaries: the root's inputs follow the forward's
		// arguments.
		{"6", "root input 0 is x", specs + `
quantization_config:
  global_config:
    module_input_spec: {0: *i16}
`, "dynamo", "node_conv2d", "input 0", "int16"},
		// 7. Explicit choices win.
		{"7", "{} is the default spec", specs + `
quantization_config:
  global_config:
    op_input_spec: {"*": {}}
`, "dynamo", "node_conv2d", "input 0", "int8"},
		{"7", "{} is the default op config", specs + `
quantization_config:
  global_config:
    op_input_spec: null
    op_type_config: {conv2d: {}}
`, "dynamo", "node_conv2d", "input 0", "int8"},
		{"7", "torch.add", specs + `
quantization_config:
  global_config:
    op_type_config: {torch.add: null}
`, "dynamo", "node_add", "output 0", "none"},
		{"7", "aten.linear.default", specs + `
quantization_config:
  global_config:
    op_type_config: {aten.linear.default: null}
`, "torchscript", "/model/lm_head/Add", "output 0", "none"},
		{"7", "torch.nn.functional.softmax", specs + `
quantization_config:
  global_config:
    op_type_config: {torch.nn.functional.softmax: null}
`, "dynamo", "node__softmax", "output 0", "none"},
		// 8. Missing keys and calls.
		{"8", "guide preset name", `
quantization_config:
  preset: W_MXFP4_A_FP8
`, "dynamo", "node_conv2d", "input 0", "float8_e4m3fn"},
		{"8", "module name, object type and index", specs + `
quantization_config:
  module_name_object_type_order_configs:
    - {module_name: submodule_a, object_type: add, index: 1, config: null}
`, "torchscript", "/submodule_a/Add_1", "output 0", "none"},
		{"8", "module name, object type and index leaves index 0", specs + `
quantization_config:
  module_name_object_type_order_configs:
    - {module_name: submodule_a, object_type: add, index: 1, config: null}
`, "torchscript", "/submodule_a/Add", "output 0", "int8"},
		{"8", "ordered entry outranks module name", specs + `
quantization_config:
  module_name_configs:
    submodule_a: null
  module_name_object_type_order_configs:
    - {module_name: submodule_a, object_type: add, index: 0, config: {op_output_spec: {"*": *i16}}}
`, "dynamo", "node_add", "output 0", "int16"},
	}
	for _, tt := range tests {
		t.Run(tt.rule+"/"+tt.variant+"/"+tt.name, func(t *testing.T) {
			res, err := Resolve(mustParse(t, "r.yaml", tt.cfg).Quant, torchExport(t, tt.variant).Graph)
			if err != nil {
				t.Fatal(err)
			}
			if got := specAt(t, res, tt.node, tt.slot); got != tt.dtype {
				t.Errorf("%s %s = %s, want %s\n%s", tt.node, tt.slot, got, tt.dtype, dump(res))
			}
		})
	}
}

// TestGuideRuleWarnings: what matched is not reported as matching nothing,
// and what matched nothing is.
func TestGuideRuleWarnings(t *testing.T) {
	tests := []struct {
		name, cfg, variant string
		want               []string // substrings, one per warning, in order
	}{
		{"a module with children matches", `
quantization_config:
  module_name_configs:
    decoder: null
`, "dynamo", nil},
		{"an exact name shadowed by no regex", `
quantization_config:
  module_name_configs:
    "model\\..*": null
    model.selfattention.layer.0: null
`, "torchscript", nil},
		{"graph and eager names match", `
quantization_config:
  global_config:
    op_name_config: {linear_2: null, node_linear_3: null}
`, "dynamo", nil},
		{"eager names are not graph names", `
quantization_config:
  global_config:
    op_name_config: {submodule_a.add_1: null}
`, "dynamo", []string{`op_name_config["submodule_a.add_1"] matches no node`}},
		{"a TorchScript export has no graph-mode names", `
quantization_config:
  global_config:
    op_name_config: {linear_2: null}
`, "torchscript", []string{"op_name_config.linear_2 matches no node where that config applies: this model records no graph-mode op names"}},
		{"eager names reach a TorchScript export", `
quantization_config:
  execution_mode: eager
  global_config:
    op_name_config: {submodule_a.add: null}
`, "torchscript", []string{"execution_mode eager: op_name_config keys use eager names"}},
		{"a histogram calculator on weights does nothing", `
quantization_config:
  global_config:
    op_state_spec:
      weight: {dtype: int8, qparam_calculator: percentile}
`, "dynamo", []string{"qparam_calculator percentile has no effect on weights"}},
		{"a name key that matches no tensor", `
quantization_config:
  global_config:
    op_type_config:
      softmax: {op_input_spec: {other: {dtype: int8}}}
`, "dynamo", []string{"op_input_spec key other matches no tensor"}},
		{"module input indices beyond the module's inputs", `
quantization_config:
  module_name_configs:
    submodule_a:
      module_input_spec: {0: {dtype: int8}, 1: {dtype: int8}}
`, "torchscript", []string{"module_input_spec key 1 matches no tensor where it applies: a module's inputs"}},
		{"an ordered entry past the calls", `
quantization_config:
  module_name_object_type_order_configs:
    - {module_name: submodule_a, object_type: add, index: 2, config: null}
`, "torchscript", []string{`module "submodule_a" runs no add call number 2`}},
		{"execution_mode eager says what it changes", `
quantization_config:
  execution_mode: eager
`, "torchscript", []string{"execution_mode eager: op_name_config keys use eager names"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Resolve(mustParse(t, "w.yaml", tt.cfg).Quant, torchExport(t, tt.variant).Graph)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Warnings) != len(tt.want) {
				t.Fatalf("got %d warnings, want %d:\n%s", len(res.Warnings), len(tt.want), dump(&Resolution{Warnings: res.Warnings}))
			}
			for i, w := range res.Warnings {
				if !strings.Contains(w.Error(), tt.want[i]) {
					t.Errorf("warning %d = %s, want it to contain %q", i, w.Error(), tt.want[i])
				}
			}
		})
	}
}

// TestGuideRuleErrors: keys that would do nothing are errors.
func TestGuideRuleErrors(t *testing.T) {
	tests := []struct{ name, cfg, want string }{
		{"unknown tensor key", "quantization_config:\n  global_config:\n    op_input_spec: {othr: {dtype: int8}}\n", `did you mean "other"?`},
		{"bad execution mode", "quantization_config:\n  execution_mode: eagre\n", `did you mean "eager"?`},
		{"ordered entry without index", "quantization_config:\n  module_name_object_type_order_configs:\n    - {module_name: a, object_type: add, config: null}\n", "needs object_type, index and config"},
		{"unknown preset", "quantization_config:\n  preset: W_INT8_A_INT9\n", "unknown preset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.cfg), "e.yaml")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestModuleInputsOfLocalFunction: a module exported as a local function
// keeps the forward's argument order, so mha(h, h, h) has inputs 0, 1, 2.
func TestModuleInputsOfLocalFunction(t *testing.T) {
	b := testmodels.New("functions", 17)
	b.Model.OpsetImport = append(b.Model.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String("pkg.torch"), Version: proto.Int64(1)})
	b.Model.Functions = append(b.Model.Functions, &onnxpb.FunctionProto{
		Name: proto.String("MultiheadAttention"), Domain: proto.String("pkg.torch"),
		Input: []string{"q", "k", "v"}, Output: []string{"o"},
		Node: []*onnxpb.NodeProto{
			{OpType: proto.String("MatMul"), Input: []string{"q", "k"}, Output: []string{"s"}},
			{OpType: proto.String("MatMul"), Input: []string{"s", "v"}, Output: []string{"o"}},
		},
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
	})
	b.Input("h", tensor.Float, 4, 4).Output("y", tensor.Float, 4, 4)
	n := b.Node("MultiheadAttention", "/mha/MultiheadAttention", []string{"h", "h", "h"}, []string{"y"})
	n.Domain = proto.String("pkg.torch")
	m, err := onnxgraph.LoadBytes(b.Bytes(), "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustParse(t, "f.yaml", `
quantization_config:
  module_name_configs:
    mha:
      module_input_spec: {0: {dtype: int8}, 1: {dtype: int16}, 2: {dtype: uint8, qscheme: asymmetric}}
`)
	res, err := Resolve(cfg.Quant, m.Graph)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"int8", "int16", "uint8"} {
		if got := specAt(t, res, "/mha/MultiheadAttention", fmt.Sprintf("input %d", i)); got != want {
			t.Errorf("input %d = %s, want %s", i, got, want)
		}
	}
	if len(res.Warnings) != 0 {
		t.Errorf("warnings: %v", res.Warnings)
	}
}

// TestTorchOpType: the guide's rule (the part after the last period),
// with aten's overload and leading underscore dropped.
func TestTorchOpType(t *testing.T) {
	tests := []struct {
		key, want string
		ok        bool
	}{
		{"torch.add", "add", true},
		{"torch.nn.functional.max_pool2d", "max_pool2d", true},
		{"aten.linear.default", "linear", true},
		{"torch.ops.aten.add.Tensor", "add", true},
		{"aten._softmax.default", "softmax", true},
		{"linear", "", false},
		{"com.microsoft.FusedMatMul", "", false},
	}
	for _, tt := range tests {
		got, ok := torchOpType(tt.key)
		if got != tt.want || ok != tt.ok {
			t.Errorf("torchOpType(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
}

// TestNamePattern: plain names are compared as strings, other keys are
// regexes matched at the start of a name.
func TestNamePattern(t *testing.T) {
	tests := []struct {
		key, name string
		plain     bool
		match     bool
	}{
		{"model.layer.0", "model.layer.0", true, true},
		{"model.layer.0", "modelXlayerX0", true, false},
		{"/fc/MatMul", "/fc/MatMul", true, true},
		{"foo.*", "foo.bar.conv0", false, true},
		{"foo.*bar.*conv[0-9]+", "foo.bar.conv0", false, true},
		{"bar.*", "foo.bar", false, false},
		{"foo$", "foo.bar", false, false},
	}
	for _, tt := range tests {
		re, err := namePattern(tt.key)
		if err != nil {
			t.Fatalf("namePattern(%q): %v", tt.key, err)
		}
		if (re == nil) != tt.plain {
			t.Errorf("namePattern(%q): plain = %v, want %v", tt.key, re == nil, tt.plain)
			continue
		}
		match := tt.key == tt.name
		if re != nil {
			match = re.MatchString(tt.name)
		}
		if match != tt.match {
			t.Errorf("%q on %q: match = %v, want %v", tt.key, tt.name, match, tt.match)
		}
	}
}
