package config

import "testing"

// TestOpNameKey checks that the key OpNameKey writes names its op and no
// other, whether op_name_config reads it as a plain name or a regex.
func TestOpNameKey(t *testing.T) {
	tests := []struct {
		name, others string
		wantPlain    bool
	}{
		{name: "/features/features.0/Conv", others: "/features/features.0/Conv_1", wantPlain: true},
		{name: "Conv_0", others: "Conv_01", wantPlain: true},
		{name: "layer[0] (conv)+1", others: "layer[0] (conv)+12"},
		{name: "a.*b", others: "axxb"},
	}
	for _, tt := range tests {
		key := OpNameKey(tt.name)
		re, err := namePattern(key)
		if err != nil {
			t.Fatalf("%q: key %q does not compile: %v", tt.name, key, err)
		}
		if plain := re == nil; plain != tt.wantPlain {
			t.Errorf("%q: key %q plain %v, want %v", tt.name, key, plain, tt.wantPlain)
		}
		e := &OpEntry{Key: key, Re: re}
		if !opNameMatches(e, []string{tt.name}) {
			t.Errorf("%q: key %q does not match it", tt.name, key)
		}
		if opNameMatches(e, []string{tt.others}) {
			t.Errorf("%q: key %q also matches %q", tt.name, key, tt.others)
		}
	}
}
